"""``gymslurm compare RUN_A RUN_B``: the candidate (B) against the baseline (A), per benchmark.

Each side is a launcher run (its folder, or its name under ``--run-root``: its merged output is read)
or a collector output / merged ``.jsonl``. The figures are ``gymslurm/comparison.py``'s; the store
reads the runs (``store/task_rewards.py``). Prints a table, or the document with ``--json``;
``--html PAGE`` also writes a self-contained page with the chart. Exit 0, or 2 for an error: compare
judges nothing (``gymslurm gate`` does). Docs: docs/compare.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gymslurm.errors import ConfigError
from gymslurm.exitcodes import ExitCode

if TYPE_CHECKING:
    from gymslurm.comparison import BenchmarkRewards, ComparisonDocument
    from gymslurm.launcher.rundir import RunDir

DEFAULT_RUN_ROOT = "gymslurm_runs"
MAX_RESAMPLES = 1_000_000


def add_comparison_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``compare`` and ``gate`` share: how the figures are computed."""
    parser.add_argument("--metric", default="reward", help="the result field compared (default reward)")
    parser.add_argument("--confidence", type=float, default=0.95, help="the interval's level (default 0.95)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the resamples (default 0)")
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=2000,
        metavar="N",
        help="resamples of the bootstrap interval and of the sign-flip test (default 2000)",
    )
    parser.add_argument(
        "--run-root",
        default=DEFAULT_RUN_ROOT,
        help=f"where runs named by name live (default {DEFAULT_RUN_ROOT})",
    )


def main(argv: list[str]) -> int:
    """Run ``gymslurm compare``; return its exit code."""
    parser = argparse.ArgumentParser(
        prog="gymslurm compare",
        description="Compare a candidate run (B) with a baseline (A) per benchmark: the difference of "
        "the mean reward over the tasks both measured, its bootstrap interval, a paired test, and the "
        "tasks that flipped between pass and fail. Docs: docs/compare.md",
    )
    parser.add_argument("baseline", metavar="RUN_A", help="the baseline: a run (folder or name) or a .jsonl")
    parser.add_argument(
        "candidate", metavar="RUN_B", help="the candidate: a run (folder or name) or a .jsonl"
    )
    parser.add_argument("--json", action="store_true", help="print the comparison document (versioned)")
    parser.add_argument(
        "--html", type=Path, metavar="PAGE", help="also write a self-contained page with a chart"
    )
    add_comparison_arguments(parser)
    args = parser.parse_args(argv)
    document = comparison_from_args(args)
    if args.html is not None:
        from gymslurm.launcher.rundir import atomic_write
        from gymslurm.launcher.views.comparison import comparison_page

        atomic_write(args.html, comparison_page(document).encode())
    if args.json:
        sys.stdout.write(document.model_dump_json(indent=2) + "\n")
    else:
        from gymslurm.launcher.views.comparison import print_comparison

        print_comparison(document)
        if args.html is not None:
            print(f"page: {args.html}")
    return ExitCode.DONE


def comparison_from_args(args: argparse.Namespace) -> ComparisonDocument:
    """Read both sides and compare them, with the options checked first."""
    from gymslurm.comparison import Options, compare_runs

    if not 0.0 < args.confidence < 1.0:
        raise ConfigError(f"--confidence must lie strictly between 0 and 1, not {args.confidence}")
    if not 1 <= args.bootstrap <= MAX_RESAMPLES:
        raise ConfigError(f"--bootstrap must be between 1 and {MAX_RESAMPLES:,}, not {args.bootstrap}")
    root = Path(args.run_root).expanduser()
    baseline = read_side(args.baseline, root, args.metric)
    candidate = read_side(args.candidate, root, args.metric)
    options = Options(confidence=args.confidence, seed=args.seed, resamples=args.bootstrap)
    labels = (
        (baseline[0].source, candidate[0].source)
        if len(baseline) == len(candidate) == 1
        else (args.baseline, args.candidate)
    )
    return compare_runs(baseline, candidate, options, labels)


def read_side(ref: str, run_root: Path, metric: str) -> list[BenchmarkRewards]:
    """One side's benchmarks: a ``.jsonl`` file's one, or a launcher run's (its merged output).

    A list so that a suite run (one sub-run per benchmark) is read into one entry per benchmark.
    """
    from gymslurm.settings import max_rollout_attempts
    from gymslurm.store.task_rewards import read_task_rewards

    attempts = max_rollout_attempts()
    path = Path(ref).expanduser()
    if path.suffix == ".jsonl" or path.is_file():
        return [read_task_rewards(path, name=path.stem, metric=metric, adopt_attempts=attempts)]
    from gymslurm.launcher.rundir import resolve_run

    run = resolve_run(ref, run_root)
    from gymslurm.launcher.rundir import is_suite

    if is_suite(run):
        return _suite_side(run, metric)
    info = run.read_info()
    merged = run.merged_output(info.output_stem)
    if not merged.is_file():
        raise ConfigError(
            f"run {run.name} has no merged output yet ({merged}): its aggregation writes it once every "
            f"shard ended (gymslurm status {run.name}); or compare one shard's output .jsonl"
        )
    return [read_task_rewards(merged, name=info.benchmark, metric=metric, adopt_attempts=attempts)]


def _suite_side(run: RunDir, metric: str) -> list[BenchmarkRewards]:
    """A suite run's benchmarks, each from its own merged output (paired by name with the other side)."""
    from gymslurm.launcher.suite_run import member_run, read_suite_record
    from gymslurm.settings import max_rollout_attempts
    from gymslurm.store.task_rewards import read_task_rewards

    attempts, sides = max_rollout_attempts(), []
    for entry in read_suite_record(run).benchmarks:
        merged = member_run(run, entry.name).merged_output(entry.output_stem)
        if not merged.is_file():
            raise ConfigError(
                f"suite run {run.name}: benchmark {entry.name} has no merged output yet ({merged}): the "
                f"suite's aggregation writes it once every chain ended (gymslurm status {run.name})"
            )
        sides.append(read_task_rewards(merged, name=entry.name, metric=metric, adopt_attempts=attempts))
    return sides
