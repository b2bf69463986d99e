"""The demo benchmark: answers, the exact-match verifier, the deterministic policy, dataset, metrics."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gymslurm.demo.arith import (
    aggregate_metrics,
    dataset_rows,
    draw,
    expected_answer,
    grade,
    policy_answer,
    question_text,
)


@pytest.mark.parametrize(
    ("a", "b", "op", "answer"), [(17, 25, "+", "42"), (3, 10, "-", "-7"), (12, 12, "*", "144")]
)
def test_expected_answer(a: int, b: int, op: str, answer: str) -> None:
    """The expected answer is the exact integer result as text."""
    assert expected_answer(a, b, op) == answer


@pytest.mark.parametrize(
    ("answer", "expected", "reward"),
    [("42", "42", 1.0), (" 42\n", "42", 1.0), ("43", "42", 0.0), ("42.0", "42", 0.0)],
)
def test_grade_is_exact_match(answer: str, expected: str, reward: float) -> None:
    """The verifier rewards 1.0 only for the exact text (surrounding whitespace ignored)."""
    assert grade(answer, expected) == reward


def test_draws_are_deterministic() -> None:
    """The same seed, rollout id and attempt always give the same draws."""
    assert draw(3, "arith-1", 2) == draw(3, "arith-1", 2)


@pytest.mark.parametrize("other", [(4, "arith-1", 2), (3, "arith-2", 2), (3, "arith-1", 3)])
def test_draws_change_with_seed_rollout_and_attempt(other: tuple[int, str, int]) -> None:
    """Changing the seed, the rollout id or the attempt changes the draws."""
    assert draw(3, "arith-1", 2) != draw(*other)


def test_draws_are_uniform_in_unit_interval() -> None:
    """Fault and policy draws lie in [0, 1) and a wrong answer's offset in 1..9."""
    draws = [draw(0, f"r{i}", 0) for i in range(500)]
    assert all(0.0 <= d.fault < 1.0 and 0.0 <= d.policy < 1.0 and 1 <= d.wrong_offset <= 9 for d in draws)


@pytest.mark.parametrize(("accuracy", "correct"), [(1.0, 300), (0.0, 0)])
def test_policy_extremes(accuracy: float, correct: int) -> None:
    """Accuracy 1 answers every rollout correctly and accuracy 0 none."""
    answers = [policy_answer("42", accuracy, draw(0, f"r{i}", 0)) for i in range(300)]
    assert sum(answer == "42" for answer in answers) == correct


def test_policy_accuracy_matches_the_setting() -> None:
    """Over many rollouts the fraction answered correctly is close to the accuracy."""
    correct = sum(policy_answer("42", 0.8, draw(0, f"r{i}", 0)) == "42" for i in range(4000))
    assert 0.77 < correct / 4000 < 0.83


def test_wrong_answer_is_a_near_miss() -> None:
    """A wrong answer is an integer 1 to 9 away from the expected one."""
    answers = {int(policy_answer("42", 0.0, draw(0, f"r{i}", 0))) for i in range(200)}
    assert answers <= set(range(33, 42)) | set(range(43, 52))


def test_dataset_is_deterministic_in_seed() -> None:
    """The same seed writes the same rows; another seed other rows."""
    assert list(dataset_rows(20, seed=1)) == list(dataset_rows(20, seed=1))
    assert list(dataset_rows(20, seed=1)) != list(dataset_rows(20, seed=2))


def test_dataset_rows_are_consistent_tasks() -> None:
    """Each row has a sequential task id and a question matching its operands."""
    rows = list(dataset_rows(5, seed=0))
    assert [row["task_id"] for row in rows] == [{"taskset": "arith", "task_id": str(i)} for i in range(5)]
    for row in rows:
        task = row["task_input"]
        assert task["question"] == question_text(task["a"], task["b"], task["op"])


def test_dataset_without_task_ids() -> None:
    """Plain rows carry only task_input, for the collector to derive ids."""
    assert all(set(row) == {"task_input"} for row in dataset_rows(3, with_task_ids=False))


def test_aggregate_metrics_means_over_scored_unmasked() -> None:
    """Masked and unscored items are counted but left out of the mean and accuracy."""
    items: list[dict[str, Any]] = [
        {"_ng_task_index": 0, "reward": 1.0},
        {"_ng_task_index": 1, "reward": 0.0},
        {"_ng_task_index": 2, "reward": 1.0},
        {"_ng_task_index": 3, "reward": 0.0, "mask_sample": True},
        {"_ng_task_index": 4},
    ]
    metrics = aggregate_metrics(items)
    assert metrics["key_metrics"] == {
        "mean/reward": pytest.approx(2 / 3),
        "accuracy": pytest.approx(2 / 3),
        "num_scored": 3,
    }
    assert (metrics["agent_metrics"]["num_masked"], metrics["agent_metrics"]["num_unscored"]) == (1, 1)


def test_aggregate_metrics_of_nothing() -> None:
    """With no scored item the means are null, not zero."""
    assert aggregate_metrics([])["key_metrics"] == {"mean/reward": None, "accuracy": None, "num_scored": 0}


def test_group_level_metrics_per_task_index() -> None:
    """Repeats of one task form one group with its mean and pass@k, ordered by task index."""
    items = [
        {"task_index": 10, "reward": 0.0},
        {"task_index": 2, "reward": 0.0},
        {"task_index": 10, "reward": 1.0},
    ]
    groups = aggregate_metrics(items)["group_level_metrics"]
    assert groups == [
        {"task_index": 2, "num_samples": 1, "mean/reward": 0.0, "pass@1": 0.0},
        {"task_index": 10, "num_samples": 2, "mean/reward": 0.5, "pass@2": 1.0},
    ]


def test_metric_keys_are_flat_strings() -> None:
    """Every metric key is a string and every value a scalar (ready for W&B/MLflow)."""
    metrics = aggregate_metrics([{"reward": 1.0}])
    for section in ("agent_metrics", "key_metrics"):
        assert all(isinstance(k, str) and not isinstance(v, dict | list) for k, v in metrics[section].items())


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # what orjson decodes as int
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=3)
)
ITEMS = st.lists(
    st.fixed_dictionaries(
        {}, optional={"reward": JSON_SCALARS, "mask_sample": JSON_SCALARS, "_ng_task_index": JSON_SCALARS}
    ),
    max_size=8,
)


@given(ITEMS)
def test_aggregate_metrics_accepts_any_items(items: list[dict[str, Any]]) -> None:
    """Any list of result objects gives metrics that encode as JSON."""
    metrics = aggregate_metrics(items)
    assert metrics["agent_metrics"]["num_verify_responses"] == len(items)
    orjson.dumps(metrics)
