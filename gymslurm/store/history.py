"""Reading a run's outcome files into compact per-rollout :class:`SavedOutcome` groups.

This is the hot read path (a 1,000,000-rollout history must reconcile in about twice the time of a
bare JSON parse, see bench/store.py), so rows are not validated by pydantic here. Instead each row is
checked cheaply where it matters for trust:

- every row's ``_ng_run_id`` is this run's (a row without one is accepted only in an imported run,
  where it is a *legacy* row; any other id is foreign) — :class:`CorruptRecordError`;
- every row names a known rollout and an integer execution number;
- a failure row carries a well-formed ``RolloutFailureRecord`` shape whose nested run id, episode
  id, terminal flag and routing class agree with the row's stamps.

Legacy rows of an imported run get execution numbers by arrival, per rollout, sidecar lines before
main-file lines (spec 000); their own ``_ng_attempt`` values are ignored. Groups keep a single outcome
unwrapped (most rollouts have one) to save memory. Trade-off: result rows are not scanned for stray
``_ng_*`` keys on read; the appender refuses them on write.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from math import copysign, isfinite
from pathlib import Path
from typing import Any, Protocol, get_args

import orjson

from gymslurm.errors import CorruptRecordError
from gymslurm.formats import version_problem
from gymslurm.records import (
    FAILURE_KINDS,
    MAX_FAILURE_REASON,
    ROUTING_CLASS_UNSPECIFIED,
    Delivery,
    Source,
    Stage,
)
from gymslurm.selection import (
    SHARED_REWARDS,
    Group,
    SavedOutcome,
    is_numeric_reward,
    is_retry_masked,
    kept_partial_answer,
    kept_timeout_answer,
    plain,
)
from gymslurm.store.adoptions import Adoptions
from gymslurm.store.inputs import id_is_at
from gymslurm.store.jsonl import TailReport, iter_records, malformed, max_line_bytes, over_the_line_limit
from gymslurm.store.outcome_index import IndexRead, OutcomeLog, read_index
from gymslurm.store.paths import RunPaths

_READ_CHUNK = 1 << 20
SKIPPED = "skipped"  # a legacy producer's intentional skip
LEGACY_PARTIAL_RESPONSE = "_ng_failure_partial_response"  # NeMo Gym's name of a native partial response

RECORD_KEYS = frozenset({"schema_version", "episode_id", "run_id", "source", "delivery", "failure"})
FAILURE_KEYS = frozenset({"failure_reason", "terminal", "failure_kind", "stage"})
EPISODE_KEYS = frozenset({"rollout_id", "attempt"})
DELIVERIES, SOURCES, STAGES = (frozenset(get_args(vocabulary)) for vocabulary in (Delivery, Source, Stage))


@dataclass(slots=True)
class History:
    """Outcomes grouped per rollout index, and what the read found at each file's end."""

    groups: list[Group]
    results_tail: TailReport = field(default_factory=TailReport)
    failures_tail: TailReport = field(default_factory=TailReport)
    failure_lines: int = 0  # failure records (omissions excluded): ``historical_failed_attempts``
    legacy_counts: list[int] | None = None  # per rollout, legacy outcomes numbered by arrival

    def outcomes(self, index: int) -> tuple[SavedOutcome, ...] | list[SavedOutcome]:
        group = self.groups[index]
        if group is None:
            return ()
        return (group,) if isinstance(group, SavedOutcome) else group


class RolloutKeys:
    """Maps a row to its rollout index: by ``_ng_rollout_id``, or for legacy rows by task/repeat index.

    ``index_of`` needs only ``get`` (a dict, or the store's dict-free ``RolloutLookup``). ``id_bytes``
    (optional: the store's ``RolloutIndex.blob`` and ``ends``, rollout ``i``'s id being
    ``blob[ends[i]:ends[i + 1]]``) lets the reader try the rollout after the previous row's first:
    outcomes are mostly appended in dispatch order, and one comparison there is much cheaper than a
    lookup by id.
    """

    def __init__(
        self,
        index_of: _Lookup,
        by_task: Callable[[], Mapping[tuple[int, int], int]],
        id_bytes: tuple[bytes | bytearray, Sequence[int]] = (b"", (0,)),
    ):
        self.index_of = index_of
        self.id_bytes = id_bytes
        self._by_task = by_task
        self._by_task_cache: Mapping[tuple[int, int], int] | None = None

    def find(self, rollout_id: Any, *guesses: Any) -> int | None:
        """The index of ``rollout_id``: tried first at each of ``guesses`` (:func:`id_is_at`), then
        looked up.

        The failure sidecar is read through it: its rows are far apart in rollout order (a lookup by
        id each, and the lookup's sorted index built once, were half of a 1M reconcile's failure read),
        but a rollout's index is most often its task index (no repeats) or next to the row before."""
        blob, ends = self.id_bytes
        for guess in guesses:
            if id_is_at(blob, ends, guess, rollout_id):
                return guess
        return self.index_of.get(rollout_id)

    def legacy_index(self, row: Mapping[str, Any]) -> int | None:
        found = self.index_of.get(row.get("_ng_rollout_id"))
        if found is not None:
            return found
        if self._by_task_cache is None:
            self._by_task_cache = self._by_task()
        key = (row.get("_ng_task_index"), row.get("_ng_rollout_index"))
        return self._by_task_cache.get(key)  # type: ignore[arg-type]


class _Lookup(Protocol):
    def get(self, rollout_id: Any, /) -> int | None: ...


class _Interner(dict[Any, Any]):
    def __missing__(self, key: Any) -> Any:
        self[key] = key
        return key


Names = _Interner | None  # one shared string per distinct name while reading a large history


def read_history(
    results: Path,
    failures: Path,
    *,
    run_id: str,
    keys: RolloutKeys,
    rollout_count: int,
    legacy: bool,
    manifest: Path | None = None,
    known: IndexRead | None = None,
    log: OutcomeLog | None = None,
    adoptions: Adoptions | None = None,
) -> History:
    """Read the failure sidecar then the results file (that order numbers legacy rows by arrival).

    ``manifest``: set while importing a legacy run (no manifest yet); a stamped row then means the
    run's manifest was lost, which an import cannot repair. ``known``: the run's verified outcome
    index: its outcomes are taken as read, and each file is read from where it ends. ``log``: every
    outcome read is added to it (the run's writer keeps it to write the index again). ``adoptions``:
    the run's adoption journal; unstamped rows it does not number are adopted (store/adoptions.py)."""
    reader = _Reader(run_id, keys, rollout_count, legacy)
    reader.adoptions = adoptions
    reader.importing_beside = manifest
    reader.tail_log = log
    starts = {name: (0, 0) for name in ("failures", "results")}
    if known is not None:
        reader.history.failure_lines = known.log.failure_lines
        starts = known.log.starts()
        known.add_to(reader.history.groups, "failures")
    reader.which = "failures"
    reader.read_failures(failures, starts["failures"])
    if known is not None:
        known.add_to(reader.history.groups, "results")
    reader.which = "results"
    reader.read_results(results, starts["results"])
    if log is not None:
        log.failure_lines = reader.history.failure_lines
    return reader.history


def read_run_history(
    paths: RunPaths,
    run_id: str,
    keys: RolloutKeys,
    rollout_count: int,
    *,
    legacy: bool,
    writable: bool,
    adoptions: Adoptions | None = None,
) -> tuple[History, OutcomeLog | None]:
    """A run's history, from its outcome index as far as it verifies, then from the rows after it;
    and for its writer (``writable``) the log of all of it, to leave as the next index.

    A legacy (imported) run has no index: its rows are numbered by arrival across both files."""
    known = None if legacy else read_index(paths, run_id, rollout_count)
    log = None
    if writable and not legacy:
        log = known.log if known is not None else OutcomeLog.empty(run_id, rollout_count)
    history = read_history(
        paths.results,
        paths.failures,
        run_id=run_id,
        keys=keys,
        rollout_count=rollout_count,
        legacy=legacy,
        known=known,
        log=log,
        adoptions=adoptions,
    )
    if log is None:
        return history, None
    try:
        log.caught_up(paths, {"failures": history.failures_tail, "results": history.results_tail})
    except OSError:
        return history, None
    return history, log


class _Reader:
    def __init__(self, run_id: str, keys: RolloutKeys, rollout_count: int, legacy: bool) -> None:
        self.run_id = run_id
        self.keys = keys
        self.history = History(groups=[None] * rollout_count)
        if legacy:
            self.history.legacy_counts = [0] * rollout_count
        self.intern = _Interner()
        self.importing_beside: Path | None = None
        self.tail_log: OutcomeLog | None = None  # set: every outcome read is added to it (the writer's)
        self.adoptions: Adoptions | None = None
        self.which = "failures"  # the file being read

    def add(self, index: int, outcome: SavedOutcome) -> None:
        groups = self.history.groups
        group = groups[index]
        if group is None:
            groups[index] = outcome
        elif isinstance(group, SavedOutcome):  # one outcome so far
            groups[index] = [group, outcome]
        else:
            group.append(outcome)

    def locate(self, path: Path, line: int, row: dict[str, Any], near: int = -2) -> tuple[int, int, bool]:
        """``(rollout index, execution number, legacy?)`` of a row, or a CorruptRecordError.

        ``near``: the index of the row before in the same file (its rollout and the next are guessed).
        """
        stamped = row.get("_ng_run_id")
        if stamped != self.run_id:
            if stamped is not None and self.importing_beside is not None:
                raise malformed(
                    path,
                    line,
                    f"was saved by gymslurm run {stamped!r}, whose manifest {self.importing_beside} is "
                    "missing: an import cannot recreate its execution reservations. Restore the manifest "
                    "from a backup, or start at a new output path",
                )
            if stamped is not None:
                raise malformed(path, line, _foreign(stamped, self.run_id))
            adoptions = self.adoptions
            if self.history.legacy_counts is not None and (
                adoptions is None or adoptions.imported_row(self.which, line)
            ):
                return self._legacy(path, line, row)
            if adoptions is None:
                raise malformed(path, line, _foreign(stamped, self.run_id))
            return self._adopted(path, line, row, adoptions)
        index = self.keys.find(row.get("_ng_rollout_id"), row.get("_ng_task_index"), near + 1, near)
        if index is None:
            raise malformed(
                path, line, f"names rollout {row.get('_ng_rollout_id')!r}, which this run does not have"
            )
        attempt = row.get("_ng_attempt")
        if type(attempt) is not int or attempt < 0:
            raise malformed(path, line, f"has no valid _ng_attempt ({attempt!r})")
        return index, attempt, False

    def _adopted(
        self, path: Path, line: int, row: dict[str, Any], adoptions: Adoptions
    ) -> tuple[int, int, bool]:
        """A row another tool (NeMo Gym's collector) appended: numbered by the adoption journal."""
        index = self.keys.legacy_index(row)
        if index is None:
            raise malformed(path, line, "has no _ng_run_id and matches no materialized rollout")
        return index, adoptions.execution(self.which, line, index), True

    def _legacy(self, path: Path, line: int, row: dict[str, Any]) -> tuple[int, int, bool]:
        index = self.keys.legacy_index(row)
        if index is None:
            raise malformed(path, line, "is a legacy row that matches no materialized rollout")
        counts = self.history.legacy_counts
        assert counts is not None
        attempt = counts[index]
        counts[index] = attempt + 1
        return index, attempt, True

    def read_results(self, path: Path, start: tuple[int, int] = (0, 0)) -> None:  # noqa: PLR0915
        """Read the results file; the hot loop of a reconcile (bench/store.py measures it).

        Locals, positional SavedOutcome arguments and the line loop of ``iter_records`` inlined on
        purpose (a generator's per-row resume and tuple cost ~10% of a 1,000,000-row read). The loop
        keeps ``iter_records``' contract exactly: complete lines only, a torn tail reported in
        ``results_tail`` and never parsed, blank lines counted but skipped, bad JSON raising.
        """
        try:
            handle = open(path, "rb", buffering=_READ_CHUNK)  # noqa: SIM115
        except FileNotFoundError:
            return
        intern, add, locate, run_id, new = self.intern, self.add, self.locate, self.run_id, plain
        tail, groups, find, loads = (
            self.history.results_tail,
            self.history.groups,
            self.keys.find,
            orjson.loads,
        )
        blob, ends = self.keys.id_bytes
        known, shared = len(ends) - 1, dict[float, float]()
        readline, limit = handle.readline, max_line_bytes()
        offset, line, index = start[0], start[1] - 1, start[1] - 1
        logged = self.tail_log.sections["results"].add if self.tail_log is not None else None
        with handle:
            handle.seek(offset)
            while raw := readline(limit + 1):  # bounded_lines inlined (a generator per row shows here)
                if raw[-1:] != b"\n":
                    if len(raw) > limit:
                        raise over_the_line_limit(path, line + 2, limit)  # the next line, 1-based
                    tail.torn_at, tail.torn_bytes = offset, len(raw)
                    break
                line += 1
                offset += len(raw)
                try:
                    row = loads(raw)
                except orjson.JSONDecodeError as error:
                    if raw.isspace():
                        continue
                    raise malformed(path, line, f"is not valid JSON ({error})") from None
                if type(row) is not dict:
                    raise malformed(path, line, "is not a JSON object")
                get = row.get
                rollout_id = get("_ng_rollout_id")
                index += 1
                if (
                    index >= known
                    or type(rollout_id) is not str
                    or blob[ends[index] : ends[index + 1]] != rollout_id.encode()
                ):
                    index = find(rollout_id, get("_ng_task_index"))  # type: ignore[assignment]
                attempt = get("_ng_attempt")
                if get("_ng_run_id") != run_id or index is None or type(attempt) is not int or attempt < 0:
                    index, attempt, _ = locate(path, line, row)
                response = get("response")
                if response is not None and type(response) is not dict:
                    raise malformed(path, line, str(response_problem(row)))
                reward = get("reward")
                if (type(reward) is not float and type(reward) is not int) or not isfinite(reward):
                    reward = None
                elif (  # selection.shared_reward, inlined (a call per row shows here)
                    type(reward) is float
                    and (reward or copysign(1.0, reward) > 0.0)
                    and (len(shared) < SHARED_REWARDS or reward in shared)
                ):
                    reward = shared.setdefault(reward, reward)
                if get("mask_sample") is True:
                    outcome = result_outcome(row, attempt, line, intern)
                else:  # result_outcome's common case, inlined (a test pins the two equal)
                    outcome = new(SavedOutcome)  # SavedOutcome(attempt, "result", line, reward), inlined
                    outcome.attempt, outcome.kind, outcome.line, outcome.reward = (
                        attempt,
                        "result",
                        line,
                        reward,
                    )
                if groups[index] is None:
                    groups[index] = outcome
                else:
                    add(index, outcome)
                if logged is not None:
                    logged(index, outcome)
        tail.complete_lines, tail.complete_bytes = line + 1, offset

    def read_failures(self, path: Path, start: tuple[int, int] = (0, 0)) -> None:
        index = -2
        logged = self.tail_log.sections["failures"].add if self.tail_log is not None else None
        for line, row in iter_records(path, self.history.failures_tail, start):
            index, attempt, legacy = self.locate(path, line, row, index)
            if row.get("_ng_omitted") is True:
                if "_ng_failure_record" in row:
                    raise malformed(path, line, "is both an omission and a failure")
            else:
                self.history.failure_lines += 1
                if not legacy or "_ng_failure_record" in row:
                    problem = failure_row_problem(row, attempt)
                    if problem:
                        raise malformed(path, line, f"is not a valid failure record: {problem}")
            outcome = sidecar_outcome(row, attempt, line, self.intern)
            self.add(index, outcome)
            if logged is not None:
                logged(index, outcome)


# --- the one saved-row reader: a row as selection needs it --------------------------------------------


def result_outcome(row: Mapping[str, Any], attempt: int, line: int, intern: Names = None) -> SavedOutcome:
    """What selection needs of a saved completed result (the store's rows and legacy rows alike)."""
    reward = row.get("reward")
    if row.get("mask_sample") is not True:
        return SavedOutcome(attempt, "result", line, reward if is_numeric_reward(reward) else None)
    kind = row.get("failure_kind")
    kind = (intern[kind] if intern is not None else kind) if type(kind) is str else None
    return SavedOutcome(
        attempt,
        "result",
        line,
        reward if is_numeric_reward(reward) else None,
        masked=True,
        retry_masked=is_retry_masked(row),
        failure_kind=kind,
    )


def sidecar_outcome(row: Mapping[str, Any], attempt: int, line: int, intern: Names = None) -> SavedOutcome:
    """What selection needs of a failure-sidecar row: an omission, a failure record, or a legacy failure.

    Lenient by design: the store checks a stamped row first (:func:`failure_row_problem`); a legacy
    file (no manifest) is read as observed. A legacy omission may carry a failure payload
    (``_ng_failure_class: skipped``, terminal); its class is kept so that an explicit ``skipped``
    scoring entry can find it. A legacy failure without a canonical record has an unknown delivery
    (``possibly_delivered``, the conservative reading) and its routing class as its kind when that is
    a canonical kind.
    """
    name: Callable[[Any], Any] = intern.__getitem__ if intern is not None else _same
    routing = row.get("_ng_failure_class")
    routing = routing if type(routing) is str and routing else None
    skipped = routing == SKIPPED and "_ng_failure_record" not in row  # a legacy skip is an omission (000)
    if row.get("_ng_omitted") is True or skipped:
        terminal = row.get("_ng_failure_terminal") is True
        return SavedOutcome(attempt, "omission", line, terminal=terminal, failure_class=name(routing))
    legacy_class = row.get("_ng_failure_legacy_class")
    legacy_class = legacy_class if type(legacy_class) is str else None
    record = row.get("_ng_failure_record")
    response = row.get("_ng_failure_response")
    max_attempts = None
    if type(record) is dict:
        failure = record.get("failure")
        failure = failure if type(failure) is dict else {}
        kind = failure.get("failure_kind")
        terminal = failure.get("terminal", row.get("_ng_failure_terminal") is True) is True
        delivery = record.get("delivery", "possibly_delivered")
        stage = failure.get("stage")
        kept = kept_partial_answer(stage, response)
    else:
        routing = routing or ROUTING_CLASS_UNSPECIFIED
        kind = routing if routing in FAILURE_KINDS else None
        terminal, delivery, stage = row.get("_ng_failure_terminal") is True, "possibly_delivered", None
        response = response if response is not None else row.get(LEGACY_PARTIAL_RESPONSE)
        kept = kept_partial_answer(row.get("_ng_failure_stage"), response, legacy=True)
        limit = row.get("_ng_failure_max_attempts")  # 000: legacy runs keep their per-row limits
        max_attempts = limit if type(limit) is int and limit >= 1 else None
    kept = kept or kept_timeout_answer((kind, routing, legacy_class), response)
    return SavedOutcome(
        attempt,
        "failure",
        line,
        terminal=terminal,
        delivery=name(delivery),
        failure_kind=name(kind),
        stage=name(stage),
        failure_class=name(routing),
        legacy_class=name(legacy_class),
        kept_answer=kept,
        max_attempts=max_attempts,
    )


def row_outcome(row: Mapping[str, Any], attempt: int, line: int) -> SavedOutcome:
    """Any saved row wherever it sits: a merged or reverified file may hold failure rows in its main file."""
    if row.get("_ng_omitted") is True or type(row.get("_ng_failure_class")) is str:
        return sidecar_outcome(row, attempt, line)
    return result_outcome(row, attempt, line)


def _same(value: Any) -> Any:
    return value


def _foreign(stamped: object, run_id: str) -> str:
    if stamped is None:
        return f"has no _ng_run_id, but this run ({run_id}) stamps every record it writes"
    return (
        f"belongs to run {stamped!r}, not to this run {run_id}: files of two runs were mixed "
        "(a copied or moved file?)"
    )


def failure_row_problem(row: Mapping[str, Any], attempt: int) -> str | None:
    """Why a failure row's canonical record is malformed or disagrees with its stamps, or None."""
    record = row.get("_ng_failure_record")
    if type(record) is not dict:
        return "_ng_failure_record is missing or not an object"
    problem = version_problem("failure_record", record.get("schema_version"))
    if problem is not None:
        return problem
    if not record.keys() <= RECORD_KEYS:
        return f"unknown fields {sorted(record.keys() - RECORD_KEYS)}"
    episode, failure = record.get("episode_id"), record.get("failure")
    if type(episode) is not dict or not episode.keys() <= EPISODE_KEYS:
        return "episode_id is malformed"
    if episode.get("rollout_id") != row.get("_ng_rollout_id") or episode.get("attempt", 0) != attempt:
        return "episode_id disagrees with the row's _ng_rollout_id/_ng_attempt"
    if record.get("run_id") != row.get("_ng_run_id"):
        return "run_id disagrees with the row's _ng_run_id"
    if record.get("source") not in SOURCES or record.get("delivery") not in DELIVERIES:
        return "source or delivery is not a known value"
    return provenance_problem(record) or _failure_problem(failure, row)


def provenance_problem(record: Mapping[str, Any]) -> str | None:
    """A record that contradicts itself: the environment reported it, so it was delivered (PROTOCOL.md).

    The one rule behind ``RolloutFailureRecord``'s validator, for saved rows read without pydantic.
    """
    if record.get("source") == "environment" and record.get("delivery") != "delivered":
        return (
            f"source: environment with delivery: {record.get('delivery')!r} contradicts itself (a failure "
            "the environment reported was delivered to it)"
        )
    return None


def response_problem(row: Mapping[str, Any]) -> str | None:
    """A completed result whose ``response`` is present but not an object: no measured result (000)."""
    response = row.get("response")
    if response is None or type(response) is dict:
        return None
    return f"has a 'response' that is a {type(response).__name__}, not an object (invalid_response)"


def _failure_problem(failure: Any, row: Mapping[str, Any]) -> str | None:
    if type(failure) is not dict or not failure.keys() <= FAILURE_KEYS:
        return "failure is malformed or has unknown fields"
    reason, terminal, kind = (
        failure.get("failure_reason"),
        failure.get("terminal"),
        failure.get("failure_kind"),
    )
    if type(reason) is not str or len(reason) > MAX_FAILURE_REASON:
        return f"failure_reason must be a string of at most {MAX_FAILURE_REASON} characters"
    if type(terminal) is not bool or row.get("_ng_failure_terminal") is not terminal:
        return "terminal is missing or disagrees with _ng_failure_terminal"
    if kind is not None and type(kind) is not str:
        return "failure_kind must be a string when present"
    if failure.get("stage") is not None and failure.get("stage") not in STAGES:
        return "stage is not a known stage"
    if row.get("_ng_failure_class") != (kind or ROUTING_CLASS_UNSPECIFIED):
        return "_ng_failure_class disagrees with the record's failure_kind"
    if row.get("_ng_failure_message", reason) != reason:
        return "_ng_failure_message disagrees with the record's failure_reason"
    legacy_class = row.get("_ng_failure_legacy_class")
    if legacy_class is not None and type(legacy_class) is not str:
        return "_ng_failure_legacy_class must be a string when present"
    return None


def history_conflict(
    paths: RunPaths, rollout_id: str, problem: str, remedy: str = "use a new output path"
) -> CorruptRecordError:
    """The one error for a rollout whose saved history conflicts with its reservations."""
    return CorruptRecordError(
        f"rollout {rollout_id!r} has {problem} in {paths.results} / {paths.failures}: its history "
        f"conflicts with {paths.reservations}. Restore the run's files together from a backup, or {remedy}"
    )


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of acyclic objects.

    Without it, full collections keep re-scanning the growing outcome groups (tens of percent of a
    large reconcile); nothing built here forms a cycle, so reference counting frees it all.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
