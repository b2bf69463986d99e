"""What a run costs and what it gave, from its ledgers and files: GPU-hours per chain and run, the
budget, the interruptions by kind, the final metrics. Read by ``status`` and the report (views/) and
by the job that ends the run, which writes them into ``summary.json`` (job/summary.py).

Allocated GPU-hours come from the ledgers (launcher/links.py: GPUs × elapsed of every link, requeued
runs and resubmitted chains included), so they exist with or without accounting; Slurm's figure
(``sacct -D``) is passed in where it was asked for. Pure apart from :func:`final_metrics`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from gymslurm.errors import StoreError
from gymslurm.formats import version_of
from gymslurm.launcher.ledger import Record, Started, Submitted, summarize
from gymslurm.launcher.links import (
    faults_survived,
    human_gpu_hours,
    idle_gpu_hours,
    iso_epoch,
    link_gpu_hours,
    links_of,
)
from gymslurm.launcher.rundir import RunDir, RunInfo, atomic_write
from gymslurm.launcher.verdicts import chain_verdict
from gymslurm.store.files import read_aggregate_metrics, read_gymslurm_metrics, read_json_object
from gymslurm.store.paths import RunPaths

_NO_FAULTS = faults_survived([], [])  # a chain's fault counts before any link ran (pure, every kind 0)


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
        slurm = None
        if slurm_gpu_s is not None:  # every job of the chain: a run that died before its start record too
            jobs = dict.fromkeys(r.job_id for r in records if isinstance(r, Submitted | Started))
            slurm = sum(slurm_gpu_s.get(job, 0.0) for job in jobs) / 3600
        if all(isinstance(record, Submitted) for record in records):  # no link ran: no GPU, no fault
            return cls(0.0, 0.0, slurm, dict(_NO_FAULTS))  # (most chains of a large run not started yet)
        links = links_of(records)  # once: chain_gpu_hours would fold the records into links again
        faults = faults_survived(records, links)
        allocated = sum(link_gpu_hours(link, now, iso_epoch(link.get("start"))) for link in links)
        idle = sum(idle_gpu_hours(link) for link in links)
        return cls(allocated, idle, slurm, faults)

    @property
    def text(self) -> str:
        """The status table's ``GPU-h`` cell."""
        return human_gpu_hours(self.gpu_hours) if self.gpu_hours else "-"


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


@dataclass(frozen=True, kw_only=True)
class CostSummary:
    """The run's GPU-hours (shards and aggregation), its budget and its interruptions by kind; the
    fields are the status summary's last ones and ``summary.json``'s ``cost``, in this order."""

    gpu_hours: float
    gpu_hours_idle: float
    gpu_hours_slurm: float | None
    slurm_accounting: bool | None  # run.json's word: true, false, or null when not known
    gpu_budget: float | None
    budget_fraction: float | None
    budget_warning: bool
    faults: dict[str, int]


NO_COST = CostSummary(
    gpu_hours=0.0,
    gpu_hours_idle=0.0,
    gpu_hours_slurm=None,
    slurm_accounting=None,
    gpu_budget=None,
    budget_fraction=None,
    budget_warning=False,
    faults={},
)


def cost_summary(
    costs: list[Cost], aggregation: Cost, budget: float | None, warn_at: float, accounting: bool | None = None
) -> CostSummary:
    """The run's GPU-hours (shards and aggregation), its budget and interruptions by kind (pure).

    ``accounting``: run.json's word on Slurm's accounting (None: not known, the local backend)."""
    every = [*costs, aggregation]
    total = sum(cost.gpu_hours for cost in every)
    slurm = None if any(c.slurm is None for c in every) else sum(c.slurm or 0.0 for c in every)
    faults: dict[str, int] = {}
    for cost in costs:
        if any(cost.faults.values()):
            for kind, n in cost.faults.items():
                faults[kind] = faults.get(kind, 0) + n
        elif not cost.faults.keys() <= faults.keys():  # most chains have none: only their kinds' names
            faults.update((kind, faults.get(kind, 0)) for kind in cost.faults)
    fraction = None if not budget else total / budget
    return CostSummary(
        gpu_hours=round(total, 4),
        gpu_hours_idle=round(sum(c.idle for c in every), 4),
        gpu_hours_slurm=None if slurm is None else round(slurm, 4),
        slurm_accounting=accounting,
        gpu_budget=budget,
        budget_fraction=None if fraction is None else round(fraction, 4),
        budget_warning=fraction is not None and fraction >= warn_at,
        faults=faults,
    )


@dataclass(frozen=True, kw_only=True)
class LinkCost:
    """One link of a chain with its GPU-hours (``status --shard N``'s ``links``, ``summary.json``'s
    ``link_costs``; the fields in this order)."""

    job: str
    restart: int
    start: str | None
    end: str | None
    elapsed_s: float | None
    gpus: int
    decision: str | None
    slurm_state: str
    gpu_hours: float
    gpu_hours_idle: float


def link_costs(records: list[Record], now: float) -> list[LinkCost]:
    """Each link of a chain with its GPU-hours: allocated (GPUs × elapsed; a running link until
    ``now``) and idle (no request in flight), from the ledger alone (pure)."""
    out = []
    for link in links_of(records):
        start = iso_epoch(link.get("start"))
        out.append(
            LinkCost(
                job=link["job"],
                restart=link["restart"],
                start=link["start"],
                end=link["end"],
                elapsed_s=link["elapsed_s"],
                gpus=link["gpus"],
                decision=link["decision"],
                slurm_state=link["slurm_state"],
                gpu_hours=round(link_gpu_hours(link, now, start), 4),
                gpu_hours_idle=round(idle_gpu_hours(link), 4),
            )
        )
    return out


SUMMARY_NAME = "summary.json"
_REWRITE = "move it aside: the ledgers hold what it says ('gymslurm status RUN --json' gives the figures)"


class ShardSummary(BaseModel):
    """One shard as its run ended: its verdict, its rollouts, its GPU-hours."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shard: int
    verdict: str
    expected: int | None
    successful: int
    failed: int
    omitted: int
    links: int
    gpu_hours: float
    gpu_hours_idle: float
    gpu_hours_slurm: float | None
    link_costs: list[dict[str, Any]]  # each link: job, run, elapsed, GPUs, GPU-hours allocated and idle


class RunSummary(BaseModel):
    """``<run>/summary.json`` (version 1): how the run ended, beside ``run.json`` (what was asked).

    Written whole by the job that ends the run (the aggregation after its final decision; with the
    aggregation disabled, the link whose decision finished the last chain), replaced whole when a
    resubmitted run ends again. docs/formats.md, "summary.json"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: int
    run: str
    benchmark: str
    written_at: str
    written_by: str
    verdicts: dict[str, int]
    rollouts: dict[str, int]
    final_metrics: dict[str, Any] | None
    final_metrics_problem: str | None
    aggregation: dict[str, str] | None
    cost: dict[str, Any]
    shards: list[ShardSummary]


def run_summary(
    info: RunInfo,
    chains: list[list[Record]],
    aggregate_records: list[Record],
    coverages: list[Any],
    *,
    now: float,
    written_at: str,
    written_by: str,
    metrics: tuple[dict[str, Any] | None, str | None],
    slurm_gpu_s: dict[str, float] | None,
    budget: float | None,
) -> RunSummary:
    """The summary of a finished run from its records, its shards' coverage and its merged metrics
    (pure: the caller read them; ``slurm_gpu_s`` is Slurm's GPU-seconds by job, None without)."""
    costs = [Cost.of(records, now, slurm_gpu_s) for records in chains]
    aggregation_cost = Cost.of(aggregate_records, now, slurm_gpu_s)
    shards = []
    for shard, (records, cost, coverage) in enumerate(zip(chains, costs, coverages, strict=True)):
        shards.append(
            ShardSummary(
                shard=shard,
                verdict=chain_verdict(summarize(records)),
                expected=None if coverage is None else coverage.expected,
                successful=0 if coverage is None else coverage.successful,
                failed=0 if coverage is None else coverage.failed,
                omitted=0 if coverage is None else coverage.intentionally_omitted,
                links=len(links_of(records)),
                gpu_hours=round(cost.gpu_hours, 4),
                gpu_hours_idle=round(cost.idle, 4),
                gpu_hours_slurm=None if cost.slurm is None else round(cost.slurm, 4),
                link_costs=[asdict(link) for link in link_costs(records, now)],
            )
        )
    verdicts: dict[str, int] = {}
    for row in shards:
        verdicts[row.verdict] = verdicts.get(row.verdict, 0) + 1
    last = summarize(aggregate_records).last_decision
    return RunSummary(
        format_version=version_of("run_summary"),
        run=info.name,
        benchmark=info.benchmark,
        written_at=written_at,
        written_by=written_by,
        verdicts=dict(sorted(verdicts.items())),
        rollouts={
            "expected": sum(r.expected or 0 for r in shards),
            "successful": sum(r.successful for r in shards),
            "failed": sum(r.failed for r in shards),
            "omitted": sum(r.omitted for r in shards),
        },
        final_metrics=metrics[0],
        final_metrics_problem=metrics[1],
        aggregation=None if last is None else {"decision": str(last.decision), "reason": last.reason},
        cost=asdict(cost_summary(costs, aggregation_cost, budget, info.budget_warn_at, info.accounting)),
        shards=shards,
    )


def summary_path(run: RunDir) -> Path:
    """``<run>/summary.json``."""
    return run.root / SUMMARY_NAME


def write_run_summary(run: RunDir, summary: RunSummary) -> Path:
    """Replace ``summary.json`` atomically (its one writer: the job that ends the run)."""
    path = summary_path(run)
    atomic_write(path, orjson.dumps(summary.model_dump(), option=orjson.OPT_INDENT_2) + b"\n")
    return path


def read_run_summary(run: RunDir) -> RunSummary | None:
    """``summary.json``, version-checked and validated; None before the run ended."""
    path = summary_path(run)
    raw = read_json_object(path, "the run's summary", _REWRITE, kind="run_summary")
    if raw is None:
        return None
    try:
        return RunSummary.model_validate(raw)
    except ValidationError as error:
        raise StoreError(f"{path} is not a summary this gymslurm reads: {error}") from None
