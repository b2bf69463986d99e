"""Metrics over selected rollouts: one spec sentence a row, plus a property test on the bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gymslurm.metrics import MetricsAccumulator, ScoringPolicy, compute_metrics
from gymslurm.selection import BudgetPolicy, Disposition, RolloutState, SavedOutcome, select_rollout

POLICY = BudgetPolicy(max_rollout_attempts=3)


def result(reward: float | None = 1.0, *, masked: bool = False, attempt: int = 0) -> SavedOutcome:
    """A saved completed result."""
    return SavedOutcome(attempt=attempt, kind="result", line=0, reward=reward, masked=masked)


def failure(
    kind: str | None = "agent_run_error",
    *,
    terminal: bool = True,
    legacy: str | None = None,
    attempt: int = 0,
    delivery: str = "delivered",
) -> SavedOutcome:
    """A saved failure record whose routing class follows its canonical kind."""
    return SavedOutcome(
        attempt=attempt,
        kind="failure",
        line=attempt,
        terminal=terminal,
        delivery=delivery,
        failure_kind=kind,
        failure_class=kind or "environment_server_failed",
        legacy_class=legacy,
    )


def omission(payload_class: str | None = None, *, terminal: bool = False) -> SavedOutcome:
    """A saved intentional omission, optionally carrying a failure payload."""
    return SavedOutcome(attempt=0, kind="omission", line=0, terminal=terminal, failure_class=payload_class)


def state(*outcomes: SavedOutcome, reserved: int | None = None) -> RolloutState:
    """Select a rollout from its outcomes (reserved defaults to one past the newest attempt)."""
    if reserved is None:
        reserved = max((o.attempt for o in outcomes), default=-1) + 1
    return select_rollout(reserved, outcomes, POLICY)


NOT_STARTED = state(reserved=0)
MISSING = state(result(0.5), reserved=2)


def metrics(*states: RolloutState, **policy: object) -> dict[str, float | int]:
    """Metrics of one manifest-backed shard under a scoring policy."""
    scoring = ScoringPolicy(**policy)  # type: ignore[arg-type]
    return compute_metrics(states, max_rollout_attempts=3, historical_failed_attempts=0, policy=scoring)


COUNT_CASES = [
    # (id, states, key, expected value)
    ("a numeric reward is measured", [state(result(0.0))], "coverage/measured", 1),
    ("a zero reward is measured, not failed", [state(result(0.0))], "coverage/failed", 0),
    ("a masked result counts as masked", [state(result(1.0, masked=True))], "coverage/masked", 1),
    ("a result without a reward is unscored", [state(result(None))], "coverage/unscored", 1),
    ("a selected failure is failed", [state(failure())], "coverage/failed", 1),
    ("an omission is omitted", [state(omission())], "coverage/omitted", 1),
    ("no reservation is not_started", [NOT_STARTED], "coverage/not_started", 1),
    ("a reservation without outcome is missing", [MISSING], "coverage/missing", 1),
    ("missing_outcomes equals missing", [MISSING], "coverage/missing_outcomes", 1),
    ("an older result under a newer reservation is not measured", [MISSING], "coverage/measured", 0),
    (
        "failed/<class> counts selected failures by class",
        [state(failure("judge_failed")), state(failure("judge_failed"))],
        "coverage/failed/judge_failed",
        2,
    ),
    (
        "a failure without a kind is grouped under the routing label",
        [state(failure(None))],
        "coverage/failed/environment_server_failed",
        1,
    ),
    (
        "a superseded failure is not counted once a retry succeeded",
        [state(failure(terminal=False), result(1.0, attempt=1))],
        "coverage/failed",
        0,
    ),
    (
        "not_scored is expected minus scored (masked with a reward is scored)",
        [state(result(1.0)), state(result(1.0, masked=True)), state(result(None)), state(failure())],
        "coverage/not_scored",
        2,
    ),
    (
        "retries/at_cap counts exhausted budgets",
        [state(*(failure(terminal=False, attempt=a) for a in range(3)))],
        "retries/at_cap",
        1,
    ),
    ("retries/max_attempts is the saved limit", [state(result())], "retries/max_attempts", 3),
]


@pytest.mark.parametrize(
    ("states", "key", "value"), [c[1:] for c in COUNT_CASES], ids=[c[0] for c in COUNT_CASES]
)
def test_counts(states: list[RolloutState], key: str, value: int) -> None:
    """Each coverage metric counts the selected state of each rollout once."""
    assert metrics(*states)[key] == value


def test_mean_reward_over_measured_only() -> None:
    """The mean reward averages measured rewards; masked and unscored results stay out."""
    out = metrics(
        state(result(1.0)), state(result(0.0)), state(result(0.0, masked=True)), state(result(None))
    )
    assert out["mean/reward"] == 0.5


def test_no_mean_reward_without_measurements() -> None:
    """A fully masked run has no mean reward (no zero is invented)."""
    assert "mean/reward" not in metrics(state(result(1.0, masked=True)))


ZERO_CASES = [
    # (id, state, classes, counted as zero)
    ("canonical kind matches", state(failure("judge_failed")), {"judge_failed"}, True),
    (
        "legacy class matches",
        state(failure("agent_run_error", legacy="timeout_exceeded")),
        {"timeout_exceeded"},
        True,
    ),
    ("unlisted class does not", state(failure("agent_run_error")), {"judge_failed"}, False),
    (
        "a terminal skipped payload with a skipped entry",
        state(omission("skipped", terminal=True)),
        {"skipped"},
        True,
    ),
    ("a skipped payload without a skipped entry", state(omission("skipped", terminal=True)), {"x"}, False),
    ("a non-terminal skipped payload", state(omission("skipped", terminal=False)), {"skipped"}, False),
    ("an omission without a payload is never scored", state(omission()), {"skipped"}, False),
]


@pytest.mark.parametrize(
    ("st_", "classes", "zero"), [c[1:] for c in ZERO_CASES], ids=[c[0] for c in ZERO_CASES]
)
def test_count_failure_classes_as_zero(st_: RolloutState, classes: set[str], zero: bool) -> None:
    """count_failure_classes_as_zero matches the canonical kind or the legacy class."""
    out = metrics(st_, count_failure_classes_as_zero=frozenset(classes))
    assert out["scoring/counted_failures_as_zero"] == int(zero)
    assert out["coverage/scored"] == int(zero)


def test_failure_matching_two_names_counts_once() -> None:
    """A failure whose kind and legacy class are both listed scores one zero."""
    both = state(failure("judge_failed", legacy="judge_invalid"))
    out = metrics(
        both, state(result(1.0)), count_failure_classes_as_zero=frozenset({"judge_failed", "judge_invalid"})
    )
    assert out["scoring/counted_failures_as_zero"] == 1
    assert out["mean/reward"] == 0.5


def test_counted_zero_keeps_disposition() -> None:
    """A failure counted as zero stays failed, and a skipped omission stays omitted."""
    out = metrics(
        state(failure("judge_failed")),
        state(omission("skipped", terminal=True)),
        count_failure_classes_as_zero=frozenset({"judge_failed", "skipped"}),
    )
    assert (out["coverage/failed"], out["coverage/omitted"], out["coverage/measured"]) == (1, 1, 0)


IMPUTE_CASES = [
    ("missing is imputed", MISSING, 1),
    ("not_started is imputed", NOT_STARTED, 1),
    ("a known failure is not imputed", state(failure()), 0),
    ("an unscored completion is not missing", state(result(None)), 0),
    ("an omission is not missing", state(omission()), 0),
]


@pytest.mark.parametrize(("st_", "imputed"), [c[1:] for c in IMPUTE_CASES], ids=[c[0] for c in IMPUTE_CASES])
def test_count_missing_rollouts_as_zero(st_: RolloutState, imputed: int) -> None:
    """count_missing_rollouts_as_zero adds zeros only where the newest execution has no outcome."""
    out = metrics(st_, count_missing_rollouts_as_zero=True)
    assert out["scoring/imputed"] == imputed


def test_imputed_zero_enters_mean_but_not_coverage() -> None:
    """An imputed zero lowers the mean reward while the rollout stays missing and unscored."""
    out = metrics(state(result(1.0)), MISSING, count_missing_rollouts_as_zero=True)
    assert out["mean/reward"] == 0.5
    assert (out["coverage/missing"], out["coverage/scored"], out["coverage/not_scored"]) == (1, 1, 1)


def test_imputation_off_by_default() -> None:
    """Without the policy, a missing rollout adds nothing to the mean reward."""
    out = metrics(state(result(1.0)), MISSING)
    assert (out["mean/reward"], out["scoring/imputed"]) == (1.0, 0)


def test_max_attempts_omitted_when_shards_differ() -> None:
    """retries/max_attempts is omitted when aggregated shards saved different limits."""
    acc = MetricsAccumulator()
    acc.add_shard(max_rollout_attempts=3, historical_failed_attempts=1)
    acc.add_shard(max_rollout_attempts=5, historical_failed_attempts=2)
    out = acc.metrics()
    assert "retries/max_attempts" not in out
    assert out["retries/attempts"] == 3


def test_legacy_shard_keeps_observed_counts_only() -> None:
    """A legacy shard reports observed measured/masked counts but no inventory categories."""
    acc = MetricsAccumulator()
    acc.add_shard(max_rollout_attempts=None, historical_failed_attempts=0)
    for outcome in (result(1.0), result(1.0), result(0.0, masked=True)):
        acc.add_legacy_outcome(outcome)
    out = acc.metrics()
    assert (out["coverage/measured"], out["coverage/masked"]) == (2, 1)
    assert not {
        "coverage/missing",
        "coverage/not_started",
        "coverage/not_scored",
        "retries/max_attempts",
    } & set(out)


def test_legacy_failure_rows_are_counted_raw() -> None:
    """A legacy sidecar's failure rows are counted as observed, grouped by class."""
    acc = MetricsAccumulator()
    acc.add_shard(max_rollout_attempts=None, historical_failed_attempts=2)
    acc.add_legacy_outcome(failure("judge_failed"))
    acc.add_legacy_outcome(failure("judge_failed"))
    out = acc.metrics()
    assert (out["coverage/failed"], out["coverage/failed/judge_failed"]) == (2, 2)


OUTCOMES = st.one_of(
    st.builds(result, st.one_of(st.none(), st.floats(0, 1)), masked=st.booleans()),
    st.builds(failure, st.sampled_from(["judge_failed", "agent_run_error", None]), terminal=st.booleans()),
    st.builds(omission, st.sampled_from([None, "skipped"]), terminal=st.booleans()),
)
STATES = st.one_of(
    st.builds(state, OUTCOMES),
    st.just(NOT_STARTED),
    st.just(MISSING),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(STATES, max_size=30), st.booleans(), st.booleans())
def test_counts_never_exceed_expected(states: list[RolloutState], zero_all: bool, impute: bool) -> None:
    """No policy can make scored + imputed, or the disposition split, exceed expected."""
    classes = frozenset(
        {"judge_failed", "agent_run_error", "environment_server_failed", "skipped"} if zero_all else ()
    )
    out = metrics(*states, count_failure_classes_as_zero=classes, count_missing_rollouts_as_zero=impute)
    expected = out["coverage/expected"]
    assert expected == len(states)
    assert out["coverage/scored"] + out["scoring/imputed"] <= expected
    assert out["coverage/not_scored"] >= 0
    split = sum(
        out[f"coverage/{k}"] for k in ("measured", "masked", "unscored", "failed", "omitted", "not_started")
    )
    assert split + out["coverage/missing"] == expected
    assert sum(s.disposition is Disposition.FAILED for s in states) == out["coverage/failed"]


def test_merged_accumulators_equal_one_pass() -> None:
    """Merging per-shard accumulators gives the metrics of one accumulator over every shard."""
    policy = ScoringPolicy(
        count_failure_classes_as_zero=frozenset({"judge_failed"}), count_missing_rollouts_as_zero=True
    )
    shards = [
        [state(result(1.0)), state(failure("judge_failed"))],
        [MISSING, NOT_STARTED, state(result(0.0))],
    ]
    whole = MetricsAccumulator(policy=policy)
    merged = MetricsAccumulator(policy=policy)
    for states in shards:
        part = MetricsAccumulator(policy=policy)
        for acc in (whole, part):
            acc.add_shard(max_rollout_attempts=3, historical_failed_attempts=1)
            for st_ in states:
                acc.add_state(st_)
        merged.merge(part)
    assert merged.metrics() == whole.metrics()
