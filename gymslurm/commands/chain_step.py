"""``gymslurm chain-step`` (internal): one link of a chain, or the aggregation, inside a job."""

from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str]) -> int:
    """``gymslurm chain-step``: parse its arguments and run it."""
    parser = argparse.ArgumentParser(
        prog="gymslurm chain-step", description="(internal) one link, inside a job"
    )
    parser.add_argument("--run-dir", required=True, type=Path)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--shard", type=int)
    which.add_argument("--aggregate", action="store_true")
    args = parser.parse_intermixed_args(argv)
    from gymslurm.job.aggregation import run_aggregation
    from gymslurm.job.heartbeat import log
    from gymslurm.job.link import run_link
    from gymslurm.launcher.run_site import run_backend
    from gymslurm.launcher.rundir import RunDir
    from gymslurm.site.backend import scheduler_use, this_job

    run = RunDir(args.run_dir.resolve())
    settings = run.load_settings()
    # The cluster this job runs on (a run across clusters: run.json's placement of the shard).
    backend = run_backend(run, args.shard, aggregation=args.aggregate)
    try:
        if args.aggregate:
            return run_aggregation(run, settings, backend, this_job(backend))
        return run_link(run, args.shard, settings, backend, this_job(backend))
    finally:  # every job says what it asked of the scheduler (issue 32: a link's calls stay constant)
        log(scheduler_use(backend))
