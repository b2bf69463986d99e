"""``gymslurm submit BENCHMARK [overrides]``: create a run and queue the first link of each shard's chain.

The run itself is made in new_run.py; ``--reverify RUN`` re-grades a run's judge failures (regrade.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gymslurm.commands.new_run import create_run, resolve_backend_name
from gymslurm.commands.runs import DEFAULT_RUN_ROOT
from gymslurm.launcher.settings import load_benchmark


def submit(
    benchmark: str, overrides: list[str], backend_name: str | None, dry_run: bool, *, wait: bool = False
) -> int:
    """``gymslurm submit``: create the run and queue the first link of each shard.

    A suite (``configs/suites/NAME.yaml``, a YAML file with ``benchmarks:``) or several benchmarks
    (every argument without ``=`` after the first) make a suite run (docs/suites.md).
    """
    from gymslurm.commands.new_suite import submit_suite
    from gymslurm.launcher.suite_settings import adhoc_suite, is_suite_file, load_suite, suite_path

    named = [benchmark, *(o for o in overrides if "=" not in o)]
    overrides = [o for o in overrides if "=" in o]
    if len(named) > 1:
        return submit_suite(adhoc_suite(named, overrides), overrides, backend_name, dry_run, wait=wait)
    path = suite_path(benchmark)
    if path is not None and is_suite_file(path):
        return submit_suite(load_suite(benchmark, overrides), overrides, backend_name, dry_run, wait=wait)
    settings, data = load_benchmark(benchmark, overrides)
    kind = resolve_backend_name(settings, backend_name)
    return create_run(settings, data, overrides, kind, Path.cwd(), dry_run=dry_run, wait=wait)


def nemo_gym_line(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``argv`` split at ``gym eval run``: submit's own arguments, and the NeMo Gym line's (or None)."""
    for start in range(len(argv) - 2):
        if argv[start : start + 3] == ["gym", "eval", "run"]:
            return argv[:start], argv[start + 3 :]
    return argv, None


def main(argv: list[str]) -> int:
    """``gymslurm submit``: parse its arguments and run it."""
    argv, line = nemo_gym_line(argv)
    parser = argparse.ArgumentParser(prog="gymslurm submit", description="Submit a benchmark as job chains.")
    parser.add_argument(
        "benchmark",
        nargs="?",
        help="configs/benchmarks/<name>.yaml or configs/suites/<name>.yaml name, or a path to a YAML file",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides, e.g. shards=3 slurm.partition=low; more benchmark names make a suite",
    )
    parser.add_argument(
        "--reverify",
        metavar="RUN",
        help="re-grade RUN's saved judge-failed answers as jobs (no benchmark: RUN's own, overrides on top)",
    )
    parser.add_argument(
        "--run-root",
        default=DEFAULT_RUN_ROOT,
        help=f"with --reverify: where RUN lives (default {DEFAULT_RUN_ROOT})",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the scripts; write and submit nothing")
    parser.add_argument("--backend", choices=["slurm", "local"], help="default: the benchmark's (auto)")
    parser.add_argument(
        "--wait",
        action="store_true",
        help="stay until every chain and the aggregation ended, then show status",
    )
    args = parser.parse_intermixed_args(argv)
    if line is not None:  # gymslurm submit [OPTIONS] [OVERRIDES] gym eval run ARGS (docs/nemo-gym.md)
        from gymslurm.commands.nemo_gym_serve import submit_line

        overrides = [*([args.benchmark] if args.benchmark else []), *args.overrides]
        return submit_line(line, overrides, args.backend, args.dry_run, wait=args.wait)
    if args.reverify is not None:
        from gymslurm.commands.regrade import submit_reverify

        overrides = [*([args.benchmark] if args.benchmark else []), *args.overrides]
        return submit_reverify(
            args.reverify, overrides, args.backend, args.dry_run, wait=args.wait, run_root=args.run_root
        )
    if args.benchmark is None:
        parser.error("a benchmark is needed (or --reverify RUN)")
    return submit(args.benchmark, args.overrides, args.backend, args.dry_run, wait=args.wait)
