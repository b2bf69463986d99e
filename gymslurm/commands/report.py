"""``gymslurm report RUN``: write the run's self-contained report.html."""

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
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.run_site import run_backend
    from gymslurm.launcher.rundir import resolve_run_or_job
    from gymslurm.launcher.views.report import write_report

    run = resolve_run_or_job(args.run, Path(args.run_root).resolve())
    path = write_report(run, run_backend(run), args.output)
    print(f"wrote {path} (open it in a browser; it needs no server and no network)")
    return 0
