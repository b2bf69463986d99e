"""The status document (``status --json``, schema ``gymslurm.status``) and the report's data
(``gymslurm.report``, embedded in ``report.html``): their types, one per part.

A row per shard (:class:`ShardRow`; with ``--shard N``, :class:`LinkedShardRow` adds that shard's
links), the run's summary (:class:`StatusSummary`), the aggregation (:class:`AggregationStatus`)
and the document around them (:class:`StatusDocument`). Every reader (the table, the report,
``--wait``, the CLI) reads attributes, so a renamed field fails mypy, not a printed line.

Frozen dataclasses, because orjson writes them as they are, in field order (10,000 rows in a few
milliseconds, no copy into dicts): **the order of the fields below is the order of the keys in
the document**. A new field goes at the end of its type; a change of a field's meaning bumps the
version (gymslurm/formats.py, ``status``). tests/unit/test_status_document.py pins the field set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gymslurm.formats import version_of
from gymslurm.launcher.run_cost import CostSummary, LinkCost
from gymslurm.launcher.verdicts import ChainVerdict

STATUS_SCHEMA = "gymslurm.status"
REPORT_SCHEMA = "gymslurm.report"


@dataclass(slots=True)
class ShardRow:
    """One shard's row (docs/launcher.md, "Watching and steering": the columns and the rest).

    Not frozen, unlike the other parts: a frozen dataclass sets each of its 40 fields through
    ``object.__setattr__``, three times the cost of a plain one, paid 10,000 times by a 10,000-shard
    status (issue 32). Nothing changes a row once :func:`~gymslurm.launcher.views.status.shard_status`
    made it; :func:`row_fields` copies one. Not keyword-only either: a held run's status makes its
    queued chains' rows by position (views/status.py's ``Template.row``): 0.35 µs a row of 40
    fields here, 10.5 µs by keyword (each name matched against the fields').
    """

    shard: int
    verdict: ChainVerdict
    why: str
    job: str | None  # the running link, else the oldest live one, else the chain's newest
    job_state: str
    successor: str | None  # the queued successor of ``job``
    successor_state: str
    jobs: int  # links decided so far
    last_exit: int | None  # what the job gave Slurm
    collector_exit: int | None  # what the collector gave the link
    last_decision: str | None
    retries: str  # ``used/limit``
    walltime: str
    walltime_used_s: float
    walltime_budget_s: float
    walltime_cap_s: float | None
    coverage: str
    expected: int | None
    successful: int
    failed: int
    omitted: int
    in_flight: int
    live: bool  # the counts are the running collector's live record
    rate_per_s: float | None
    eta_s: float | None
    eta: str
    heartbeat_age_s: float | None
    log: str | None
    server_logs: list[str]
    failed_by_class: dict[str, int]
    server_restarts: str
    injected: list[str]
    interrupted: int
    gpu_hours: float
    gpu_hours_idle: float
    gpu_hours_slurm: float | None
    gpu_text: str
    faults: dict[str, int]
    excluded_nodes: dict[str, int] = field(default_factory=dict)  # bad nodes kept off its links: failures


def row_fields(row: ShardRow) -> dict[str, Any]:
    """A row's fields by name, in order (a row has slots, no ``vars``)."""
    return {name: getattr(row, name) for name in ShardRow.__dataclass_fields__}


@dataclass(kw_only=True, slots=True)
class LinkedShardRow(ShardRow):
    """``status --shard N``: the row with each link's GPU-hours and Slurm's figure per job (slots too:
    orjson writes a dataclass with a ``__dict__`` from it alone, which would drop the row's fields)."""

    links: list[LinkCost]
    gpu_hours_slurm_by_job: dict[str, float] | None


@dataclass(frozen=True, kw_only=True)
class RunCounts:
    """The run's rollouts, rate and verdicts over every shard (the summary's first fields)."""

    expected: int
    successful: int
    failed: int
    omitted: int
    interrupted: int
    shards: int
    counted_shards: int  # shards that reported a count yet
    rate_per_s: float
    eta_s: float | None
    eta: str
    failed_by_class: dict[str, int]
    verdicts: dict[str, int]
    walltime_used_s: float


@dataclass(frozen=True, kw_only=True)
class StatusSummary(CostSummary, RunCounts):
    """The run's summary: its counts, then its cost (a dataclass's fields come base last first, so
    :class:`RunCounts`' fields lead and :class:`~gymslurm.launcher.run_cost.CostSummary`'s follow)."""


BUSY_JOB_STATES = ("RUNNING", "COMPLETING", "CONFIGURING", "PENDING")


def jobs_busy(rows: Sequence[ShardRow]) -> bool:
    """A shard's job still runs or waits: its link may yet queue the aggregation (pure)."""
    return any(row.job_state.startswith(BUSY_JOB_STATES) for row in rows)


@dataclass(frozen=True, kw_only=True)
class AggregationStatus:
    """The aggregation's job, what it is doing, whether it finished and whether it stalled."""

    job: str | None
    state: str
    finished: bool
    stalled: bool
    log: str | None = None


@dataclass(frozen=True, kw_only=True)
class StatusDocument:
    """The whole document: the run, its summary, its rows, its aggregation and merged metrics."""

    schema: str = STATUS_SCHEMA
    version: int = version_of("status")
    run: str
    path: str
    backend: str
    benchmark: str
    generated_at: str
    summary: StatusSummary
    shards: list[ShardRow]
    aggregation: AggregationStatus
    final_metrics: dict[str, Any] | None
    final_metrics_problem: str | None
    queries: int  # scheduler commands run to make it


@dataclass(frozen=True, kw_only=True)
class SuiteRow:
    """A suite run's benchmark (docs/suites.md): its shards, verdict, outcomes, headline, own run folder."""

    benchmark: str
    shards: int
    verdict: str
    outcomes: int  # rollouts with an outcome, over its shards' coverage files
    expected: int | None
    eta_s: float | None  # its rollouts left at its running collectors' rate (None: none running)
    busy_s: float  # its collectors' busy time on the model server, over its decision records
    headline: dict[str, Any] | None  # its score in suite_metrics.json, once the suite's aggregation wrote it
    run: str
    gpu_hours: float | None = None  # the suite's GPU-hours split by busy time


@dataclass(frozen=True, kw_only=True)
class SuiteStatusDocument(StatusDocument):
    """The document of a suite run: the run's, then one row per benchmark (``suite``)."""

    suite: list[SuiteRow]


def with_suite(document: StatusDocument, suite: list[SuiteRow]) -> StatusDocument:
    """The document with its suite's rows after the rest (a run of one benchmark: as it is)."""
    return SuiteStatusDocument(**vars(document), suite=suite) if suite else document


@dataclass(frozen=True, kw_only=True)
class ShardTimeline:
    """A shard's links (launcher/links.py: start, end, how each ended, GPUs) and its faults by kind."""

    shard: int
    links: list[dict[str, Any]]
    faults: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class ReportData:
    """The page's data, embedded in it as JSON (fields in key order, as the status document's)."""

    schema: str = REPORT_SCHEMA
    version: int = version_of("report")
    status: StatusDocument  # unchanged: a script reads the fields of status --json
    shards: list[ShardTimeline]
    metrics: dict[str, Any] | None
    rewards: list[dict[str, Any]] | None  # the merged run's reward histogram per taskset
    suite: list[SuiteRow] = field(default_factory=list)  # a suite run's benchmarks ([] for one benchmark)
    comparison: dict[str, Any] | None = None  # report --baseline: compare --json's document, unchanged


def status_json(document: StatusDocument) -> bytes:
    """``status --json``'s bytes (orjson: the 10 MB document of 10,000 shards in a few ms)."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"
