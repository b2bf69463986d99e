"""The coverage inventory of a run and the completion exit code. Pure.

Coverage counts the *selected* state of each logical rollout once (selection.py), so that

    successful = measured + masked + unscored
    expected   = measured + masked + unscored + failed + intentionally_omitted + not_started + missing

hold by construction. ``scored`` (completed results with a numeric reward, masked included) is
separate from that split. The exit code is one pure function of the coverage, whether work is
retryable, and whether this invocation made progress (spec 000, "exit codes"; README reading 6):

==========================================================  ====
situation                                                   code
==========================================================  ====
every expected rollout has a completed result               0
``require_complete`` is off (partial results are accepted)  0
only omissions are missing, at least one completed          0 (warning)
every rollout omitted (nothing completed)                   76
work is retryable and this invocation made progress         75
work is retryable, no progress                              1
only terminal failures / exhausted budgets remain           76
==========================================================  ====
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from gymslurm.exitcodes import ExitCode
from gymslurm.formats import version_of
from gymslurm.records import ROUTING_CLASS_UNSPECIFIED
from gymslurm.selection import SUCCESSFUL, BudgetPolicy, Disposition, RolloutState

COVERAGE_FORMAT_VERSION = version_of("coverage")


class Coverage(BaseModel):
    """``<stem>_coverage.json``: the exact inventory of a run's selected outcomes (docs/formats.md)."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = COVERAGE_FORMAT_VERSION
    run_id: str
    expected: int
    successful: int
    measured: int
    masked: int
    unscored: int
    failed: int
    intentionally_omitted: int
    not_started: int
    missing: int
    complete: bool
    reconciled: bool
    scored: int
    attempts: int
    counted_failures: int
    failure_budget_exhausted: int
    max_rollout_attempts: int
    retry_terminal_timeouts: bool
    retryable: int
    progress_outcomes_recorded: int
    failed_by_class: dict[str, int]
    historical_failed_attempts: int
    selection_policy: str = "latest_allocated"
    identity_verified: bool
    written_at: str


def failure_class(state: RolloutState) -> str:
    """The routing class of a selected failure: its recorded class, else kind, else the generic label."""
    selected = state.selected
    if selected is None:
        return ROUTING_CLASS_UNSPECIFIED
    return selected.failure_class or selected.failure_kind or ROUTING_CLASS_UNSPECIFIED


def compute_coverage(
    states: Iterable[RolloutState],
    *,
    run_id: str,
    attempts: int,
    policy: BudgetPolicy,
    identity_verified: bool,
    historical_failed_attempts: int,
    progress_outcomes_recorded: int,
    written_at: str,
) -> Coverage:
    """Count each rollout's selected state once into the inventory of docs/formats.md."""
    dispositions: Counter[Disposition] = Counter()
    by_class: Counter[str] = Counter()
    scored = counted = exhausted = retryable = 0
    for state in states:
        dispositions[state.disposition] += 1
        if state.disposition is Disposition.FAILED:
            by_class[failure_class(state)] += 1
        if (
            state.disposition in SUCCESSFUL
            and state.selected is not None
            and state.selected.reward is not None
        ):
            scored += 1
        counted += state.counted_failures
        exhausted += state.exhausted
        retryable += state.pending
    successful = sum(dispositions[d] for d in SUCCESSFUL)
    expected = sum(dispositions.values())
    return Coverage(
        run_id=run_id,
        expected=expected,
        successful=successful,
        measured=dispositions[Disposition.MEASURED],
        masked=dispositions[Disposition.MASKED],
        unscored=dispositions[Disposition.UNSCORED],
        failed=dispositions[Disposition.FAILED],
        intentionally_omitted=dispositions[Disposition.OMITTED],
        not_started=dispositions[Disposition.NOT_STARTED],
        missing=dispositions[Disposition.MISSING],
        complete=successful == expected,
        reconciled=dispositions[Disposition.MISSING] == 0,
        scored=scored,
        attempts=attempts,
        counted_failures=counted,
        failure_budget_exhausted=exhausted,
        max_rollout_attempts=policy.max_rollout_attempts,
        retry_terminal_timeouts=policy.retry_terminal_timeouts,
        retryable=retryable,
        progress_outcomes_recorded=progress_outcomes_recorded,
        failed_by_class=dict(sorted(by_class.items())),
        historical_failed_attempts=historical_failed_attempts,
        identity_verified=identity_verified,
        written_at=written_at,
    )


@dataclass(frozen=True)
class Completion:
    """The exit code a collection ends with, why, and a warning to print (if any)."""

    code: ExitCode
    reason: str
    warning: str | None = None


def omissions_warning(coverage: Coverage) -> str | None:
    """The warning of a run whose only missing rollouts are intentional omissions (some completed)."""
    omitted, successful = coverage.intentionally_omitted, coverage.successful
    if coverage.complete or not omitted or not successful or coverage.expected - successful != omitted:
        return None
    return (
        f"only intentional omissions are missing: {successful} completed, "
        f"{coverage.expected} expected, {omitted} omitted"
    )


def completion_exit_code(
    coverage: Coverage, *, retryable: bool, made_progress: bool, require_complete: bool
) -> Completion:
    """Map coverage, retryability and progress to 0 / 1 / 75 / 76 (table in the module docstring).

    ``retryable`` (whether another attempt can help) and ``made_progress`` (whether this invocation
    saved outcomes that establish progress) are explicit: cached outcomes alone are not progress.
    """
    if coverage.complete:
        return Completion(ExitCode.DONE, "complete")
    counts = f"{coverage.successful} of {coverage.expected} completed"
    if not require_complete:
        return Completion(ExitCode.DONE, f"partial results accepted ({counts}; require_complete is off)")
    omitted = coverage.intentionally_omitted
    if omitted and coverage.expected - coverage.successful == omitted:
        if coverage.successful == 0:
            return Completion(
                ExitCode.STOP, f"every one of {coverage.expected} rollouts was intentionally omitted"
            )
        return Completion(ExitCode.DONE, "complete except intentional omissions", omissions_warning(coverage))
    if retryable:
        if made_progress:
            return Completion(ExitCode.CONTINUE, f"incomplete, progress made ({counts}); resume to continue")
        return Completion(ExitCode.RETRY, f"incomplete and no progress this time ({counts})")
    return Completion(
        ExitCode.STOP,
        f"incomplete: only terminal failures or exhausted budgets remain ({counts}, "
        f"{coverage.failed} failed, {coverage.failure_budget_exhausted} out of budget)",
    )
