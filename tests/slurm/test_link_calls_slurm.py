"""On the real Slurm, a link's scheduler calls and rows do not grow with the run (issue 32).

Two runs of the stand-in collector (each shard: a link that continues, then one that finishes),
one of 1 shard and one of 4, submitted together. Every job logs what it asked of Slurm (``scheduler
calls: N (...), rows read: R``, counted by the client itself). Every link of both runs: queries
(squeue, sacct, scontrol) ≤ 3 and rows ≤ 10, none a ``squeue`` (22.05's ``squeue -j`` makes
slurmctld pack every job it holds: a link asks its ids with ``scontrol show job``), and the busiest
link of the 4-shard run asks no more than the busiest of the 1-shard run. 10,000 shards on the
sandbox are too costly for the suite: tests/unit/test_link_scheduler_calls.py counts the same
calls at 10,000 with a scripted Slurm, and bench/scale_sandbox.py measures a real 10,000-shard run
on cluster b (docs/launcher.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .helpers import SlurmCluster, scenario_user
from .launcher_chains import Chain

pytestmark = pytest.mark.slurm

STEPS = [{"exit": 75, "progress": 1}, {"exit": 0, "progress": 1}]
USE = re.compile(r"scheduler calls: (\d+) \(([^)]*)\), rows read: (\d+)")


def _link_use(run: Path) -> list[tuple[int, int, int]]:
    """(queries, rows, squeue calls) of every link job of the run, from the job logs (not the
    aggregation's)."""
    found = []
    for log in sorted((run / "logs").glob("shard-*")):
        for match in USE.finditer(log.read_text(errors="replace")):
            calls = dict(part.split() for part in match.group(2).split(", ") if part != "none")
            queries = sum(int(calls.get(name, 0)) for name in ("squeue", "sacct", "scontrol"))
            found.append((queries, int(match.group(3)), int(calls.get("squeue", 0))))
    return found


def test_a_link_asks_slurm_the_same_at_1_and_4_shards(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Every link's queries ≤ 3 and rows ≤ 10 in both runs, no squeue; the 4-shard run's ask no more."""
    runs = {
        shards: Chain(
            scenario_user(slurm_session_dir, f"link-calls-{shards}"),
            slurm_python,
            STEPS,
            overrides=[f"shards={shards}"],
        ).submit()
        for shards in (1, 4)
    }
    try:
        for chain in runs.values():
            chain.wait(timeout=400)
        use = {}
        for shards, chain in runs.items():
            assert chain.run is not None
            use[shards] = _link_use(chain.run)
            assert len(use[shards]) >= 2 * shards, use  # every link said what it asked
            assert all(q <= 3 and rows <= 10 and not squeue for q, rows, squeue in use[shards]), use
        assert max(use[4]) <= max(use[1]), use
    finally:
        for chain in runs.values():
            chain.cancel()
