"""The per-shard ledger: an append-only JSONL history of the shard's chain.

Why: ``status`` and the chain's budgets must never depend on ``sacct`` or on the login node staying
up, so every fact the chain acts on is written here by the job that learned it: a link was
submitted, a run of a job started, a run ended with a decision, the chain was cancelled or
resubmitted. A job that died without writing its decision is accounted for by its successor
(a ``decision`` record with ``accounted_by``).

Format (version 3): one JSON object per line, ``{"v": 3, "kind": ..., "at": ISO-8601 UTC, ...}``.
The version is checked first (a newer one is refused naming it: upgrade gymslurm) and unknown
fields are rejected. Older lines still read (a chain may span an upgrade; ``formats.py`` lists 1 and
2 as older ledger versions): version 2 lacks only what version 3 added (a decision's ``busy_s``, the
``slurm_end`` record; main wrote both as version 2 for a while, and those lines read too), version 1
also had a decision's ``coverage`` summary, which nothing read and :func:`parse_record` drops. Writers
append one whole line with one ``write`` under an exclusive ``flock`` (the job, its successor and
``cancel`` on the login node may write the same ledger); a line torn by a writer that died
mid-write is dropped on read and cut off before the next append. A complete malformed line in the
middle is corruption and raises.
Guarantee: a writer killed at any instant loses at most its own unfinished line; not covered: a
storage failure (the same promise as the collector's files, docs/formats.md).

:func:`summarize` folds the records into the chain's state; it is pure.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from gymslurm.clock import utc_now_ms
from gymslurm.errors import CorruptRecordError
from gymslurm.formats import version_of, versioned_object
from gymslurm.launcher.decide import Budgets, Decision, JobEnd, Verdict
from gymslurm.redaction import redact_value
from gymslurm.store.atomic import open_run_file, reserve, sync_files
from gymslurm.store.flock import lock_fd
from gymslurm.store.jsonl import cut_torn_tail, iter_complete_lines

LEDGER_VERSION = version_of("ledger")  # what is written; FORMATS["ledger"].read is what is read
LedgerVersion = Literal[1, 2, 3]
FINISHED = {
    Decision.DONE,
    Decision.STOP_FAILED,
    Decision.STOP_EXHAUSTED,
    Decision.STOP_WALLTIME,
    Decision.STOP_NO_PROGRESS,
    Decision.STOP_BUDGET,
}


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: LedgerVersion = 3  # LEDGER_VERSION (a test pins the two, and the Literal to FORMATS' versions)
    at: str = Field(default_factory=utc_now_ms)


class BudgetsRecord(BaseModel):
    """Budgets as stored (mirrors :class:`gymslurm.launcher.decide.Budgets`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jobs: int = 0
    walltime_s: float = 0.0
    infra_retries_used: int = 0
    links_without_progress: int = 0

    @classmethod
    def of(cls, budgets: Budgets) -> BudgetsRecord:
        """Store a decide.Budgets."""
        return cls(
            jobs=budgets.jobs,
            walltime_s=budgets.walltime_s,
            infra_retries_used=budgets.infra_retries_used,
            links_without_progress=budgets.links_without_progress,
        )

    def budgets(self) -> Budgets:
        """Back to a decide.Budgets."""
        return Budgets(self.jobs, self.walltime_s, self.infra_retries_used, self.links_without_progress)


class Submitted(_Record):
    """A link was submitted (``after``: the job it waits for; ``by``: who submitted it)."""

    kind: Literal["submitted"] = "submitted"
    job_id: str
    after: str | None = None
    by: str = "submit"


class Started(_Record):
    """One run of a job started (``restart_count`` > 0 for a run Slurm requeued)."""

    kind: Literal["start"] = "start"
    job_id: str
    restart_count: int = 0
    host: str = ""
    saved_bytes: int | None = None
    gpus: int = 0  # GPUs this run holds (Slurm's allocation, else slurm.gpus): GPU-hours are gpus x elapsed


class DecisionRecord(_Record):
    """One run of one job ended, and what the chain does next."""

    kind: Literal["decision"] = "decision"
    job_id: str
    restart_count: int = 0
    start: str | None = None
    end: str
    elapsed_s: float
    slurm_state: str
    exit_code: int | None
    decision: Decision
    reason: str
    budgets_before: BudgetsRecord
    budgets_after: BudgetsRecord
    resubmit_offset: str | None = None
    accounted_by: str | None = None
    idle_s: float | None = None  # of elapsed_s, the time no request was in flight (launcher/links.py)
    outcomes_before: int | None = None  # the collector's outcomes when the link started (coverage chart)
    outcomes: int | None = None  # ... and when it ended
    busy_s: float | None = None  # a suite benchmark's: its collector's time with requests in flight


class Cancelled(_Record):
    """``gymslurm cancel`` cancelled these jobs; the chain is over."""

    kind: Literal["cancelled"] = "cancelled"
    job_ids: list[str]
    by: str = "cancel"


class Paused(_Record):
    """``gymslurm pause`` stopped this chain's live jobs (``job_ids``) to go on later: its running link
    saves and ends with decision PAUSED (spending no retry), nothing more starts until ``resume``."""

    kind: Literal["paused"] = "paused"
    job_ids: list[str]
    by: str = "pause"


Fault = Literal["timeout", "preempt", "cancel", "requeue", "crash", "server-crash", "hang"]
FAULTS: tuple[str, ...] = get_args(Fault)


class DiskFull(_Record):
    """A link found the run's filesystem full (``path``, ``free_bytes`` left) and waits for space.

    Written into the ledger's reserved space (``store.atomic.reserve``), so it lands even when
    nothing else can be written. The next ``start`` or ``decision`` of the chain clears it.
    """

    kind: Literal["disk_full"] = "disk_full"
    job_id: str
    path: str
    free_bytes: int
    error: str = ""


class Injected(_Record):
    """``gymslurm inject`` sent a fault to the shard's live link (``how``: what it ran)."""

    kind: Literal["injected"] = "injected"
    job_id: str
    fault: Fault
    how: str
    by: str = "inject"


class Resubmitted(_Record):
    """``gymslurm resubmit`` started a new chain with fresh budgets (history above is kept)."""

    kind: Literal["resubmit"] = "resubmit"
    reset_budget: bool = True
    gpu_hours_added: float = 0.0  # resubmit --gpu-hours +H raised the run's budget.gpu_hours by H


ServerEventName = Literal["started", "down", "restarted", "restart_failed", "gave_up", "reaped"]


class ServerRecord(_Record):
    """A server of a link started, went down, was restarted or given up on, or reaped by a successor.

    ``pid`` and ``create_time`` prove which process it was: a later link on the same ``host`` kills
    a predecessor's leftover server only when both still match (``servers.reap``).
    """

    kind: Literal["server"] = "server"
    job_id: str
    restart_count: int = 0
    name: str
    event: ServerEventName
    host: str = ""
    pid: int | None = None
    create_time: float | None = None
    url: str | None = None
    startup_s: float | None = None
    restarts: int = 0
    cause: str | None = None
    probes: list[str] = Field(default_factory=list)


class SlurmEnded(_Record):
    """How Slurm ended a run that wrote its own decision after a signal (NODE_FAIL, PREEMPTED,
    CANCELLED, REQUEUED ...): asked once by the chain's next link (``sacct``, else ``scontrol``), so
    its fault is counted by Slurm's word, not by the signal alone (launcher/links.py)."""

    kind: Literal["slurm_end"] = "slurm_end"
    job_id: str
    restart_count: int = 0
    state: str


NotifyStep = Literal["claimed", "attempt", "sent", "error", "gave_up"]


class NotifyRecord(_Record):
    """A notification of the run (``<run>/notify.jsonl``, launcher/notify.py): claimed once per event
    and receiver, then each delivery attempt (recorded before it is made) and its result.

    ``target`` is the receiver's index in ``notify:`` (never its URL: a webhook URL is a secret);
    ``body`` (on the claim) is what every attempt sends.
    """

    kind: Literal["notify"] = "notify"
    event: str
    key: str
    target: int
    step: NotifyStep
    attempt: int = 0
    detail: str | None = None
    body: dict[str, Any] | None = None


Record = Annotated[
    Submitted
    | Started
    | DecisionRecord
    | Cancelled
    | Resubmitted
    | ServerRecord
    | Injected
    | DiskFull
    | NotifyRecord
    | Paused
    | SlurmEnded,
    Field(discriminator="kind"),
]
_RECORDS: TypeAdapter[list[Record]] = TypeAdapter(list[Record])  # every read: a whole ledger per call


@functools.cache
def _one() -> TypeAdapter[Record]:
    """One record's adapter, built on first use (a second schema build at import costs every command)."""
    return TypeAdapter(Record)


def parse_record(line: bytes, where: str) -> Record:
    """One ledger line; the version is checked before anything else.

    The fast path validates the bytes in one call (pydantic-core parses the JSON itself; the model
    pins ``v`` to the versions read, so a line of another version cannot pass it); any failure is
    explained by the slow path below, version first, which also upgrades a version 1 decision.
    """
    try:
        return _one().validate_json(line)
    except ValidationError:
        pass
    raw = versioned_object(line, "ledger", where, CorruptRecordError, "move the ledger aside to start over")
    if raw["v"] == 1 and raw.get("kind") == "decision":
        raw.pop("coverage", None)  # version 1's coverage summary: written by old links, read by nothing
    try:
        return _one().validate_python(raw)
    except ValidationError as error:
        raise CorruptRecordError(f"{where}: malformed ledger record: {error}") from error


class Ledger:
    """One shard's ledger file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[Record]:
        """Every complete record; a torn last line (no newline) is ignored.

        Fast path: the whole ledger validated in one call (``status`` reads thousands); when that
        fails, or yields other than one record per line, line by line names the first bad line.
        """
        lines = [(n, raw) for n, raw in iter_complete_lines(self.path) if not raw.isspace()]
        if not lines:
            return []
        with contextlib.suppress(ValidationError):
            records = _RECORDS.validate_json(b"[" + b",".join(raw for _, raw in lines) + b"]")
            if len(records) == len(lines):
                return records
        return [parse_record(raw, f"{self.path}:{n + 1}") for n, raw in lines]

    def append(self, record: _Record, *, sync: bool = True) -> None:
        """Append one record as one line, under an exclusive lock, after cutting off a torn tail.

        ``sync`` False leaves the fsync to the caller (:func:`append_each`'s one commit for many).
        """
        line = orjson.dumps(redact_value(record.model_dump(mode="json"))) + b"\n"  # the one rule
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_run_file(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            lock_fd(fd)
            cut_torn_tail(fd)
            os.write(fd, line)
            reserve(fd)  # keep room for the next records, should the disk fill (best effort)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)


def append_each(entries: Sequence[tuple[Ledger, _Record]]) -> None:
    """Append one record to each of many ledgers, then make them durable in one commit.

    Each line is written exactly as :meth:`Ledger.append` writes it (one ``write`` under the ledger's
    lock, a torn tail cut first); the fsyncs are one ``syncfs`` at the end (``store.atomic.sync_files``),
    not one device flush per ledger. A crash before the end loses at most records of this call that
    were not yet durable, and the caller acts on them (``scancel``) only after it returns.
    """
    for ledger, record in entries:
        ledger.append(record, sync=False)
    sync_files([ledger.path for ledger, _ in entries])


def record_decision(
    ledger: Ledger, run: Started, end: JobEnd, before: Budgets, verdict: Verdict, **extra: object
) -> DecisionRecord:
    """Append the decision that ends ``run`` (a link's own, or one accounted for by its successor)."""
    record = DecisionRecord(
        job_id=run.job_id,
        restart_count=run.restart_count,
        start=run.at,
        end=utc_now_ms(),
        elapsed_s=end.elapsed_s,
        slurm_state=end.slurm_state,
        exit_code=end.exit_code,
        decision=verdict.decision,
        reason=verdict.reason,
        budgets_before=BudgetsRecord.of(before),
        budgets_after=BudgetsRecord.of(verdict.budgets_after),
        **extra,  # type: ignore[arg-type]
    )
    ledger.append(record)
    return record


@dataclass
class ChainState:
    """What the ledger says about a chain (the fold of its records)."""

    budgets: Budgets = field(default_factory=Budgets)
    jobs: list[str] = field(default_factory=list)
    last_decision: DecisionRecord | None = None
    finished: bool = False
    cancelled: bool = False
    paused: bool = False  # gymslurm pause, until the next resubmit (resume)
    successor_of: dict[str, str] = field(default_factory=dict)
    open_runs: list[Started] = field(default_factory=list)
    decided: set[tuple[str, int]] = field(default_factory=set)
    total_walltime_s: float = 0.0
    epochs: int = 1
    epoch_jobs: list[str] = field(default_factory=list)
    resubmit_pending: bool = False
    server_restarts: dict[str, int] = field(default_factory=dict)
    server_processes: list[ServerRecord] = field(default_factory=list)
    injected: list[Injected] = field(default_factory=list)
    disk_full: DiskFull | None = None  # a link waits for space (cleared by the next start or decision)

    @property
    def latest_job(self) -> str | None:
        """The newest submitted link."""
        return self.jobs[-1] if self.jobs else None

    @property
    def current_job(self) -> str | None:
        """The job to show: the one that wrote the final decision of a finished chain, else the newest."""
        if self.finished and self.last_decision is not None:
            return self.last_decision.job_id
        return self.latest_job


def summarize(records: Iterable[Record]) -> ChainState:
    """Fold ledger records into the chain's state (pure)."""
    state = ChainState()
    for record in records:
        fold(state, record)
    return state


def fold(state: ChainState, record: Record) -> ChainState:
    """Fold one more record into ``state`` (in place, returned): what a writer knows it just appended."""
    if isinstance(record, Submitted):
        if record.job_id not in state.jobs:
            state.jobs.append(record.job_id)
            state.epoch_jobs.append(record.job_id)
        if record.after:
            state.successor_of[record.after] = record.job_id
    elif isinstance(record, DiskFull):
        state.disk_full = record
    elif isinstance(record, Started):
        state.disk_full = None
        state.open_runs.append(record)
        if record.job_id not in state.jobs:  # its submitter died before recording it
            state.jobs.append(record.job_id)
            state.epoch_jobs.append(record.job_id)
    elif isinstance(record, DecisionRecord):
        _fold_decision(state, record)
    elif isinstance(record, Cancelled):
        if not state.finished:  # a cancel never relabels a final decision (one racing it came too late)
            state.cancelled = True
            state.finished = True
    elif isinstance(record, Injected):
        state.injected.append(record)
    elif isinstance(record, Paused):
        state.paused = True
    elif isinstance(record, Resubmitted):
        state.finished = state.cancelled = state.paused = False
        state.epochs += 1
        state.epoch_jobs = []
        state.resubmit_pending = record.reset_budget  # resume keeps the collector's failure budget too
        if record.reset_budget:
            state.budgets = Budgets(jobs=state.budgets.jobs)
    elif isinstance(record, ServerRecord):
        _fold_server(state, record)
    return state


def _fold_server(state: ChainState, record: ServerRecord) -> None:
    if record.event == "restarted":
        state.server_restarts[record.name] = state.server_restarts.get(record.name, 0) + 1
    if record.event in ("started", "restarted") and record.pid is not None:
        state.server_processes.append(record)


def _fold_decision(state: ChainState, record: DecisionRecord) -> None:
    state.disk_full = None
    key = (record.job_id, record.restart_count)
    state.decided.add(key)
    state.open_runs = [run for run in state.open_runs if (run.job_id, run.restart_count) != key]
    state.last_decision = record
    state.budgets = record.budgets_after.budgets()
    state.total_walltime_s += record.elapsed_s
    state.finished = state.cancelled or record.decision in FINISHED
    if record.exit_code is not None:
        state.resubmit_pending = False


def last_reason(records: Sequence[Record]) -> str | None:
    """The reason of the last decision in a shard's ledger; None before its first, or when the run was
    resubmitted since (a changed benchmark: its failure is not "the same with nothing changed")."""
    for record in reversed(records):
        if isinstance(record, Resubmitted):
            return None
        if isinstance(record, DecisionRecord):
            return record.reason
    return None
