"""``RunStore``: the only writer of a run's files, used by the collector while it holds the run lock.

Guarantees (docs/store.md):

- *Open changes no byte.* ``RunStore.open`` validates the manifest (store/run_files.py) and the
  reservation table's header. Torn tails are repaired only when the caller asks
  (``repair_torn_tails``, or a :class:`ResumePlan` applied), after it validated the identity.
- *Reserve before dispatch.* ``reserve`` makes the next execution number durable (one pwrite) before
  it returns; numbers only grow.
- *Every outcome is flushed when its append returns*, stamped with this run's id, the rollout id,
  the execution number and the task identity.
- *The outcome index is a cache.* A store that saved something leaves what it read and saved
  (``outcome_index.py``) at its first save and at close; a reconcile takes from it only what still
  hashes as written, and parses the rows after it.
- *Fresh replacement is detectable* (store/run_files.py: how a run's store comes to be open).

The store knows nothing of HTTP or of the configuration's meaning; it persists the identity dict it is
given (redaction is the identity module's job) and leaves selection and coverage to the pure modules.
"""

from __future__ import annotations

import contextlib
import os
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymslurm.clock import utc_now
from gymslurm.coverage import Coverage
from gymslurm.errors import CorruptRecordError, StoreError
from gymslurm.records import DEFAULT_MAX_ROLLOUT_ATTEMPTS, LEGACY_JUDGE_MARKERS, RolloutFailureRecord
from gymslurm.selection import BudgetPolicy, RolloutState, SavedOutcome, select_rollouts
from gymslurm.store import run_files
from gymslurm.store.adoptions import Adoptions, adopt_pending, read_adoptions
from gymslurm.store.atomic import publish_json, publish_text
from gymslurm.store.files import (
    read_json_object,
    read_resubmit_offset,
    write_coverage,
    write_gymslurm_metrics,
)
from gymslurm.store.history import (
    History,
    RolloutKeys,
    gc_paused,
    history_conflict,
    read_run_history,
    result_outcome,
    sidecar_outcome,
)
from gymslurm.store.inputs import (
    RolloutIndex,
    read_index,
    read_rows,
)
from gymslurm.store.jsonl import Appender, ends_cleanly, read_tail, repair_torn_tail
from gymslurm.store.lines import selected_rows
from gymslurm.store.manifest import IdentitySource, Manifest, write_manifest
from gymslurm.store.outcome_index import OutcomeLog
from gymslurm.store.paths import RunPaths, file_size, saved_outcome_bytes
from gymslurm.store.reservations import ReservationTable
from gymslurm.store.run_files import RunSpec


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """The run's selected state: one :class:`RolloutState` per rollout index, and the totals."""

    states: list[RolloutState]
    policy: BudgetPolicy
    attempts: int
    historical_failed_attempts: int
    torn_results_bytes: int
    torn_failures_bytes: int


@dataclass(frozen=True)
class ResumePlan:
    """What preparing a collection decided to change on the run it opened (collector/prepare.py makes
    it, pure); :meth:`RunStore.resume` applies it in one call, after the history is validated."""

    overridden: tuple[str, ...] = ()  # semantic keys resumed across (allow_unsafe_resume): mark it
    drift: tuple[str, ...] = ()  # operational keys that changed: one line in the drift journal
    record_attempt_limit: bool = False  # save the attempt limit an older manifest adopted
    retry_terminal_timeouts: bool | None = None  # the terminal-timeout policy to save (None: keep)
    resubmit: bool = False  # a fresh failure budget (``+resubmit=true``)

    @property
    def changes_metadata(self) -> bool:
        """Whether it writes anything but a torn tail's repair and a resubmit's offset."""
        return bool(self.overridden or self.drift or self.record_attempt_limit) or (
            self.retry_terminal_timeouts is not None
        )


@dataclass(frozen=True)
class Resumed:
    """What :meth:`RunStore.resume` did: the run's selected state after it, and what it changed."""

    reconciliation: Reconciliation
    adopted: int  # outcome rows NeMo Gym's collector appended, adopted (store/adoptions.py)
    repaired_bytes: int  # of incomplete last lines removed
    resubmitted: tuple[int, int] | None  # the failure and result lines a fresh budget starts after


class RunStore:
    """A validated, open run. Build it with ``create_fresh``, ``open`` or ``import_legacy``."""

    def __init__(self, paths: RunPaths, manifest: Manifest, table: ReservationTable) -> None:
        self.paths = paths
        self.manifest = manifest
        self.table = table
        self._index: RolloutIndex | None = None
        self._newest_outcome: array[int] | None = None  # per rollout: newest execution with an outcome
        self._results: Appender | None = None
        self._failures: Appender | None = None
        self._save_error: StoreError | None = None  # the first failed append stops all saving
        self._origins: Mapping[str, Mapping[str, Any] | None] = {}
        self._writable = table is not None and table.writable
        self._log: OutcomeLog | None = None  # the outcome index to leave (store/outcome_index.py)
        self._appended = False  # only a store that saved something leaves an index (at once, and at close)
        self._adoptions: Adoptions | None = None  # the adoption journal as the last read found it

    # --- building ------------------------------------------------------------------------------

    @classmethod
    def create_fresh(
        cls, paths: RunPaths, spec: RunSpec, *, identity_source: IdentitySource = "verified"
    ) -> RunStore:
        """Start a new run at ``paths``, replacing whatever was there (:func:`run_files.fresh_run_files`)."""
        manifest, index = run_files.fresh_run_files(paths, spec, identity_source)
        count = manifest.rollout_count
        store = cls(paths, manifest, ReservationTable(paths.reservations, manifest.run_id, count))
        store._index = index
        store._newest_outcome = array("q", [-1]) * count
        store._log = OutcomeLog.empty(manifest.run_id, count)
        return store

    @classmethod
    def open(
        cls, paths: RunPaths, *, writable: bool = True, adopt_attempts: int = DEFAULT_MAX_ROLLOUT_ATTEMPTS
    ) -> RunStore:
        """Open and validate a manifest-backed run (:func:`run_files.validated_manifest`). Changes no byte.

        ``adopt_attempts`` is the attempt limit a manifest without one adopts (the setting in force).
        """
        manifest = run_files.validated_manifest(paths, adopt_attempts)
        table = ReservationTable(
            paths.reservations, manifest.run_id, manifest.rollout_count, writable=writable
        )
        return cls(paths, manifest, table)

    @classmethod
    def import_legacy(cls, paths: RunPaths, spec: RunSpec) -> RunStore:
        """Adopt a run without a manifest (``allow_unsafe_resume``): :func:`run_files.legacy_run_files`."""
        manifest, index = run_files.legacy_run_files(paths, spec)
        table = ReservationTable(paths.reservations, manifest.run_id, manifest.rollout_count)
        store = cls(paths, manifest, table)
        store._index = index
        return store

    @staticmethod
    def legacy_inputs(paths: RunPaths) -> list[dict[str, Any]] | None:
        """The materialized tasks a legacy run saved, or None (:func:`run_files.legacy_inputs`)."""
        return run_files.legacy_inputs(paths)

    def close(self) -> None:
        if self._appended:
            self.write_outcome_index()
        for appender in (self._results, self._failures):
            if appender is not None:
                appender.close()
        if self._index is not None:
            self._index.close()
        self.table.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading -------------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def rollout_index(self) -> RolloutIndex:
        if self._index is None:
            self._index = read_index(self.tasks_path)
        return self._index

    @property
    def tasks_path(self) -> Path:
        """The run's own tasks file (``<stem>_gymslurm_inputs.jsonl``; NeMo Gym's name before manifest v3)."""
        return self.paths.tasks(self.manifest.format_version)

    def rollout_ids(self) -> list[str]:
        return list(self.rollout_index.ids)  # a list: the index holds them as bytes

    def inputs(self) -> list[dict[str, Any]]:
        """The materialized tasks, in rollout-index order."""
        return read_rows(self.tasks_path)

    def saved_identity(self) -> dict[str, Any] | None:
        """The identity saved beside the manifest, or None; the caller checks it against config_digest."""
        remedy = "restore it or use a new output path"
        return read_json_object(self.paths.identity, "the saved identity", remedy)

    def policy(self) -> BudgetPolicy:
        failure_offset, result_offset = read_resubmit_offset(self.paths)
        return BudgetPolicy(
            max_rollout_attempts=self.manifest.max_rollout_attempts,
            retry_terminal_timeouts=self.manifest.retry_terminal_timeouts,
            failure_offset=failure_offset,
            result_offset=result_offset,
        )

    def read_history(self) -> History:
        """Every saved outcome, from the run's outcome index as far as it verifies, then from the rows.

        A writable store keeps what it read as the index it leaves (:meth:`write_outcome_index`)."""
        index = self.rollout_index
        imported = self.manifest.identity_source == "imported"
        self._adoptions = read_adoptions(self.paths.adoptions, self.table.counts(), imported_run=imported)
        history, self._log = read_run_history(
            self.paths,
            self.run_id,
            RolloutKeys(index.index_of, index.by_task, (index.blob, index.ends)),
            self.manifest.rollout_count,
            legacy=imported,
            writable=self._writable,
            adoptions=self._adoptions,
        )
        return history

    def adopt(self) -> int:
        """Adopt the rows NeMo Gym's collector appended that the last read found (store/adoptions.py)."""
        adopted = adopt_pending(self._adoptions, self.table, self.paths.adoptions)
        if adopted:
            self._adoptions = None
        return adopted

    def write_outcome_index(self) -> None:
        """Leave the outcome index of what this writer read and saved, when it has anything new.

        Called at the first save and at close, never before: a run refused after its reconcile
        (another identity, a bad override) is left exactly as it was. A cache: a failure to write
        it (a full disk) costs the next reconcile its speed, nothing else."""
        if self._log is not None and self._save_error is None:
            with contextlib.suppress(OSError, StoreError):
                self._log.write(self.paths)

    def reconcile(self) -> Reconciliation:
        """Read every outcome, check it against the reservations, and select each rollout's state."""
        with gc_paused():
            return self._reconcile()

    def _reconcile(self) -> Reconciliation:
        history = self.read_history()
        policy = self.policy()
        counts = self.table.counts()
        if self._adoptions is not None and self._adoptions.pending:  # rows NeMo Gym added, not yet adopted
            counts = array("I", self._adoptions.raised(counts))
        ids = self.rollout_index.ids

        def conflict(index: int, problem: str) -> CorruptRecordError:
            return history_conflict(self.paths, ids[index], problem)

        states, newest = select_rollouts(counts, history.groups, policy, conflict)
        self._newest_outcome = newest
        return Reconciliation(
            states=states,
            policy=policy,
            attempts=sum(counts),
            historical_failed_attempts=history.failure_lines,
            torn_results_bytes=history.results_tail.torn_bytes,
            torn_failures_bytes=history.failures_tail.torn_bytes,
        )

    def resume(self, plan: ResumePlan) -> Resumed:
        """Validate the history, then apply ``plan``, in the order of spec 000.

        The history is validated first (every rollout's state selected: a conflict or a foreign row
        raises, no byte changed); then the rows NeMo Gym's collector appended are adopted, the
        override marked, the drift journaled, the adopted attempt limit and the policy saved, torn
        tails repaired and, with ``resubmit``, a fresh failure budget recorded; selection runs again
        when the policy changed.
        """
        reconciliation = self.reconcile()
        adopted = self.adopt()
        if plan.overridden:
            self.mark_identity_overridden()
        if plan.drift:
            self.append_drift(plan.drift)
        if plan.record_attempt_limit:
            self.record_max_rollout_attempts()
        if plan.retry_terminal_timeouts is not None:
            self.update_policy(retry_terminal_timeouts=plan.retry_terminal_timeouts)
        repaired = self.repair_torn_tails()
        resubmitted = self.resubmit() if plan.resubmit else None
        if self.policy() != reconciliation.policy:
            reconciliation = self.reconcile()
        return Resumed(reconciliation, adopted, repaired, resubmitted)

    # --- writing -------------------------------------------------------------------------------

    def repair_torn_tails(self) -> int:
        """Remove incomplete last lines (call only after identity validation); bytes removed.

        A file that ends with a newline has no torn tail (only a last line can lack one), so it is
        not scanned again (a resume would otherwise read its whole results file twice).
        """
        paths = (self.paths.results, self.paths.failures)
        return sum(repair_torn_tail(path) for path in paths if not ends_cleanly(path))

    def stamp_origins(self, origins: Mapping[str, Mapping[str, Any] | None]) -> None:
        """Stamp every record written from now on with NeMo Gym's origin of its taskset's server.

        ``origins`` maps a taskset to ``gymslurm.nemogym.ServerOrigin.stamps()`` (``_ng_environment_server``,
        ``_ng_result_type``, ``agent_ref``); such records get ``_ng_task_id`` too, as NeMo Gym stamps it.
        A result's own ``agent_ref`` is kept. The mapping is kept as given (it may look tasksets up as
        they are met); a taskset it maps to None gets no stamps.
        """
        self._origins = origins

    def reserve(self, index: int) -> int:
        """Durably reserve and return the next execution number of rollout ``index``."""
        return self.table.reserve(index)

    def append_result(self, index: int, attempt: int, result: Mapping[str, Any]) -> SavedOutcome:
        """Save a completed result for a reserved execution; flushed when this returns."""
        stray = sorted(k for k in result if k.startswith("_ng_") and k not in LEGACY_JUDGE_MARKERS)
        if stray:
            raise CorruptRecordError(
                f"refusing to save a result for rollout {self.rollout_index.ids[index]!r} carrying "
                f"collector-owned keys {stray}: the Environment Server must not send them"
            )
        stamps = self._stamps(index, attempt)
        if "agent_ref" in result:
            stamps.pop("agent_ref", None)
        row = {**result, **stamps}
        line = self._append("results", row)
        return self._saved(index, result_outcome(row, attempt, line), "results")

    def append_failure(
        self,
        index: int,
        attempt: int,
        record: RolloutFailureRecord,
        *,
        legacy_class: str | None = None,
        response: Any = None,
        diagnostics: Mapping[str, Any] | None = None,
    ) -> SavedOutcome:
        """Save a failure record in the sidecar; flushed when this returns."""
        rollout_id = self.rollout_index.ids[index]
        if record.run_id != self.run_id or record.episode_id.rollout_id != rollout_id:
            raise StoreError(
                f"failure record for {record.episode_id} / {record.run_id} saved under {rollout_id}"
            )
        if record.episode_id.attempt != attempt:
            raise StoreError(
                f"failure record for attempt {record.episode_id.attempt} saved as attempt {attempt}"
            )
        failure = record.failure
        row = self._stamps(index, attempt)
        row["_ng_failure_record"] = record.model_dump(mode="json", exclude_none=True)
        row["_ng_failure_class"] = record.routing_class
        row["_ng_failure_terminal"] = failure.terminal
        row["_ng_failure_message"] = failure.failure_reason
        if legacy_class and legacy_class != record.routing_class:
            row["_ng_failure_legacy_class"] = legacy_class
        if response is not None:
            row["_ng_failure_response"] = response
        if diagnostics:
            row["_ng_failure_diagnostics"] = dict(diagnostics)
        line = self._append("failures", row)
        return self._saved(index, sidecar_outcome(row, attempt, line), "failures", failure=True)

    def append_omission(
        self, index: int, attempt: int, payload: Mapping[str, Any] | None = None
    ) -> SavedOutcome:
        """Save an intentional omission (``_ng_omitted: true``), with a legacy ``skipped`` payload if any."""
        row = {**self._stamps(index, attempt), "_ng_omitted": True, **(payload or {})}
        return self._saved(index, sidecar_outcome(row, attempt, self._append("failures", row)), "failures")

    def write_coverage(self, coverage: Coverage | Mapping[str, Any]) -> None:
        if isinstance(coverage, Coverage):
            write_coverage(self.paths, coverage)
        else:  # a hand-made companion (tests of what a fresh replacement clears)
            publish_json(self.paths.coverage, dict(coverage))

    def write_aggregate_metrics(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """NeMo Gym's ``<stem>_aggregate_metrics.json``: one entry per Environment Server (nemogym.py)."""
        publish_json(self.paths.aggregate_metrics, [dict(entry) for entry in entries])

    def remove_aggregate_metrics(self) -> None:
        """No NeMo Gym ``<stem>_aggregate_metrics.json`` (no server answered: an older one is stale)."""
        self.paths.aggregate_metrics.unlink(missing_ok=True)

    def write_gymslurm_metrics(self, metrics: Mapping[str, Any]) -> None:
        """``<stem>_gymslurm_metrics.json``: ``{format_version, metrics, metrics_source, written_at}``."""
        write_gymslurm_metrics(self.paths.gymslurm_metrics, metrics)

    def selected_results(self, states: Sequence[RolloutState]) -> Iterator[tuple[int, dict[str, Any]]]:
        """(rollout index, saved row) of every selected result, read back one at a time in file order."""
        return selected_rows(self.paths.results, states)

    def write_health(self, report: Mapping[str, Any]) -> None:
        publish_json(self.paths.health, dict(report))

    def resubmit(self) -> tuple[int, int]:
        """Give retryable failures a fresh budget: record the current line counts as the offset."""
        results, failures = read_tail(self.paths.results), read_tail(self.paths.failures)
        if results.torn or failures.torn:
            raise StoreError("repair torn tails (after validation) before resubmitting")
        publish_text(self.paths.resubmit_offset, f"{failures.complete_lines}\n{results.complete_lines}\n")
        return failures.complete_lines, results.complete_lines

    def update_policy(self, *, retry_terminal_timeouts: bool) -> None:
        """Change the saved terminal-timeout policy (an explicit override only)."""
        self._republish(retry_terminal_timeouts=retry_terminal_timeouts)

    def record_max_rollout_attempts(self) -> None:
        """Save the attempt limit an older manifest lacked (adopted from the current setting, 000)."""
        if self.manifest.adopted_max_rollout_attempts:
            self._republish()
            self.manifest._adopted = False

    def mark_identity_overridden(self) -> None:
        """Record an ``allow_unsafe_resume`` identity override; the run is never verified again."""
        if self.manifest.identity_source == "verified":
            self._republish(identity_verified=False, identity_source="overridden")

    def append_drift(self, keys: Sequence[str]) -> None:
        """Journal a resume that went on across operational configuration drift."""
        line = {
            "at": utc_now(),
            "run_id": self.run_id,
            "keys": list(keys),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        }
        path = self.paths.resume_drift
        repair_torn_tail(path)
        appender = Appender(path, read_tail(path).complete_lines)
        try:
            appender.append(line)
        finally:
            appender.close()

    # --- internals -----------------------------------------------------------------------------

    def _republish(self, **changes: Any) -> None:
        self.manifest = self.manifest.model_copy(update=changes)
        write_manifest(self.paths.manifest, Manifest.model_validate(self.manifest.model_dump()))

    def _stamps(self, index: int, attempt: int) -> dict[str, Any]:
        if self._newest_outcome is None:
            raise StoreError("reconcile() the run before appending to it")
        if not self._newest_outcome[index] < attempt < self.table.count(index):
            raise StoreError(
                f"refusing an outcome for execution {attempt} of rollout {self.rollout_index.ids[index]!r}: "
                f"{self.table.count(index)} reserved, newest saved outcome is execution "
                f"{self._newest_outcome[index]} (each execution gets one outcome, after its reservation)"
            )
        stamps = self.rollout_index.stamps(index, self.run_id, attempt)
        own = stamps.pop("agent_ref", None)  # a row's own agent_ref, kept whole as NeMo Gym keeps it
        origin = self._origins.get(stamps["task_id"]["taskset"]) if self._origins else None
        if origin:
            stamps.update(origin)
            stamps["_ng_task_id"] = stamps["task_id"]
            if own is not None and "agent_ref" in origin:  # a flat row's server (a typed one stamps none)
                stamps["agent_ref"] = own
        return stamps

    def _saved(self, index: int, outcome: SavedOutcome, which: str, *, failure: bool = False) -> SavedOutcome:
        """Note a saved outcome: the newest per rollout, and in the outcome index to leave.

        ``failure``: a failure record (the sidecar's other rows are omissions), counted as the
        reader counts them."""
        assert self._newest_outcome is not None
        self._newest_outcome[index] = outcome.attempt
        if self._log is not None:
            appender = self._results if which == "results" else self._failures
            assert appender is not None
            if not self._log.saved(which, appender.last_written, index, outcome, failure=failure):
                self._log = None
        if not self._appended:  # the run was validated to be written to: a link killed from here on
            self._appended = True  # still leaves what its reconcile read
            self.write_outcome_index()
        return outcome

    def _append(self, which: str, row: Mapping[str, Any]) -> int:
        """Append one outcome row; after the first failed append nothing more is saved (either file).

        A full disk fails one append; saving on (other workers' outcomes, the other file) would leave
        a history with holes in arrival order and bury the first error under later ones. The run stays
        resumable: executions reserved but not saved are missing, and run again on resume.
        """
        if self._save_error is not None:
            raise type(self._save_error)(
                f"nothing more is saved after the first failed append: {self._save_error}"
            )
        appender = self._appender(which)  # refuses a torn file before writing: not a failed append
        try:
            return appender.append(row)
        except StoreError as error:
            self._save_error = error
            self._log = None  # the index on disk still holds for what it covers
            raise

    def _appender(self, which: str) -> Appender:
        if which == "results":
            if self._results is None:
                self._results = Appender(self.paths.results, self._lines(which))
            return self._results
        if self._failures is None:
            self._failures = Appender(self.paths.failures, self._lines(which))
        return self._failures

    def _lines(self, which: str) -> int:
        """The complete lines of an outcome file: the reconcile counted them (no second scan), unless
        the file is not as it read it."""
        path = getattr(self.paths, which)
        if self._log is not None and file_size(path) == self._log.sections[which].covered_bytes:
            return self._log.sections[which].lines
        return read_tail(path).complete_lines


__all__ = [
    "Reconciliation",
    "ResumePlan",
    "Resumed",
    "RunStore",
    "read_resubmit_offset",
    "saved_outcome_bytes",
]
