"""Judge-only reverification: re-grade saved ``judge_failed`` answers into a separate output.

``gymslurm reverify --judge-failed-only`` reads a manifest-backed run and writes a *separate* output:
every rollout whose selected outcome is a completed result is carried through unchanged (its saved
bytes), and every rollout whose history ends in a judge failure that kept the model's answer is
graded again by the Environment Server without running the agent. The source run is never written:
no reservation, no append, no repair (spec 000, "judge-only recovery"; README reading 2).

Which answer may be reused (the review's policy, spec 002), walking a rollout's executions from the
newest reservation down:

- an execution reserved without an outcome (an interruption) is passed over;
- the first *recorded* outcome decides: a ``judge_failed`` (or legacy ``judge_invalid``) failure whose
  sidecar row kept the answer is re-judged, in a new attempt numbered after the newest reservation;
- any other recorded outcome (an agent failure, a judge failure without an answer, an omission)
  stops the walk: an older answer behind it is never reached, and a warning names both;
- a rollout whose budget is exhausted is left alone (resubmit gives it a fresh budget first).

Where the answer is: a judge failure's ``_ng_failure_response`` (the collector saves a legacy
producer's response there). For every other kind that field is diagnostic only and never re-judged.

The re-grade call (documented in docs/aggregation.md, "Re-grading protocol"): ``POST <url>/verify``
with ``{"episode_id": {"rollout_id", "attempt"}, "task": {"task_id", "task_input"}, "response": A}``,
answered like ``POST /run``: ``{"episode_id", "task_id", "result": {...}}`` or ``{..., "failure"}``.
gymslurm.dispatch sends it and classifies the answer by ``/run``'s rules (the only HTTP in gymslurm):
a result is written to the output, a failure (the answer kept) to the output's sidecar, an
intentional omission as an omission row there.

In a chain (``+require_complete=true``, what ``gymslurm submit --reverify RUN`` runs in each job): a
re-grade the judge never answered (a transport error or an HTTP error: a failure the collector
recorded, not terminal) is not saved, so the next link asks again; the output is published only once
every eligible answer has its re-grade (also when none was eligible: the completed results carried
through), and the command exits 1 while some remain (the chain retries; what was graded stays in the
journal).

Never silent: when nothing is eligible the command says why (how many judge failures, how many kept
no answer, how many were stopped by a newer outcome) and exits 1. Trade-off: calls are sequential;
judge-only recovery is for the handful of rollouts a judge outage left behind, not a bulk re-score.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from gymslurm.dispatch import Completed, Failed, Outcome, verify_answer, verify_client
from gymslurm.errors import ConfigError
from gymslurm.records import EpisodeId, Protocol
from gymslurm.selection import SUCCESSFUL, RolloutState, SavedOutcome, has_saved_generation
from gymslurm.settings import max_rollout_attempts
from gymslurm.shard_inputs import RECOVERY_SUFFIXES, ShardSource, check_output
from gymslurm.store.atomic import publish_stream
from gymslurm.store.jsonl import Appender, iter_complete_lines, iter_records, repair_torn_tail
from gymslurm.store.lines import LineIndex, index_file, read_lines
from gymslurm.store.paths import RunPaths, companion_path
from gymslurm.store.store import RunStore

if TYPE_CHECKING:
    import httpx

JUDGE_KINDS = frozenset({"judge_failed", "judge_invalid"})
VERIFY_PATH = "/verify"

Action = Literal["carry", "rejudge", "skip"]


@dataclass(frozen=True)
class Decision:
    """What reverification does with one rollout, and why."""

    index: int
    action: Action
    line: int | None = None  # results line (carry) or sidecar line (rejudge)
    source_attempt: int | None = None
    new_attempt: int | None = None
    reason: str = ""
    warning: str | None = None


def is_judge_failure(outcome: SavedOutcome) -> bool:
    """A failure named ``judge_failed``/``judge_invalid`` by its kind, routing or legacy class."""
    names = {outcome.failure_kind, outcome.failure_class, outcome.legacy_class}
    return outcome.kind == "failure" and bool(names & JUDGE_KINDS)


def plan_rollout(
    index: int,
    reserved: int,
    outcomes: Sequence[SavedOutcome],
    state: RolloutState,
    answered: Callable[[int], bool],
) -> Decision:
    """Carry, re-judge or skip one rollout under the review's policy (module docstring). Pure."""
    if state.disposition in SUCCESSFUL and state.selected is not None:
        return Decision(index, "carry", line=state.selected.line, reason="completed result")
    if state.exhausted:
        return Decision(index, "skip", reason="failure budget exhausted")
    by_attempt = {outcome.attempt: outcome for outcome in outcomes}
    for attempt in range(reserved - 1, -1, -1):
        outcome = by_attempt.get(attempt)
        if outcome is None:
            continue  # an interruption: look further back
        if is_judge_failure(outcome) and answered(outcome.line):
            return Decision(
                index,
                "rejudge",
                line=outcome.line,
                source_attempt=attempt,
                new_attempt=reserved,
                reason="judge failure with a saved answer",
            )
        return _stopped(index, outcome, by_attempt, answered)
    return Decision(index, "skip", reason="no recorded outcome")


def _stopped(
    index: int, newest: SavedOutcome, by_attempt: Mapping[int, SavedOutcome], answered: Callable[[int], bool]
) -> Decision:
    what = _describe(newest, answered)
    older = [o for a, o in sorted(by_attempt.items()) if a < newest.attempt and is_judge_failure(o)]
    reusable = [o for o in older if answered(o.line)]
    if not reusable:
        return Decision(index, "skip", reason=what)
    warning = (
        f"a newer recorded outcome (execution {newest.attempt}: {what}) stops the reuse of the answer "
        f"saved with the judge failure of execution {reusable[-1].attempt}; resume collection to generate "
        "a new answer instead"
    )
    return Decision(index, "skip", reason="stopped by a newer recorded outcome", warning=warning)


def _describe(outcome: SavedOutcome, answered: Callable[[int], bool]) -> str:
    if is_judge_failure(outcome):
        return "judge failure without a saved answer" if not answered(outcome.line) else "judge failure"
    if outcome.kind == "failure":
        return f"failure {outcome.failure_class or outcome.failure_kind or 'environment_server_failed'}"
    return "intentional omission" if outcome.kind == "omission" else "completed result"


# --- the re-grade call ----------------------------------------------------------------------------


Regrade = Callable[[dict[str, Any]], Outcome]


def regrade_request(stamps: Mapping[str, Any], task_input: object, answer: object) -> dict[str, Any]:
    """The ``POST /verify`` body for one saved answer (the task's input and the answer as saved)."""
    return {
        "episode_id": {"rollout_id": stamps["_ng_rollout_id"], "attempt": stamps["_ng_attempt"]},
        "task": {"task_id": stamps["task_id"], "task_input": task_input},
        "response": answer,
    }


def http_regrader(
    url: str,
    run_id: str,
    *,
    timeout_s: float = 60.0,
    client: httpx.Client | None = None,
    protocol: Protocol = "episode",
) -> Regrade:
    """A :data:`Regrade` that POSTs to ``<url>/verify`` through :func:`gymslurm.dispatch.verify_answer`.

    ``protocol``: ``episode`` (the typed re-grade body), or a legacy one: NeMo Gym's flat verify
    request to a resources server's ``/verify`` (``url`` is then that resources server).
    """
    http = client or verify_client(timeout_s)

    def regrade(request: dict[str, Any]) -> Outcome:
        episode = EpisodeId.model_validate(request["episode_id"])
        return verify_answer(
            http, url, episode, request["task"], request["response"], run_id=run_id, protocol=protocol
        )

    return regrade


# --- the command's work ---------------------------------------------------------------------------


@dataclass
class ReverifyReport:
    """What a reverification did, for the command to print."""

    carried: int = 0
    rejudged: int = 0
    regraded_ok: int = 0
    regrade_failed: int = 0
    regrade_omitted: int = 0
    judge_failures_seen: int = 0
    without_answer: int = 0
    stopped: int = 0
    skipped: int = 0
    resumed: int = 0  # re-grades reused from an interrupted reverification's journal
    unanswered: int = 0  # re-grades the judge never answered (require_complete: asked again next time)
    published: bool = False  # the output (and its sidecar) was written
    warnings: list[str] = field(default_factory=list)

    def nothing_to_do_message(self) -> str:
        return (
            f"nothing was re-verified: of the source's rollouts, {self.judge_failures_seen} have judge "
            f"failures in their history, {self.without_answer} of those kept no answer, {self.stopped} "
            f"were stopped by a newer recorded outcome without an answer, {self.skipped} were skipped in all "
            f"({self.carried} completed results were carried through). Only a judge failure that kept the "
            "model's answer, with nothing but interruptions after it, can be re-judged"
        )


def source_output(path: Path) -> Path:
    """The run output a source names: a ``<stem>_failures.jsonl`` sidecar names ``<stem>.jsonl``."""
    if path.name.endswith("_failures.jsonl"):
        return path.with_name(path.name[: -len("_failures.jsonl")] + ".jsonl")
    return path


def check_reverify_output(output: Path, source: Path) -> None:
    """Refuse to write into the source run (any spelling, ``unsafe_`` prefix) or any established run."""
    target = source.resolve()
    shard = ShardSource(target, (source.absolute(),), target)
    names = {"what": "the reverification output", "source": "source run"}
    check_output(output, [shard], **names)
    for spelling in {output.absolute(), output.resolve()}:
        if spelling.name.startswith("unsafe_"):
            check_output(spelling.with_name(spelling.name[len("unsafe_") :]), [shard], **names)
    if output.resolve() == target or any(
        companion_path(output.resolve(), s).exists() for s in RECOVERY_SUFFIXES
    ):
        raise ConfigError(f"{output} is an established run; reverification writes a separate output only")


def reverify_judge_failed(
    source: Path, output: Path, regrade_for: Callable[[str], Regrade], *, require_complete: bool = False
) -> ReverifyReport:
    """Plan every rollout of ``source``, re-grade the eligible answers, write ``output`` (+ sidecar).

    ``require_complete`` (a chain's link): a re-grade the judge did not answer is not saved and the
    output waits for it (``report.unanswered``); with nothing to re-grade the carried results are
    still published.
    """
    source = source_output(source)
    paths = RunPaths.for_output(source)
    if not paths.manifest.exists():
        raise ConfigError(
            f"{source} has no manifest ({paths.manifest}); judge-only reverification reads manifest-backed "
            "runs only, whose history says which answer is still current"
        )
    check_reverify_output(output, source)
    store = RunStore.open(paths, writable=False, adopt_attempts=max_rollout_attempts())
    try:
        rec, history, reserved = store.reconcile(), store.read_history(), store.table.counts()
        inputs, index = store.inputs(), store.rollout_index
    finally:
        store.close()
    groups = (history.outcomes(i) for i in range(len(rec.states)))
    answers = _judge_answers(index_file(paths.failures), groups)
    report = ReverifyReport()
    decisions = []
    for i, state in enumerate(rec.states):
        outcomes = history.outcomes(i)
        decision = plan_rollout(i, reserved[i], outcomes, state, answers.__contains__)
        _tally(report, decision, outcomes, answers, index.ids[i])
        decisions.append(decision)
    rejudge = [d for d in decisions if d.action == "rejudge"]
    if rejudge:  # before any judge call: a write that cannot happen must not cost re-grades
        _make_parent(output)
    journal = ReverifyJournal(output, store.run_id) if rejudge else None
    rows: list[bytes] = []
    failures: list[bytes] = []
    if journal is not None:
        regrade = regrade_for(store.run_id)

        def stamps(d: Decision) -> dict[str, Any]:
            assert d.new_attempt is not None  # every re-judge decision numbers its new attempt
            return index.stamps(d.index, store.run_id, d.new_attempt)

        for decision in rejudge:
            assert decision.line is not None
            kind, row = journal.done.get((decision.index, decision.source_attempt)) or _regraded(
                decision,
                stamps(decision),
                inputs[decision.index]["task_input"],
                answers[decision.line],
                regrade,
                store.run_id,
                journal,
                keep_unanswered=not require_complete,
            )
            _count(report, kind)
            if kind != "unanswered":
                (rows if kind == "result" else failures).append(orjson.dumps(row) + b"\n")
        report.resumed = journal.resumed
    elif not require_complete:
        return report
    if report.unanswered:  # the next run asks the judge again; what was graded stays in the journal
        assert journal is not None
        journal.close()
        return report
    carried = {d.line for d in decisions if d.action == "carry"}
    _make_parent(output)
    _publish(output, _chain(_lines_of(paths.results, carried), rows), failures)
    report.published = True
    if journal is not None:
        journal.finish()
    return report


def _count(report: ReverifyReport, kind: str) -> None:
    if kind == "unanswered":
        report.unanswered += 1
    elif kind == "result":
        report.regraded_ok += 1
    elif kind == "failure":
        report.regrade_failed += 1
    else:
        report.regrade_omitted += 1


def _regraded(  # noqa: PLR0917
    decision: Decision,
    stamps: dict[str, Any],
    task_input: object,
    answer: object,
    regrade: Regrade,
    run_id: str,
    journal: ReverifyJournal,
    *,
    keep_unanswered: bool = True,
) -> tuple[str, dict[str, Any]]:
    """Re-grade one saved answer and journal the row it gives before anything else happens.

    ``keep_unanswered`` False: a re-grade the judge never answered (:func:`unanswered`) is neither
    journaled nor kept: ``("unanswered", {})``.
    """
    outcome = regrade(regrade_request(stamps, task_input, answer))
    if not keep_unanswered and unanswered(outcome):
        return "unanswered", {}
    provenance = {"source_attempt": decision.source_attempt, "source_run_id": run_id}
    if isinstance(outcome, Completed):
        kind, row = "result", {**outcome.result, **stamps, "_ng_reverify": provenance}
    elif isinstance(outcome, Failed):
        kind, row = "failure", _failure_row(stamps, outcome, answer, provenance)
    else:
        kind, row = "omission", {**stamps, "_ng_omitted": True, "_ng_reverify": provenance}
    journal.save(decision.index, decision.source_attempt, kind, row)
    return kind, row


def unanswered(outcome: Outcome) -> bool:
    """A re-grade the judge never answered: a failure gymslurm itself recorded (a transport or HTTP
    error, ``source: collector``) that is not terminal. A failure the server answered is an outcome."""
    if not isinstance(outcome, Failed):
        return False
    return outcome.record.source == "collector" and not outcome.record.failure.terminal


class ReverifyJournal:
    """``<output stem>_reverify_progress.jsonl``: each re-grade, saved as it is made (resumable reverify).

    A judge call is the costly part of a reverification, so an interrupted one keeps what it graded:
    the same command again reuses each journaled re-grade of the same source run (same rollout, same
    source execution) instead of calling the judge again, and the journal is removed once the output
    is published. A journal of another source run is refused (it belongs to another reverification).
    """

    def __init__(self, output: Path, run_id: str) -> None:
        self.path = companion_path(output.resolve(), "_reverify_progress.jsonl")
        self.run_id = run_id
        self.done: dict[tuple[int, int | None], tuple[str, dict[str, Any]]] = {}
        for _, entry in iter_records(self.path):
            if entry.get("source_run_id") != run_id:
                raise ConfigError(
                    f"{self.path} holds the progress of a reverification of another run "
                    f"({entry.get('source_run_id')!r}, not {run_id}); remove it or choose another output"
                )
            self.done[(entry["index"], entry["source_attempt"])] = (entry["kind"], entry["row"])
        self.resumed = len(self.done)
        repair_torn_tail(self.path)  # a re-grade cut by the interruption is graded again
        _make_parent(output)
        self._appender = Appender(self.path, 0)  # (line numbers are not used here)

    def save(self, index: int, source_attempt: int | None, kind: str, row: dict[str, Any]) -> None:
        """Journal one re-grade; it reaches the kernel before the next judge call."""
        entry = {"source_run_id": self.run_id, "index": index, "source_attempt": source_attempt, "kind": kind}
        self._appender.append({**entry, "row": row})

    def close(self) -> None:
        """Stop journaling and keep the journal: the same command later reuses it."""
        self._appender.close()

    def finish(self) -> None:
        self._appender.close()
        self.path.unlink(missing_ok=True)


def _lines_of(path: Path, wanted: Container[int | None]) -> Iterable[bytes]:
    """The raw bytes of the wanted (0-based) complete lines of ``path``, in file order."""
    return (raw for line, raw in iter_complete_lines(path) if line in wanted)


def _publish(output: Path, rows: Iterable[bytes], failures: Sequence[bytes]) -> None:
    """Publish the output and, when there are failures, its sidecar beside the resolved output."""
    publish_stream(output, rows, follow_link=True)  # the output path keeps its symlink (spec 000)
    if failures:
        publish_stream(companion_path(output.resolve(), "_failures.jsonl"), failures)


def _make_parent(output: Path) -> None:
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"cannot create the folder of {output}: {error.strerror}; pick a writable output path"
        ) from None


def _chain(first: Iterable[bytes], second: Iterable[bytes]) -> Iterable[bytes]:
    yield from first
    yield from second


def _failure_row(
    stamps: Mapping[str, Any], failed: Failed, answer: object, provenance: Mapping[str, Any]
) -> dict[str, Any]:
    """A sidecar failure row (docs/formats.md) keeping the saved answer, so it can be re-judged again."""
    record = failed.record
    row = {
        **stamps,
        "_ng_failure_record": record.model_dump(mode="json", exclude_none=True),
        "_ng_failure_class": record.routing_class,
        "_ng_failure_terminal": record.failure.terminal,
        "_ng_failure_message": record.failure.failure_reason,
    }
    if failed.legacy_class and failed.legacy_class != record.routing_class:
        row["_ng_failure_legacy_class"] = failed.legacy_class
    row["_ng_failure_response"] = answer
    if failed.diagnostics:
        row["_ng_failure_diagnostics"] = dict(failed.diagnostics)
    row["_ng_reverify"] = dict(provenance)
    return row


def _judge_answers(sidecar: LineIndex | None, groups: Iterable[Sequence[SavedOutcome]]) -> dict[int, Any]:
    """Sidecar line → saved answer, for judge failures whose row kept a model answer."""
    if sidecar is None:
        return {}
    lines = {o.line for group in groups for o in group if is_judge_failure(o) and o.line < sidecar.lines}
    answers: dict[int, Any] = {}
    for line, row in read_lines(sidecar, lines):
        answer = row.get("_ng_failure_response")
        if has_saved_generation(answer):
            answers[line] = answer
    return answers


def _tally(
    report: ReverifyReport,
    decision: Decision,
    outcomes: Sequence[SavedOutcome],
    answers: Mapping[int, Any],
    rollout_id: str,
) -> None:
    judge = [o for o in outcomes if is_judge_failure(o)]
    report.judge_failures_seen += bool(judge)
    report.without_answer += sum(o.line not in answers for o in judge)
    if decision.action == "carry":
        report.carried += 1
    elif decision.action == "rejudge":
        report.rejudged += 1
    else:
        report.skipped += 1
        if decision.warning:
            report.stopped += 1
            report.warnings.append(f"rollout {rollout_id!r}: {decision.warning}")
