"""``gymslurm logs RUN``: a link's job log and its servers' logs (``--follow``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gymslurm.commands.runs import DEFAULT_RUN_ROOT


def main(argv: list[str]) -> int:
    """``gymslurm logs``: parse its arguments and run it."""
    parser = argparse.ArgumentParser(
        prog="gymslurm logs", description="Print a link's job log and its Environment Servers' logs."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--shard", type=int, default=0, help="the shard (default 0)")
    which.add_argument("--aggregate", action="store_true", help="the aggregation job's log")
    parser.add_argument(
        "--link", type=int, default=-1, help="1 = the chain's first job, -1 = newest (default)"
    )
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing until the link decided")
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.rundir import resolve_run_or_job
    from gymslurm.launcher.views.logs import show

    run = resolve_run_or_job(args.run, Path(args.run_root).resolve())
    return show(run, None if args.aggregate else args.shard, args.link, args.follow)
