"""``gymslurm resume RUN BENCHMARK``: go on with a paused run (pause.py holds the rule)."""

from __future__ import annotations

import argparse


def main(argv: list[str]) -> int:
    """``gymslurm resume``: parse its arguments and run it."""
    parser = argparse.ArgumentParser(
        prog="gymslurm resume", description="Go on with a paused run's shards, with the budgets they had."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("benchmark", help="the benchmark the run was submitted with")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (must not change the experiment)")
    parser.add_argument(
        "--run-root", default=None, help="where runs live (default: the benchmark's run_root)"
    )
    args = parser.parse_intermixed_args(argv)
    from gymslurm.commands.pause import resume

    return resume(args.run, args.benchmark, args.overrides, args.run_root)
