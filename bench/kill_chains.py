"""Benchmark: the kill harness at scale — ≥ 100 local-backend runs SIGKILLed at random instants.

Each trial (tests/e2e/kill_harness.py) submits a small run with ``gymslurm submit --wait`` and
kills 1-3 of its jobs as they start (links, their successors, the aggregation; batch shell or
chain step; a third in the job's first 100 ms), within the documented bound (at most
``lookahead - 1`` consecutive jobs of a chain killed before their first act). A trial passes when
``submit --wait`` exits 0 saying done and the merged output holds every row's answer exactly once:
no human command. ``--lookahead 1`` runs the same plans with the chain of old (no spare job, the
bound not respected: every kill as planned) to show what the lookahead buys.

Prints: trials, passed, kills (and how many before the job's first act; by target: link or
aggregation, batch shell or chain step), runs needing a human command, leftover processes, the wall time
per trial against the same trial with no kill measured in this run. Exits 1 when a trial failed.

Run from the repository root: ``python bench/kill_chains.py [--trials 100] [--at-once 12] [--lookahead 1]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e import kill_harness  # noqa: E402
from tests.e2e.kill_harness import Plan, run_trial  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--at-once", type=int, default=12)
    parser.add_argument("--lookahead", type=int, help="force this slurm.lookahead (1: the old chain)")
    args = parser.parse_args()
    if args.lookahead is not None:
        planner = kill_harness.random_plan
        kill_harness.random_plan = lambda rng: replace(planner(rng), lookahead=args.lookahead, bounded=False)
    folder = Path(tempfile.mkdtemp(prefix="gymslurm-kill-bench-"))
    t0 = time.monotonic()
    with ThreadPoolExecutor(args.at_once) as pool:
        baseline = pool.submit(run_trial, folder / "baseline", -1, plan=Plan([], 2))
        trials = list(pool.map(lambda seed: run_trial(folder / f"t{seed}", seed), range(args.trials)))
    wall = time.monotonic() - t0
    base = baseline.result()
    passed = [t for t in trials if t.passed]
    kills = [k for t in trials for k in t.killed]
    before = [k for k in kills if "before its first act" in k]
    print(
        f"trials {len(trials)}, passed {len(passed)}, failed {len(trials) - len(passed)} "
        f"(lookahead {args.lookahead or 'per plan: 2 or 3'})"
    )
    aggregation = sum(1 for t in trials for k in t.plan.kills if k.target == "aggregation")
    print(
        f"kills {len(kills)}: {len(before)} before the job's first act, {len(kills) - len(before)} after; "
        f"{aggregation} planned on aggregation jobs"
    )
    by_target = Counter(f"{k.split()[0]} {k.split('(')[1].split()[0].rstrip(':)')}" for k in kills)
    print("kills by target: " + ", ".join(f"{name} {n}" for name, n in sorted(by_target.items())))
    print(
        f"runs needing a human command (submit --wait not done, or merged output wrong): "
        f"{len(trials) - len(passed)}; merged output right: "
        f"{sum(t.merged_ok for t in trials)}"
    )
    print(f"leftover processes naming the bench folder after the last trial: {_leftovers(folder)}")
    per = [t.seconds for t in trials]
    print(
        f"per trial: median {statistics.median(per):.1f}s, max {max(per):.1f}s; the same run with no "
        f"kill (baseline, this run): {base.seconds:.1f}s (passed {base.passed}); "
        f"all {args.trials} in {wall:.0f}s at {args.at_once} at once"
    )
    for trial in trials:
        if not trial.passed:
            print(f"FAILED seed {trial.seed}: {trial.killed}: {trial.last_line}")
    return 0 if len(passed) == len(trials) and base.passed else 1


def _leftovers(folder: Path) -> int:
    """Processes still alive whose command line names ``folder`` (a stray link, step or server)."""
    time.sleep(2)  # a job's own exit path, not a leftover
    found = 0
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(folder) in " ".join(proc.info["cmdline"] or []):
                found += 1
        except psutil.Error:
            continue
    return found


if __name__ == "__main__":
    raise SystemExit(main())
