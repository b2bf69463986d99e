"""Health checks: failure rate and completeness over a run or a merged file, with a report on disk.

Two callers share one code path (spec 000, "health"): the collector at the end of collection, inside
its run lock and after identity validation (:func:`after_collection`), and ``gymslurm health``
standalone (:func:`run_health_check`). For a run with a manifest, accounting uses the selected
history (``latest_allocated``, the store's reconciliation), so:

- failure rate = final failures / (completed + final failures); a failure is *final* when it is
  terminal or its budget is exhausted (exhausted failures count as final), a retryable failure still
  within budget is not yet an outcome, and intentional omissions are in neither count (an omission
  never trips the limit);
- completeness = completed / (expected − omitted).

A checked file must hold selected attempts only. When the results file holds a superseded result
(an older attempt of a rollout whose newest execution is another), the check is *skipped* with a
message — old attempts are never counted as extra samples. Superseded failures in the separate
sidecar do not matter. Standalone, the message explains how to export a selected projection with
``gymslurm aggregate`` and check that instead.

Stale offsets (the review case of spec 002): files are read through the store's verified line index
(``store/lines.py``), so a file replaced between the index and a read is an error, never counted.

Trade-off: standalone, the run case reads the run twice (the index pass without parsing, then the
store's reconciliation); the index pass is a plain line scan. The automatic check is given the
collector's final states (:class:`SelectedRun`, :func:`check_selected`) and keeps only the line scans
(result rows for the skip, sidecar offsets for examples): reconciling again would repeat ~0.3-0.4 s
of a 100k-rollout resume for the same answer. The equality of both reports is tested.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gymslurm.clock import utc_now
from gymslurm.errors import GymslurmError
from gymslurm.formats import version_of
from gymslurm.redaction import redact_text
from gymslurm.selection import SUCCESSFUL, Disposition, RolloutState, SavedOutcome
from gymslurm.settings import max_rollout_attempts
from gymslurm.store.atomic import publish_json
from gymslurm.store.existing import refuse_retired_journal
from gymslurm.store.history import row_outcome, sidecar_outcome
from gymslurm.store.lines import LineIndex, index_file, read_lines, verify_unchanged
from gymslurm.store.paths import RunPaths
from gymslurm.store.store import RunStore

HEALTH_FORMAT_VERSION = version_of("health")
EXAMPLES_PER_CLASS = 3
# The counts of a report, in order (``<stem>_health.json`` "counts").
COUNT_KEYS = (
    "expected",
    "completed",
    "final_failures",
    "retryable_failures",
    "exhausted",
    "omitted",
    "not_started",  # no execution reserved yet
    "missing",  # the newest reserved execution has no outcome (000: as `missing` in coverage)
    "unfinished",  # not_started + missing
)


# --- the report -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthThresholds:
    """The limits a healthy run stays within."""

    max_failure_rate: float = 0.1
    min_completeness: float = 1.0


@dataclass
class HealthReport:
    """``<stem>_health.json``: the status, each check, the counts behind it, and failure examples."""

    target: str
    status: str  # "pass" | "fail" | "skipped"
    checks: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    failure_examples: dict[str, list[str]] = field(default_factory=dict)
    message: str = ""
    run_id: str | None = None

    def to_json(self, written_at: str) -> dict[str, Any]:
        return {
            "format_version": HEALTH_FORMAT_VERSION,
            "target": self.target,
            "run_id": self.run_id,
            "status": self.status,
            "checks": self.checks,
            "counts": self.counts,
            "failure_examples": self.failure_examples,
            "message": self.message,
            "written_at": written_at,
        }


def count_states(states: Iterable[RolloutState]) -> dict[str, int]:
    """Completed, final and pending failures, omissions and gaps, from selected states."""
    counts: Counter[str] = Counter()
    for state in states:
        counts["expected"] += 1
        disposition = state.disposition
        if disposition in SUCCESSFUL:
            counts["completed"] += 1
        elif disposition is Disposition.FAILED:
            counts["final_failures" if not state.pending else "retryable_failures"] += 1
            counts["exhausted"] += state.exhausted
        elif disposition is Disposition.OMITTED:
            counts["omitted"] += 1
        else:
            counts["missing" if disposition is Disposition.MISSING else "not_started"] += 1
            counts["unfinished"] += 1
    return {key: counts[key] for key in COUNT_KEYS}


def evaluate(counts: dict[str, int], thresholds: HealthThresholds) -> list[dict[str, Any]]:
    """The failure-rate and completeness checks over counts (omissions excluded from both)."""
    finished = counts["completed"] + counts["final_failures"]
    rate = counts["final_failures"] / finished if finished else 0.0
    countable = counts["expected"] - counts["omitted"]
    completeness = counts["completed"] / countable if countable else 1.0
    return [
        {
            "name": "failure_rate",
            "value": rate,
            "limit": thresholds.max_failure_rate,
            "passed": rate <= thresholds.max_failure_rate,
            "detail": f"{counts['final_failures']} final failures of {finished} finished rollouts "
            f"(omissions and retryable failures excluded)",
        },
        {
            "name": "completeness",
            "value": completeness,
            "limit": thresholds.min_completeness,
            "passed": completeness >= thresholds.min_completeness,
            "detail": f"{counts['completed']} completed of {countable} expected (omissions excluded)",
        },
    ]


def report_from(
    target: Path, counts: dict[str, int], thresholds: HealthThresholds, run_id: str | None
) -> HealthReport:
    checks = evaluate(counts, thresholds)
    status = "pass" if all(check["passed"] for check in checks) else "fail"
    return HealthReport(str(target), status, checks, counts, run_id=run_id)


def skipped(target: Path, *, standalone: bool, why: str) -> HealthReport:
    """The report of a check that cannot count a file holding superseded outcomes."""
    message = f"health check skipped for {target}: {why}; old attempts are never counted as extra samples"
    if standalone:
        message += (
            ". Export a selected-result projection and check that instead: gymslurm aggregate "
            f"{target} +output_jsonl_fpath=<new>.jsonl, then gymslurm health <new>.jsonl"
        )
    return HealthReport(str(target), "skipped", message=message)


# --- checking a run or a file ---------------------------------------------------------------------


def run_health_check(
    output: Path, *, thresholds: HealthThresholds | None = None, standalone: bool = True
) -> HealthReport:
    """Check a manifest-backed run (its selected history) or a merged/legacy rollout file."""
    paths = RunPaths.for_output(output)
    limits = thresholds or HealthThresholds()
    _require_results(paths, output)
    refuse_retired_journal(paths.attempts_journal)
    if paths.manifest.exists():
        return _check_run(paths, limits, standalone)
    return _check_file(paths, limits, standalone)


def _require_results(paths: RunPaths, output: Path) -> None:
    if not paths.results.exists():
        raise GymslurmError(f"{output} does not exist; pass a run's output or a merged file")


def _check_run(paths: RunPaths, thresholds: HealthThresholds, standalone: bool) -> HealthReport:
    results = index_file(paths.results)
    failures = index_file(paths.failures)
    store = RunStore.open(paths, writable=False, adopt_attempts=max_rollout_attempts())
    try:
        rec = store.reconcile()
    finally:
        store.close()
    selected = SelectedRun(rec.states, store.run_id)
    return _check_selected(paths, selected, results, failures, thresholds, standalone)


@dataclass(frozen=True)
class SelectedRun:
    """A run's selected history already in memory: one state per rollout index, and the run id.

    The collector holds exactly this at the end of collection (its reconciliation, advanced by the
    outcomes it saved with the same selection rules), so the automatic check need not reconcile again.
    """

    states: Sequence[RolloutState]
    run_id: str


def check_selected(
    paths: RunPaths,
    selected: SelectedRun,
    *,
    thresholds: HealthThresholds | None = None,
    standalone: bool = False,
) -> HealthReport:
    """The report :func:`run_health_check` gives for a manifest-backed run, from states in memory.

    Only the plain line scans remain (result rows, for the superseded-outcome skip; the sidecar's
    offsets, for failure examples); nothing is parsed except the few example rows.
    """
    _require_results(paths, paths.output)
    results = index_file(paths.results)
    failures = index_file(paths.failures)
    return _check_selected(paths, selected, results, failures, thresholds or HealthThresholds(), standalone)


def _check_selected(  # noqa: PLR0917
    paths: RunPaths,
    selected: SelectedRun,
    results: LineIndex | None,
    failures: LineIndex | None,
    thresholds: HealthThresholds,
    standalone: bool,
) -> HealthReport:
    """Skipped when result rows outnumber selected results, else counted states (both callers)."""
    states = selected.states
    selected_results = sum(1 for s in states if s.disposition in SUCCESSFUL and s.selected)
    result_rows = results.lines - results.blank if results else 0
    if result_rows > selected_results:
        why = f"{result_rows - selected_results} rows of {paths.results} are superseded attempts"
        return skipped(paths.results, standalone=standalone, why=why)
    verify_unchanged(results, failures)
    report = report_from(paths.results, count_states(states), thresholds, selected.run_id)
    if failures is not None:
        report.failure_examples = failure_examples(failures, states)
    return report


def failure_examples(index: LineIndex, states: Sequence[RolloutState]) -> dict[str, list[str]]:
    """A few failure messages per class, read from the sidecar through its verified index."""
    wanted: dict[int, str] = {}
    per_class: Counter[str] = Counter()
    for state in states:
        selected = state.selected
        if state.disposition is Disposition.FAILED and selected is not None:
            name = selected.failure_class or selected.failure_kind or "environment_server_failed"
            if per_class[name] < EXAMPLES_PER_CLASS and selected.line < index.lines:
                per_class[name] += 1
                wanted[selected.line] = name
    examples: dict[str, list[str]] = {}
    for line, row in read_lines(index, wanted):
        message = redact_text(str(row.get("_ng_failure_message", "")))  # a sidecar of an older collector
        examples.setdefault(wanted[line], []).append(message[:300])
    return examples


@dataclass(frozen=True)
class _Outcome:
    """One row of a manifest-less file, as selection across its two files needs it."""

    attempt: int | None  # None when the row has no integer ``_ng_attempt`` (legacy)
    saved: SavedOutcome  # the row as the store reads it (store/history.row_outcome)
    sidecar: bool = False

    @property
    def kind(self) -> str:
        """The count the outcome falls in: completed, final_failures or omitted."""
        return _COUNTED[self.saved.kind]


_COUNTED = {"result": "completed", "failure": "final_failures", "omission": "omitted"}


def _attempt(row: dict[str, Any]) -> int | None:
    attempt = row.get("_ng_attempt")
    return attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None


def _supersedes(newer: _Outcome, older: _Outcome) -> bool:
    """A sidecar outcome replaces another only when both attempts are known and it is newer."""
    return newer.attempt is not None and older.attempt is not None and newer.attempt > older.attempt


def _main_outcomes(index: LineIndex) -> tuple[dict[tuple[Any, ...], _Outcome], int]:
    """Each results-file row as one rollout, keyed by (run id, rollout id); and how many repeat one."""
    outcomes: dict[tuple[Any, ...], _Outcome] = {}
    duplicates = 0
    for line, row in read_lines(index, range(index.lines)):
        rollout = row.get("_ng_rollout_id")
        key = (row.get("_ng_run_id"), rollout, None if rollout else line)
        duplicates += key in outcomes
        attempt = _attempt(row)
        outcomes[key] = _Outcome(attempt, row_outcome(row, attempt or 0, line))
    return outcomes, duplicates


def _sidecar_outcomes(index: LineIndex) -> dict[tuple[Any, ...], _Outcome]:
    """The newest sidecar outcome per (run id, rollout id); rows without a rollout id are unmatched."""
    newest: dict[tuple[Any, ...], _Outcome] = {}
    for line, row in read_lines(index, range(index.lines)):
        rollout = row.get("_ng_rollout_id")
        if not rollout:
            continue
        attempt = _attempt(row)
        outcome = _Outcome(attempt, sidecar_outcome(row, attempt or 0, line), sidecar=True)
        key = (row.get("_ng_run_id"), rollout, None)
        current = newest.get(key)
        if current is None or _supersedes(outcome, current):
            newest[key] = outcome
    return newest


def _check_file(paths: RunPaths, thresholds: HealthThresholds, standalone: bool) -> HealthReport:
    """A merged projection, a reverify output or a legacy file: one selected outcome per rollout.

    Every results row is one rollout (a repeated rollout is a superseded outcome: skipped). A rollout
    seen only in the failure sidecar is expected too: its newest sidecar row is its outcome (a final
    failure, or an omission). A sidecar row older than the rollout's result is a superseded failure and
    does not count; a result older than a sidecar row is a superseded result: skipped.
    """
    results = index_file(paths.results)
    assert results is not None
    selected, duplicates = _main_outcomes(results)
    if duplicates:
        why = f"{duplicates} rows repeat a rollout already in the file (superseded outcomes)"
        return skipped(paths.results, standalone=standalone, why=why)
    sidecar = index_file(paths.failures)
    superseded = 0
    for key, outcome in (_sidecar_outcomes(sidecar) if sidecar else {}).items():
        current = selected.get(key)
        if current is None or _supersedes(outcome, current):
            superseded += current is not None
            selected[key] = outcome
    if superseded:
        why = f"{superseded} rows of {paths.results} are superseded by newer failures in {paths.failures}"
        return skipped(paths.results, standalone=standalone, why=why)
    tally = Counter(outcome.kind for outcome in selected.values())
    tally["expected"] = len(selected)
    counts = {key: tally[key] for key in COUNT_KEYS}
    report = report_from(paths.results, counts, thresholds, None)
    if sidecar is not None:
        failed = [o.saved.line for o in selected.values() if o.sidecar and o.kind == "final_failures"]
        report.failure_examples = _sidecar_examples(sidecar, failed)
    return report


def _sidecar_examples(index: LineIndex, lines: Iterable[int]) -> dict[str, list[str]]:
    """A few failure messages per routing class from the given sidecar lines."""
    examples: dict[str, list[str]] = {}
    for _, row in read_lines(index, lines):
        routing = row.get("_ng_failure_class")
        messages = examples.setdefault(
            routing if isinstance(routing, str) else "environment_server_failed", []
        )
        if len(messages) < EXAMPLES_PER_CLASS:
            messages.append(redact_text(str(row.get("_ng_failure_message", "")))[:300])
    return examples


def write_report(output: Path, report: HealthReport, written_at: str) -> Path:
    """Publish ``<stem>_health.json`` beside the (resolved) output."""
    target = RunPaths.for_output(output).health
    publish_json(target, report.to_json(written_at))
    return target


def after_collection(
    paths: RunPaths, *, stderr: IO[str] = sys.stderr, selected: SelectedRun | None = None
) -> HealthReport:
    """The automatic check at the end of collection (inside the run lock, after identity validation).

    With ``selected`` (the collector's final states) the run is not reconciled again
    (:func:`check_selected`); without it the run is read from disk as ``gymslurm health`` does. The
    report is the same either way. Never raises for an unhealthy or skipped run: collection and
    scoring still finish. A skip removes the previous report, which no longer describes the run.
    """
    try:
        if selected is None:
            report = run_health_check(paths.output, standalone=False)
        else:
            report = check_selected(paths, selected)
    except GymslurmError as error:
        print(f"gymslurm collect: health check not completed: {error}", file=stderr)
        return HealthReport(str(paths.output), "skipped", message=str(error))
    if report.status == "skipped":
        print(f"gymslurm collect: {report.message}", file=stderr)
        paths.health.unlink(missing_ok=True)
        return report
    write_report(paths.output, report, utc_now())
    if report.status == "fail":
        failed = ", ".join(
            f"{c['name']} {c['value']:.3f} (limit {c['limit']})" for c in report.checks if not c["passed"]
        )
        print(f"gymslurm collect: health check failed: {failed}; see {paths.health}", file=stderr)
    return report
