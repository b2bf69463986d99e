"""What a run costs and what it gave, from its ledgers and files: GPU-hours per chain and run, the
budget, the interruptions by kind, the final metrics. Read by ``status`` and the report (views/) and
by the job that ends the run, which writes them into ``summary.json`` (launcher/job/summary.py).

Allocated GPU-hours come from the ledgers (launcher/links.py: GPUs × elapsed of every link, requeued
runs and resubmitted chains included), so they exist with or without accounting; Slurm's figure
(``sacct -D``) is passed in where it was asked for. Pure apart from :func:`final_metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gymslurm.errors import StoreError
from gymslurm.launcher.ledger import Record, Started, Submitted
from gymslurm.launcher.links import (
    chain_gpu_hours,
    faults_survived,
    human_gpu_hours,
    idle_gpu_hours,
    links_of,
)
from gymslurm.launcher.rundir import RunDir
from gymslurm.store.files import read_aggregate_metrics, read_gymslurm_metrics
from gymslurm.store.paths import RunPaths


@dataclass(frozen=True)
class Cost:
    """A chain's GPU-hours (allocated, idle, what Slurm recorded) and its interruptions by kind (pure)."""

    gpu_hours: float
    idle: float
    slurm: float | None
    faults: dict[str, int]

    @classmethod
    def of(cls, records: list[Record], now: float, slurm_gpu_s: dict[str, float] | None) -> Cost:
        """From a chain's records; ``slurm_gpu_s``: GPU-seconds by job from accounting, None without."""
        links = links_of(records)
        faults = faults_survived(records, links)
        allocated = chain_gpu_hours(records, now)
        idle = sum(idle_gpu_hours(link) for link in links)
        slurm = None
        if slurm_gpu_s is not None:  # every job of the chain: a run that died before its start record too
            jobs = dict.fromkeys(r.job_id for r in records if isinstance(r, Submitted | Started))
            slurm = sum(slurm_gpu_s.get(job, 0.0) for job in jobs) / 3600
        return cls(allocated, idle, slurm, faults)

    def fields(self) -> dict[str, Any]:
        """The status row's cost fields."""
        return {
            "gpu_hours": round(self.gpu_hours, 4),
            "gpu_hours_idle": round(self.idle, 4),
            "gpu_hours_slurm": None if self.slurm is None else round(self.slurm, 4),
            "gpu_text": human_gpu_hours(self.gpu_hours) if self.gpu_hours else "-",
            "faults": self.faults,
        }


def final_metrics(run: RunDir, stem: str) -> tuple[dict[str, Any] | None, str | None]:
    """The merged output's metrics, through the store's typed readers, and a problem reading them.

    NeMo Gym's aggregate-metrics list when a server answered the merge: one entry gives its metric
    names as they are, several are told apart as ``<server>/<metric>``; else gymslurm's own metrics
    file. (None, None) before the aggregation wrote either.
    """
    paths = RunPaths.for_output(run.merged_output(stem))
    try:
        entries = read_aggregate_metrics(paths)
        own = None if entries else read_gymslurm_metrics(paths.gymslurm_metrics)
    except StoreError as error:
        return None, str(error)
    if not entries:  # no server answered the merge: gymslurm's own metrics, under their own name
        metrics = own.get("metrics") if own else None
        return (dict(metrics) if isinstance(metrics, dict) else None), None
    if len(entries) == 1:
        return dict(entries[0].agent_metrics), None
    merged = {f"{e.server}/{name}": value for e in entries for name, value in e.agent_metrics.items()}
    return merged, None


def cost_summary(
    costs: list[Cost], aggregation: Cost, budget: float | None, warn_at: float, accounting: bool | None = None
) -> dict[str, Any]:
    """The run's GPU-hours (shards and aggregation), its budget and interruptions by kind (pure).

    ``accounting``: run.json's word on Slurm's accounting (None: not known, the local backend)."""
    every = [*costs, aggregation]
    total = sum(cost.gpu_hours for cost in every)
    slurm = None if any(c.slurm is None for c in every) else sum(c.slurm or 0.0 for c in every)
    faults: dict[str, int] = {}
    for cost in costs:
        for kind, n in cost.faults.items():
            faults[kind] = faults.get(kind, 0) + n
    fraction = None if not budget else total / budget
    return {
        "gpu_hours": round(total, 4),
        "gpu_hours_idle": round(sum(c.idle for c in every), 4),
        "gpu_hours_slurm": None if slurm is None else round(slurm, 4),
        "slurm_accounting": accounting,
        "gpu_budget": budget,
        "budget_fraction": None if fraction is None else round(fraction, 4),
        "budget_warning": fraction is not None and fraction >= warn_at,
        "faults": faults,
    }
