"""A run's ``run.json`` for tests that build a run folder by hand.

Every field a test does not name takes the one value below, so a test says only what its behaviour
depends on (the backend, the shards, accounting, an array) and a new field of ``RunInfo`` is given
its test value here once.
"""

from __future__ import annotations

from typing import Any

from gymslurm.launcher.rundir import RunInfo

DEFAULTS: dict[str, Any] = {
    "name": "r",
    "benchmark": "b",
    "overrides": [],
    "created_at": "t",
    "backend": "slurm",
    "shards": 1,
    "workdir": "/",
    "output_stem": "rollouts",
    "infra_retry_limit": 3,
    "max_walltime_s": None,
}


def run_info(**fields: Any) -> RunInfo:
    """Run ``r`` of benchmark ``b`` on Slurm, one shard, no walltime cap, with ``fields`` changed."""
    return RunInfo(**{**DEFAULTS, **fields})
