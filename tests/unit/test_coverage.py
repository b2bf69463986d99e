"""Coverage formulas and the completion exit code: one spec sentence a row, plus property tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gymslurm.coverage import Coverage, completion_exit_code, compute_coverage
from gymslurm.selection import BudgetPolicy, SavedOutcome, history_problem, select_rollout

POLICY = BudgetPolicy(max_rollout_attempts=3)


def coverage_of(**counts: int) -> Coverage:
    """A coverage snapshot from disposition counts (the formulas fill in the rest)."""
    fields = dict.fromkeys(
        ["measured", "masked", "unscored", "failed", "intentionally_omitted", "not_started", "missing"], 0
    )
    fields.update(counts)
    successful = fields["measured"] + fields["masked"] + fields["unscored"]
    expected = sum(fields.values())
    return Coverage(
        run_id="run-x",
        expected=expected,
        successful=successful,
        complete=successful == expected,
        reconciled=fields["missing"] == 0,
        scored=fields["measured"],
        attempts=expected,
        counted_failures=0,
        failure_budget_exhausted=0,
        max_rollout_attempts=3,
        retry_terminal_timeouts=False,
        retryable=0,
        progress_outcomes_recorded=0,
        failed_by_class={},
        historical_failed_attempts=0,
        identity_verified=True,
        written_at="t",
        **fields,
    )


EXIT_CASES = [
    # (id, coverage, retryable, made_progress, require_complete, code)
    ("complete exits 0", coverage_of(measured=3), False, False, True, 0),
    ("a fully masked run is complete", coverage_of(masked=2), False, False, True, 0),
    ("an empty run is complete", coverage_of(), False, False, True, 0),
    ("incomplete, retryable, progress → 75", coverage_of(measured=2, missing=1), True, True, True, 75),
    ("incomplete, retryable, no progress → 1", coverage_of(measured=2, failed=1), True, False, True, 1),
    ("a dispatch budget that drained every task → 1", coverage_of(not_started=3), True, False, True, 1),
    (
        "only terminal failures or exhausted budgets → 76",
        coverage_of(measured=2, failed=1),
        False,
        True,
        True,
        76,
    ),
    ("every task omitted → 76", coverage_of(intentionally_omitted=3), False, True, True, 76),
    ("only omissions missing → 0", coverage_of(measured=2, intentionally_omitted=1), False, True, True, 0),
    (
        "omissions do not hide other failures",
        coverage_of(measured=1, intentionally_omitted=1, failed=1),
        False,
        True,
        True,
        76,
    ),
    (
        "omissions do not hide retryable work",
        coverage_of(measured=1, intentionally_omitted=1, missing=1),
        True,
        True,
        True,
        75,
    ),
    (
        "without require_complete a partial run exits 0",
        coverage_of(measured=1, failed=2),
        False,
        False,
        False,
        0,
    ),
    (
        "without require_complete an interrupted run exits 0",
        coverage_of(measured=1, missing=2),
        True,
        True,
        False,
        0,
    ),
]


@pytest.mark.parametrize(
    ("coverage", "retryable", "made_progress", "require_complete", "code"),
    [c[1:] for c in EXIT_CASES],
    ids=[c[0] for c in EXIT_CASES],
)
def test_completion_exit_code(coverage, retryable, made_progress, require_complete, code):
    """Each row is one case of the spec's exit-code table."""
    completion = completion_exit_code(
        coverage, retryable=retryable, made_progress=made_progress, require_complete=require_complete
    )
    assert completion.code == code


def test_only_omissions_missing_warns_with_counts():
    """The warning names the completed, expected and omitted counts while complete stays false."""
    coverage = coverage_of(measured=2, intentionally_omitted=1)
    completion = completion_exit_code(coverage, retryable=False, made_progress=False, require_complete=True)
    assert completion.warning == "only intentional omissions are missing: 2 completed, 3 expected, 1 omitted"
    assert coverage.complete is False


def _states(histories, policy=POLICY):
    return [select_rollout(reserved, outcomes, policy) for reserved, outcomes in histories]


def _coverage(histories, policy=POLICY):
    return compute_coverage(
        _states(histories, policy),
        run_id="run-x",
        attempts=sum(r for r, _ in histories),
        policy=policy,
        identity_verified=True,
        historical_failed_attempts=0,
        progress_outcomes_recorded=0,
        written_at="t",
    )


def test_scored_counts_masked_results_with_a_reward_but_not_unscored():
    """scored counts completed results carrying a numeric reward; unscored completions do not enter it."""
    coverage = _coverage(
        [
            (1, [SavedOutcome(0, "result", 0, reward=1.0)]),
            (1, [SavedOutcome(0, "result", 1, reward=0.0, masked=True)]),
            (1, [SavedOutcome(0, "result", 2, reward=None)]),
        ]
    )
    assert (coverage.scored, coverage.measured, coverage.masked, coverage.unscored) == (2, 1, 1, 1)


def test_failed_by_class_counts_selected_failures_only():
    """Superseded failures and omissions do not enter coverage/failed/<class>."""
    old = SavedOutcome(
        0, "failure", 0, delivery="delivered", failure_kind="session_lost", failure_class="session_lost"
    )
    new = SavedOutcome(
        1, "failure", 1, terminal=True, delivery="delivered", failure_class="environment_server_failed"
    )
    coverage = _coverage([(2, [old, new]), (1, [SavedOutcome(0, "omission", 2)])])
    assert coverage.failed_by_class == {"environment_server_failed": 1}


# --- property tests -----------------------------------------------------------------------------

outcome_fields = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["result", "failure", "omission"]),
        "reward": st.one_of(st.none(), st.floats(0, 1)),
        "masked": st.booleans(),
        "retry_masked": st.booleans(),
        "terminal": st.booleans(),
        "delivery": st.sampled_from(["delivered", "possibly_delivered", "not_sent"]),
        "failure_kind": st.sampled_from([None, "session_lost", "kill_shaped", "agent_timeout"]),
        "stage": st.sampled_from([None, "admission", "agent"]),
    }
)


@st.composite
def rollout_history(draw):
    """Reservations, then outcomes for some of them in any arrival order (late results included)."""
    reserved = draw(st.integers(0, 6))
    attempts = draw(st.lists(st.integers(0, max(reserved - 1, 0)), unique=True)) if reserved else []
    outcomes = [SavedOutcome(attempt, line=i, **draw(outcome_fields)) for i, attempt in enumerate(attempts)]
    return reserved, outcomes


@st.composite
def run_history(draw):
    histories = draw(st.lists(rollout_history(), max_size=30))
    policy = BudgetPolicy(
        max_rollout_attempts=draw(st.integers(1, 4)),
        retry_terminal_timeouts=draw(st.booleans()),
        failure_offset=draw(st.integers(0, 5)),
        result_offset=draw(st.integers(0, 5)),
    )
    return histories, policy


@settings(max_examples=300, deadline=None)
@given(run_history())
def test_inventory_satisfies_the_formulas(history):
    """For any history, successful and expected are the sums of the split and each rollout counts once."""
    histories, policy = history
    assert all(history_problem(r, o) is None for r, o in histories)
    coverage = _coverage(histories, policy)
    assert coverage.successful == coverage.measured + coverage.masked + coverage.unscored
    assert coverage.expected == len(histories)
    assert coverage.expected == (
        coverage.successful
        + coverage.failed
        + coverage.intentionally_omitted
        + coverage.not_started
        + coverage.missing
    )
    assert coverage.scored <= coverage.successful
    assert sum(coverage.failed_by_class.values()) == coverage.failed
    assert coverage.failure_budget_exhausted <= coverage.failed
    assert coverage.complete == (coverage.successful == coverage.expected)


@settings(max_examples=300, deadline=None)
@given(run_history())
def test_selection_depends_only_on_the_newest_execution(history):
    """Adding late outcomes of older executions never changes a rollout's disposition."""
    histories, policy = history
    for reserved, outcomes in histories:
        newest_only = [o for o in outcomes if o.attempt == reserved - 1]
        assert select_rollout(reserved, outcomes, policy).disposition == (
            select_rollout(reserved, newest_only, policy).disposition
        )


@settings(max_examples=200, deadline=None)
@given(run_history())
def test_exit_code_is_always_one_of_the_four(history):
    """The completion function maps every coverage to 0, 1, 75 or 76."""
    histories, policy = history
    coverage = _coverage(histories, policy)
    for progress in (False, True):
        code = completion_exit_code(
            coverage, retryable=coverage.retryable > 0, made_progress=progress, require_complete=True
        ).code
        assert code in {0, 1, 75, 76}
        if (
            coverage.retryable
            and not coverage.complete
            and coverage.successful + coverage.intentionally_omitted < coverage.expected
        ):
            assert code == (75 if progress else 1)
