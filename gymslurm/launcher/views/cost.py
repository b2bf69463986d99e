"""What a run costs, for ``status`` and the report: GPU-hours per chain and run, the budget, final metrics.

Allocated GPU-hours come from the ledgers (launcher/links.py: GPUs × elapsed of every link, requeued
runs and resubmitted chains included), so they exist with or without accounting. Where the cluster
keeps accounting, what Slurm recorded (TRES ``gres/gpu`` × elapsed of every run of every job,
``sacct -D``) is shown beside them: one more query. The final metrics are the merged run's, read
through the store's typed reader. Pure apart from :func:`final_metrics` and :func:`ask_accounting`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gymslurm.errors import SlurmError, StoreError
from gymslurm.launcher.backend import Backend
from gymslurm.launcher.ledger import ChainState, Record, Started, Submitted
from gymslurm.launcher.links import (
    chain_gpu_hours,
    faults_survived,
    human_gpu_hours,
    idle_gpu_hours,
    links_of,
)
from gymslurm.launcher.rundir import RunDir, RunInfo
from gymslurm.launcher.slurm import AccountingRow, QueueRow
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


def cost_line(summary: dict[str, Any]) -> str | None:
    """``GPU-hours: 3.20 GPU-h allocated (0.40 idle; Slurm recorded 3.18), budget 20 (16 %)``."""
    if not summary.get("gpu_hours") and summary.get("gpu_budget") is None:
        return None
    idle = human_gpu_hours(summary["gpu_hours_idle"])
    text = f"GPU-hours: {human_gpu_hours(summary['gpu_hours'])} allocated ({idle} idle"
    if summary.get("gpu_hours_slurm") is not None:
        text += f"; Slurm recorded {human_gpu_hours(summary['gpu_hours_slurm'])}"
    elif summary.get("slurm_accounting") is False:
        text += "; no Slurm figure: this cluster keeps no accounting"
    elif summary.get("slurm_accounting") is True:
        text += "; Slurm's accounting did not answer"
    text += ")"
    if summary.get("gpu_budget") is not None:
        text += f", budget {summary['gpu_budget']:g} GPU-h ({100 * summary['budget_fraction']:.0f} % used)"
        if summary.get("budget_warning"):
            text += " WARNING: past the warning threshold"
    return text


def ask_accounting(
    backend: Backend, states: list[ChainState], queue: Mapping[str, QueueRow], info: RunInfo
) -> tuple[dict[str, AccountingRow] | None, dict[str, float] | None]:
    """The status's one ``sacct`` query: how current jobs squeue forgot ended, and the GPU-seconds Slurm
    recorded per job (TRES ``gres/gpu`` × elapsed of every run, ``sacct -D``), None without accounting.

    Never on a run recorded without accounting. The GPU figure only where accounting is known to
    exist and the run holds GPUs: then every job of the run is asked for, in the same query.
    """
    forgotten = [s.current_job for s in states if s.current_job and s.current_job not in queue]
    gpu = info.accounting is True and info.gpus > 0
    if info.accounting is False or not (forgotten or gpu):
        return {}, None
    jobs = list(dict.fromkeys(job for state in states for job in state.jobs)) if gpu else forgotten
    try:
        rows = backend.accounting(jobs, every_run=gpu)
    except SlurmError:
        if forgotten:
            raise
        return {}, None  # the GPU figure alone: status goes on without it
    if rows is None or not gpu:
        return rows, None
    return rows, {job: row.gpu_s for job, row in rows.items()}
