"""Selection under latest_allocated, the failure budget and pending rollouts: one spec sentence a row."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.selection import (
    BudgetPolicy,
    Disposition,
    SavedOutcome,
    counts_against_budget,
    establishes_progress,
    has_saved_generation,
    history_problem,
    is_retry_masked,
    kept_timeout_answer,
    select_rollout,
    select_rollouts,
)

POLICY = BudgetPolicy(max_rollout_attempts=3)


def result(
    attempt: int,
    reward: float | None = 1.0,
    *,
    masked: bool = False,
    retry_masked: bool = False,
    line: int = 0,
) -> SavedOutcome:
    return SavedOutcome(attempt, "result", line, reward=reward, masked=masked, retry_masked=retry_masked)


def failure(
    attempt: int,
    *,
    terminal: bool = False,
    delivery: str = "delivered",
    kind: str | None = "session_lost",
    stage: str | None = None,
    line: int = 0,
    legacy: str | None = None,
) -> SavedOutcome:
    return SavedOutcome(
        attempt,
        "failure",
        line,
        terminal=terminal,
        delivery=delivery,
        failure_kind=kind,
        stage=stage,
        failure_class=kind,
        legacy_class=legacy,
    )


def omission(attempt: int) -> SavedOutcome:
    return SavedOutcome(attempt, "omission", 0)


SELECTION_CASES = [
    # (id, reserved, outcomes, disposition, pending, exhausted)
    ("no reservation is not_started and pending", 0, [], Disposition.NOT_STARTED, True, False),
    ("newest reservation without outcome is missing and pending", 1, [], Disposition.MISSING, True, False),
    ("a result is selected and final", 1, [result(0)], Disposition.MEASURED, False, False),
    (
        "a zero reward is a measured result, not retried",
        1,
        [result(0, 0.0)],
        Disposition.MEASURED,
        False,
        False,
    ),
    ("a result without numeric reward is unscored", 1, [result(0, None)], Disposition.UNSCORED, False, False),
    (
        "a masked result is masked and final",
        1,
        [result(0, 1.0, masked=True)],
        Disposition.MASKED,
        False,
        False,
    ),
    (
        "an evaluation-side masked result without answer is retried",
        1,
        [result(0, None, masked=True, retry_masked=True)],
        Disposition.MASKED,
        True,
        False,
    ),
    (
        "a newer reservation without outcome hides an older result (last line does not win)",
        2,
        [result(0)],
        Disposition.MISSING,
        True,
        False,
    ),
    (
        "a late result of an older execution never replaces the newer failure",
        2,
        [failure(1), result(0)],
        Disposition.FAILED,
        True,
        False,
    ),
    ("a retryable failure within budget is pending", 1, [failure(0)], Disposition.FAILED, True, False),
    (
        "a terminal failure is final regardless of budget",
        1,
        [failure(0, terminal=True)],
        Disposition.FAILED,
        False,
        False,
    ),
    ("an omission is final", 1, [omission(0)], Disposition.OMITTED, False, False),
    (
        "three counted failures exhaust the default budget",
        3,
        [failure(0), failure(1), failure(2)],
        Disposition.FAILED,
        False,
        True,
    ),
    ("interruptions reserve executions but spend nothing", 4, [failure(3)], Disposition.FAILED, True, False),
    (
        "not_sent failures never exhaust the budget",
        3,
        [failure(i, delivery="not_sent") for i in range(3)],
        Disposition.FAILED,
        True,
        False,
    ),
    (
        "kill_shaped failures never exhaust the budget",
        3,
        [failure(i, kind="kill_shaped") for i in range(3)],
        Disposition.FAILED,
        True,
        False,
    ),
    (
        "admission timeouts never exhaust the budget",
        3,
        [failure(i, stage="admission") for i in range(3)],
        Disposition.FAILED,
        True,
        False,
    ),
]


@pytest.mark.parametrize(
    ("reserved", "outcomes", "disposition", "pending", "exhausted"),
    [case[1:] for case in SELECTION_CASES],
    ids=[case[0] for case in SELECTION_CASES],
)
def test_select_rollout(reserved, outcomes, disposition, pending, exhausted):
    """Each row is one sentence of the selection and budget rules."""
    state = select_rollout(reserved, outcomes, POLICY)
    assert (state.disposition, state.pending, state.exhausted) == (disposition, pending, exhausted)


def test_resubmit_offset_gives_a_fresh_budget():
    """Failures before the resubmit offset no longer count; the history stays selected."""
    history = [failure(i, line=i) for i in range(3)]
    assert select_rollout(3, history, POLICY).exhausted
    state = select_rollout(3, history, BudgetPolicy(3, failure_offset=3))
    assert (state.pending, state.counted_failures) == (True, 0)


def test_resubmit_keeps_terminal_failures_final():
    """A resubmit never reopens a terminal failure."""
    state = select_rollout(1, [failure(0, terminal=True, line=0)], BudgetPolicy(3, failure_offset=1))
    assert not state.pending


def test_result_offset_excludes_old_masked_attempts():
    """Masked infrastructure results before the results offset no longer count."""
    masked = [result(i, None, masked=True, retry_masked=True, line=i) for i in range(3)]
    assert not select_rollout(3, masked, POLICY).pending
    assert select_rollout(3, masked, BudgetPolicy(3, result_offset=3)).pending


@pytest.mark.parametrize("kind", ["agent_timeout", "transport_timeout"])
def test_retry_terminal_timeouts_makes_terminal_timeouts_eligible_and_counted(kind):
    """The opt-in policy retries terminal timeouts, and they spend the budget."""
    terminal_timeout = failure(0, terminal=True, kind=kind)
    assert not select_rollout(1, [terminal_timeout], POLICY).pending
    opted_in = BudgetPolicy(3, retry_terminal_timeouts=True)
    state = select_rollout(1, [terminal_timeout], opted_in)
    assert (state.pending, state.counted_failures) == (True, 1)


def test_legacy_timeout_class_is_a_timeout():
    """The legacy timeout_exceeded routing class is a timeout for the opt-in policy."""
    row = failure(0, terminal=True, kind=None, legacy="timeout_exceeded")
    assert select_rollout(1, [row], BudgetPolicy(3, retry_terminal_timeouts=True)).pending


def test_terminal_non_timeout_stays_final_under_timeout_policy():
    """retry_terminal_timeouts does not reopen other terminal failures."""
    row = failure(0, terminal=True, kind="agent_command_not_allowed")
    assert not select_rollout(1, [row], BudgetPolicy(3, retry_terminal_timeouts=True)).pending


BUDGET_CASES = [
    ("delivered non-terminal failure counts", failure(0), True),
    ("possibly delivered failure counts", failure(0, delivery="possibly_delivered"), True),
    ("not_sent failure does not count", failure(0, delivery="not_sent"), False),
    ("terminal failure does not count", failure(0, terminal=True), False),
    ("kill_shaped does not count", failure(0, kind="kill_shaped"), False),
    ("legacy kill_shaped class does not count", failure(0, kind=None, legacy="kill_shaped"), False),
    ("admission timeout does not count", failure(0, stage="admission"), False),
    ("a failure without kind still counts", failure(0, kind=None), True),
    ("a result does not count", result(0), False),
    (
        "a masked infrastructure result counts one attempt",
        result(0, None, masked=True, retry_masked=True),
        True,
    ),
    ("an omission does not count", omission(0), False),
]


@pytest.mark.parametrize(
    ("outcome", "counts"), [c[1:] for c in BUDGET_CASES], ids=[c[0] for c in BUDGET_CASES]
)
def test_counts_against_budget(outcome, counts):
    """Only recorded, non-terminal, delivered or possibly delivered failures spend the budget."""
    assert counts_against_budget(outcome, POLICY) is counts


PROGRESS_CASES = [
    ("a saved success is progress", result(0), True),
    ("an omission is progress", omission(0), True),
    ("a terminal failure is progress", failure(0, terminal=True), True),
    ("a counted failure is progress", failure(0), True),
    ("an admission timeout is not progress", failure(0, stage="admission"), False),
    ("a non-terminal kill_shaped reply is not progress", failure(0, kind="kill_shaped"), False),
    ("a failure known not to be sent is not progress", failure(0, delivery="not_sent"), False),
]


@pytest.mark.parametrize(
    ("outcome", "progress"), [c[1:] for c in PROGRESS_CASES], ids=[c[0] for c in PROGRESS_CASES]
)
def test_establishes_progress(outcome, progress):
    """Progress (for exit 75) comes only from outcomes that change what is left to do."""
    assert establishes_progress(outcome, POLICY) is progress


def test_progress_ignores_the_resubmit_offset():
    """A newly saved counted failure is progress even though offsets are about old lines."""
    assert establishes_progress(failure(0, line=0), BudgetPolicy(3, failure_offset=10))


def test_history_problem_flags_unreserved_execution():
    """An outcome for an execution that was never reserved is a conflicting record."""
    assert "never reserved" in (history_problem(1, [result(1)]) or "")


def test_history_problem_flags_two_outcomes_for_one_execution():
    """A result and a failure for the same execution conflict."""
    assert "two outcomes" in (history_problem(1, [result(0), failure(0)]) or "")


def test_history_problem_accepts_a_clean_history():
    """Late results of older executions are not conflicts."""
    assert history_problem(3, [failure(2), result(0)]) is None


RETRY_MASKED_CASES = [
    ("evaluation-side kind, no answer", {"mask_sample": True, "failure_kind": "session_lost"}, True),
    (
        "kept answer is never sampled again",
        {"mask_sample": True, "failure_kind": "session_lost", "response": {"output": [{"type": "message"}]}},
        False,
    ),
    ("model-side kind is a result", {"mask_sample": True, "failure_kind": "agent_run_error"}, False),
    ("judge kind is regraded, not regenerated", {"mask_sample": True, "failure_kind": "judge_failed"}, False),
    ("no kind is a result", {"mask_sample": True}, False),
    ("verifier could not run, no answer", {"mask_sample": True, "failure_kind": "verifier_error"}, True),
    ("namespaced kind is a result", {"mask_sample": True, "failure_kind": "env:session_lost"}, False),
    ("unmasked row with a kind is a result", {"failure_kind": "session_lost", "reward": 0.5}, False),
    (
        "an empty response placeholder is no answer",
        {"mask_sample": True, "failure_kind": "provider_unavailable", "response": {}},
        True,
    ),
    (
        "agent-stage OOM is model-side (001)",
        {"mask_sample": True, "failure_kind": "provider_oom_killed", "stage": "agent"},
        False,
    ),
    (
        "seed-stage OOM is evaluation-side",
        {"mask_sample": True, "failure_kind": "provider_oom_killed", "stage": "seed"},
        True,
    ),
    ("OOM, no stage: evaluation-side", {"mask_sample": True, "failure_kind": "provider_oom_killed"}, True),
    (
        "transport kind of a graded result is its verify call: regraded, kept (001)",
        {"mask_sample": True, "failure_kind": "transport_timeout"},
        False,
    ),
    ("masked peer drop is kept too", {"mask_sample": True, "failure_kind": "transport_peer_drop"}, False),
]


@pytest.mark.parametrize(
    ("row", "retried"), [c[1:] for c in RETRY_MASKED_CASES], ids=[c[0] for c in RETRY_MASKED_CASES]
)
def test_is_retry_masked(row, retried):
    """Only masked results left unmeasured by infrastructure, with no saved answer, are retried."""
    assert is_retry_masked(row) is retried


def test_finished_response_with_empty_output_is_a_generation():
    """A response with a status was finished by a producer even with no assistant text."""
    assert has_saved_generation({"output": [], "status": "completed"})


def kept_timeout(attempt: int, *, terminal: bool = False) -> SavedOutcome:
    """A non-terminal agent_timeout failure that kept the model's answer."""
    return SavedOutcome(
        attempt,
        "failure",
        0,
        terminal=terminal,
        delivery="delivered",
        failure_kind="agent_timeout",
        kept_answer=True,
    )


@pytest.mark.parametrize(
    "policy", [POLICY, BudgetPolicy(max_rollout_attempts=3, retry_terminal_timeouts=True)]
)
def test_agent_timeout_that_kept_its_answer_is_final(policy: BudgetPolicy) -> None:
    """001: an agent timeout that kept its answer is the model's final result, never run again (even
    under the terminal-timeout opt-in), spends no budget and is progress."""
    state = select_rollout(1, [kept_timeout(0)], policy)
    assert (state.disposition, state.pending, state.exhausted) == (Disposition.FAILED, False, False)
    assert not counts_against_budget(kept_timeout(0), policy)
    assert establishes_progress(kept_timeout(0), policy)


@pytest.mark.parametrize(
    ("names", "response", "kept"),
    [
        (("agent_timeout", "agent_timeout", None), {"output": [{"type": "message"}]}, True),
        ((None, "timeout_exceeded", None), {"output": [{"type": "message"}]}, True),
        ((None, "environment_server_failed", "timeout_exceeded"), {"output": [{"type": "message"}]}, True),
        ((None, "environment_server_failed", "timeout_exceeded"), "the answer", False),  # text: no response
        (("agent_timeout", "agent_timeout", None), None, False),
        (("agent_timeout", "agent_timeout", None), {}, False),
        (("agent_timeout", "agent_timeout", None), {"error": "x"}, False),
        (("session_lost", "session_lost", None), {"output": [{"type": "message"}]}, False),
    ],
)
def test_kept_timeout_answer(names: tuple, response: object, kept: bool) -> None:
    """Only an agent timeout (either name) with a real answer (not a placeholder) kept its answer."""
    assert kept_timeout_answer(names, response) is kept


# --- the one loop: select_rollouts (the store's reconcile, aggregation and health select with it) ---

GROUPS: list[tuple[int, object]] = [
    (0, None),  # not started
    (2, None),  # reserved, nothing saved: missing
    (1, result(0)),  # the fast case: one final result at the newest execution
    (1, result(0, None)),  # fast, unscored
    (1, result(0, 0.0, masked=True)),  # fast, masked
    (1, result(0, None, masked=True, retry_masked=True)),  # retry-masked: the rules, pending
    (2, result(0)),  # an older result, the newest execution unfinished: missing
    (2, [failure(0), result(1)]),
    (3, [failure(0), failure(1), failure(2)]),  # budget spent: exhausted
    (1, failure(0, terminal=True)),
    (1, SavedOutcome(0, "omission", 0)),
]


def test_select_rollouts_equals_select_rollout_for_every_rollout() -> None:
    """The one loop (its fast case too) gives select_rollout's state and the newest saved execution."""
    counts = [reserved for reserved, _ in GROUPS]
    groups = [group for _, group in GROUPS]

    def conflict(index: int, problem: str) -> Exception:
        return AssertionError(problem)

    states, newest = select_rollouts(counts, groups, POLICY, conflict)  # type: ignore[arg-type]
    for (reserved, group), state, last in zip(GROUPS, states, newest, strict=True):
        outcomes = [] if group is None else group if isinstance(group, list) else [group]
        assert state == select_rollout(reserved, outcomes, POLICY)  # type: ignore[arg-type]
        assert last == max((o.attempt for o in outcomes), default=-1)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("reserved", "group", "problem"),
    [
        (1, result(1), "never reserved"),
        (0, result(0), "never reserved"),
        (2, [failure(0), result(0)], "two outcomes for execution 0"),
    ],
)
def test_select_rollouts_raises_the_callers_conflict(reserved: int, group: object, problem: str) -> None:
    """A history that conflicts with the reservations raises conflict(index, problem), fast case or not."""

    class ConflictError(Exception):
        pass

    groups = [None, group]
    with pytest.raises(ConflictError, match=problem):
        select_rollouts([0, reserved], groups, POLICY, lambda i, p: ConflictError(f"{i}: {p}"))  # type: ignore[arg-type]


def test_the_selection_rule_is_written_once() -> None:
    """Outside selection.py no module checks a history against reservations or spells the fast case."""
    import gymslurm

    package = Path(gymslurm.__file__).parent
    copies = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.name != "selection.py"
        and (
            "history_problem(" in path.read_text()
            or "select_rollout(" in path.read_text()
            or 'and group.kind == "result"' in path.read_text()
        )
    ]
    assert copies == []


@pytest.mark.parametrize(
    ("reward", "shared_before", "kept_is_shared"),
    [
        (0.5, {}, True),
        (0.0, {}, True),
        (-0.0, {0.0: 0.0}, False),
        (0.25, dict.fromkeys(range(4096), 0.0), False),
    ],
)
def test_a_reward_is_shared_by_value_except_a_negative_zero_or_past_the_bound(
    reward: float, shared_before: dict[float, float], kept_is_shared: bool
) -> None:
    """One float object per distinct reward value; -0.0 keeps its sign; a full table shares no more."""
    from gymslurm.selection import shared_reward

    shared = {float(k): v for k, v in shared_before.items()}
    first = shared_reward(shared, reward)
    again = shared_reward(shared, float(str(reward)))
    assert str(first) == str(reward) and (first is again) is kept_is_shared
