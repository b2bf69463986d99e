"""Status documents for tests of what reads them (``--wait``, the table, the report): typed rows and
documents with every field filled, so a test names only the fields it is about; and the run folder
those tests write a ledger into."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gymslurm.launcher.run_cost import NO_COST
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.launcher.verdicts import ChainVerdict
from gymslurm.launcher.views.document import AggregationStatus, ShardRow, StatusDocument
from gymslurm.launcher.views.status import summary_of
from tests.run_info import run_info


def row(shard: int, verdict: str, **given: Any) -> ShardRow:
    """Shard ``shard``'s row saying ``verdict`` (and ``why {verdict}``), other fields as given."""
    fields: dict[str, Any] = {
        "shard": shard,
        "verdict": ChainVerdict(verdict),
        "why": f"why {verdict}",
        "job": None,
        "job_state": "-",
        "successor": None,
        "successor_state": "-",
        "jobs": 0,
        "last_exit": None,
        "collector_exit": None,
        "last_decision": None,
        "retries": "0/3",
        "walltime": "0s/none",
        "walltime_used_s": 0.0,
        "walltime_budget_s": 0.0,
        "walltime_cap_s": None,
        "coverage": "-",
        "expected": None,
        "successful": 0,
        "failed": 0,
        "omitted": 0,
        "in_flight": 0,
        "live": False,
        "rate_per_s": None,
        "eta_s": None,
        "eta": "-",
        "heartbeat_age_s": None,
        "log": None,
        "server_logs": [],
        "failed_by_class": {},
        "server_restarts": "-",
        "injected": [],
        "interrupted": 0,
        "gpu_hours": 0.0,
        "gpu_hours_idle": 0.0,
        "gpu_hours_slurm": None,
        "gpu_text": "-",
        "faults": {},
    }
    return ShardRow(**{**fields, **given})


def document(
    rows: list[ShardRow],
    job: str | None = None,
    finished: bool = False,
    *,
    stalled: bool = False,
    state: str = "x",
    **given: Any,
) -> StatusDocument:
    """Run ``r`` of benchmark ``b`` with ``rows``, its summary, and an aggregation as given."""
    fields: dict[str, Any] = {
        "run": "r",
        "path": "/p",
        "backend": "slurm",
        "benchmark": "b",
        "generated_at": "t",
        "summary": summary_of(rows, NO_COST),
        "shards": rows,
        "aggregation": AggregationStatus(job=job, state=state, finished=finished, stalled=stalled),
        "final_metrics": None,
        "final_metrics_problem": None,
        "queries": 1,
    }
    return StatusDocument(**{**fields, **given})


def one_shard_run(root: Path) -> RunDir:
    """A local run of one shard at ``root``: its ``run.json`` written, its ledger still empty."""
    run = RunDir(root)
    info = run_info(created_at="2026-12-01T10:00:00+00:00", backend="local", max_walltime_s=3600.0)
    atomic_write(run.info_path, info.model_dump_json().encode())
    return run
