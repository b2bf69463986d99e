"""``gymslurm report RUN [--baseline OTHER]``: write the run's self-contained report.html.

``--baseline OTHER`` compares the run (the candidate) with OTHER as ``gymslurm compare OTHER RUN``
does (gymslurm/comparison.py), keeps the document as ``<run>/comparison.json`` (store/comparison_file.py)
and the page shows it: compare's table, its chart (each benchmark's delta on its interval, the flips)
and notes. Docs: docs/compare.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gymslurm.commands.runs import DEFAULT_RUN_ROOT


def main(argv: list[str]) -> int:
    """``gymslurm report``: parse its arguments and run it."""
    parser = argparse.ArgumentParser(
        prog="gymslurm report", description="Write the run's self-contained report.html (no server needed)."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("--output", type=Path, help="where to write it (default: <run>/report.html)")
    parser.add_argument(
        "--baseline",
        metavar="OTHER",
        help="also compare the run with OTHER (a run, suite run or .jsonl), as gymslurm compare OTHER RUN",
    )
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.run_site import run_backend
    from gymslurm.launcher.rundir import resolve_run_or_job
    from gymslurm.launcher.views.report import write_report

    root = Path(args.run_root).resolve()
    run = resolve_run_or_job(args.run, root)
    if args.baseline is not None:
        from gymslurm.commands.compare import read_side
        from gymslurm.comparison import Options, compare_runs
        from gymslurm.store.comparison_file import write_comparison

        baseline = read_side(args.baseline, root, "reward")  # both sides read before anything is written
        candidate = read_side(str(run.root), root, "reward")
        document = compare_runs(baseline, candidate, Options(), (args.baseline, run.name))
        print(f"compared with {args.baseline}: {write_comparison(run.root, document)}")
    path = write_report(run, run_backend(run), args.output)
    print(f"wrote {path} (open it in a browser; it needs no server and no network)")
    return 0
