"""Fault selection (scripted per task, or by rates) and the documented reply of every fault."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from gymslurm.demo.faults import (
    FAULTS,
    RATE_ORDER,
    SLOW_DEFAULT_MS,
    choose_fault,
    delay_seconds,
    episode_reply,
    rates_problem,
    task_fault_problems,
)
from gymslurm.demo.messages import Episode, Reply
from gymslurm.records import MAX_FAILURE_REASON, EpisodeFailure

EPISODE_ID = {"rollout_id": "arith-17", "attempt": 2}
TASK_ID = {"taskset": "arith", "task_id": "17"}
RESULT = {"reward": 1.0, "response": {"answer": "42"}, "expected_answer": "42"}


def episode(attempt: int = 2, **task_input: Any) -> Episode:
    """An episode of task arith/17 at ``attempt`` with extra task_input fields."""
    return Episode(
        {"rollout_id": "arith-17", "attempt": attempt}, TASK_ID, {"a": 17, "b": 25, "op": "+", **task_input}
    )


def reply_of(fault: str | None, attempt: int = 2, **task_input: Any) -> Reply:
    """The reply episode_reply builds for ``fault``."""
    return episode_reply(fault, episode(attempt, **task_input), "42", "42", RESULT)


def payload_of(fault: str | None, **task_input: Any) -> dict[str, Any]:
    """The decoded JSON body of the reply for ``fault``."""
    reply = reply_of(fault, **task_input)
    assert reply.status == 200
    payload: dict[str, Any] = orjson.loads(reply.body)
    return payload


# -- selection ---------------------------------------------------------------------------------------


def test_no_fault_without_script_or_rates() -> None:
    """A task without _demo_fault and no rates gets no fault."""
    assert choose_fault({}, 0, 0.0, ()) is None


def test_scripted_fault_applies_to_every_attempt() -> None:
    """_demo_fault without an attempts limit faults every attempt."""
    assert [choose_fault({"_demo_fault": "terminal"}, n, 0.5, ()) for n in range(3)] == ["terminal"] * 3


def test_scripted_fault_attempts_limit() -> None:
    """_demo_fault_attempts k faults attempts below k and answers normally from k on."""
    task = {"_demo_fault": "retryable", "_demo_fault_attempts": 2}
    assert [choose_fault(task, n, 0.0, ()) for n in range(4)] == ["retryable", "retryable", None, None]


def test_scripted_task_gets_no_rate_fault() -> None:
    """A scripted task past its attempts limit is not given a rate fault."""
    task = {"_demo_fault": "retryable", "_demo_fault_attempts": 0}
    assert choose_fault(task, 0, 0.0, (("terminal", 1.0),)) is None


@pytest.mark.parametrize(
    ("draw", "fault"),
    [(0.0, "retryable"), (0.099, "retryable"), (0.1, "omit"), (0.299, "omit"), (0.31, None)],
)
def test_rates_are_cumulative_intervals(draw: float, fault: str | None) -> None:
    """The draw falls into the rate intervals laid out in order; beyond them, no fault."""
    assert choose_fault({}, 0, draw, (("retryable", 0.1), ("omit", 0.2))) == fault


@pytest.mark.parametrize(
    ("rates", "problem"),
    [
        ((("retryable", 0.5), ("terminal", 0.5)), None),
        ((("retryable", 1.5),), "within [0, 1]"),
        ((("retryable", 0.6), ("terminal", 0.6)), "add up to 1.2"),
        ((("explode", 0.1),), "unknown fault"),
    ],
)
def test_rates_problem(rates: tuple[tuple[str, float], ...], problem: str | None) -> None:
    """Rates must name known faults, lie in [0, 1] and add up to at most 1."""
    found = rates_problem(rates)
    assert found is None if problem is None else problem in (found or "")


def test_every_rate_fault_is_a_fault() -> None:
    """Each --<name>-rate flag names a documented fault."""
    assert set(RATE_ORDER) <= set(FAULTS)


def test_task_fault_fields_valid() -> None:
    """Well-formed _demo_* fields have no problem."""
    task = {
        "_demo_fault": "slow",
        "_demo_fault_attempts": 1,
        "_demo_latency_ms": 2.5,
        "_demo_failure_kind": "k",
    }
    assert task_fault_problems(task) == []


@pytest.mark.parametrize(
    ("fault", "task_input", "latency_ms", "seconds"),
    [
        (None, {}, 0.0, 0.0),
        (None, {}, 20.0, 0.02),
        (None, {"_demo_latency_ms": 30}, 20.0, 0.05),
        ("slow", {}, 0.0, SLOW_DEFAULT_MS / 1000),
        ("slow", {"_demo_latency_ms": 5}, 0.0, 0.005),
    ],
)
def test_delay_seconds(
    fault: str | None, task_input: dict[str, Any], latency_ms: float, seconds: float
) -> None:
    """The delay adds the server latency and the task's; slow defaults to SLOW_DEFAULT_MS."""
    assert delay_seconds(fault, task_input, latency_ms) == pytest.approx(seconds)


# -- replies -----------------------------------------------------------------------------------------


def test_no_fault_replies_the_graded_result() -> None:
    """Without a fault the reply echoes both ids and carries the graded result."""
    assert payload_of(None) == {"episode_id": EPISODE_ID, "task_id": TASK_ID, "result": RESULT}


def test_slow_replies_the_graded_result() -> None:
    """The slow fault changes only the timing, not the reply."""
    assert payload_of("slow") == payload_of(None)


def failure_of(fault: str, **task_input: Any) -> dict[str, Any]:
    """The failure object of a failure fault's reply, checked against the shared EpisodeFailure."""
    payload = payload_of(fault, **task_input)
    assert (payload["episode_id"], payload["task_id"], "result" in payload) == (EPISODE_ID, TASK_ID, False)
    EpisodeFailure.model_validate(payload["failure"])
    failure: dict[str, Any] = payload["failure"]
    return failure


@pytest.mark.parametrize(
    ("fault", "terminal", "kind", "stage"),
    [
        ("retryable", False, "session_lost", "seed"),
        ("terminal", True, "agent_command_not_allowed", "agent"),
        ("unspecified", False, None, None),
        ("admission", False, None, "admission"),
        ("kill_shaped", False, "kill_shaped", None),
    ],
)
def test_failure_faults(fault: str, terminal: bool, kind: str | None, stage: str | None) -> None:
    """Each failure fault gives a valid EpisodeFailure with its documented terminal, kind and stage."""
    failure = failure_of(fault)
    assert (failure["terminal"], failure.get("failure_kind"), failure.get("stage")) == (terminal, kind, stage)
    assert fault in failure["failure_reason"]


@pytest.mark.parametrize("fault", ["retryable", "unspecified", "masked"])
def test_failure_kind_override(fault: str) -> None:
    """_demo_failure_kind replaces the kind of a failure or masked fault."""
    payload = payload_of(fault, _demo_failure_kind="demo:custom")
    outcome = payload["failure"] if "failure" in payload else payload["result"]
    assert outcome["failure_kind"] == "demo:custom"


def test_kill_shaped_sets_top_level_no_persist() -> None:
    """kill_shaped carries "_ng_no_persist": true at the top level of the reply."""
    assert payload_of("kill_shaped")["_ng_no_persist"] is True


def result_of(fault: str) -> dict[str, Any]:
    """The result object of a result fault's reply."""
    payload = payload_of(fault)
    assert (payload["episode_id"], payload["task_id"], "failure" in payload) == (EPISODE_ID, TASK_ID, False)
    result: dict[str, Any] = payload["result"]
    return result


RESULT_CHECKS: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
    (
        "masked",
        lambda r: r["mask_sample"] is True and r["failure_kind"] == "verifier_error" and "response" not in r,
    ),
    ("masked_kept", lambda r: r["mask_sample"] is True and r["response"]["answer"] == "42"),
    ("unscored", lambda r: "reward" not in r and r["response"]["answer"] == "42"),
    ("omit", lambda r: r == {"_ng_no_persist": True}),
]


@pytest.mark.parametrize(("fault", "check"), RESULT_CHECKS)
def test_result_faults(fault: str, check: Callable[[dict[str, Any]], bool]) -> None:
    """Each result fault gives its documented result shape."""
    assert check(result_of(fault))


@pytest.mark.parametrize("fault", ["masked", "masked_kept", "unscored"])
def test_ungraded_results_carry_no_reward(fault: str) -> None:
    """Masked and unscored results carry no reward: no placeholder score."""
    assert "reward" not in result_of(fault)


def test_malformed_has_neither_result_nor_failure() -> None:
    """malformed replies the ids only: neither result nor failure."""
    assert payload_of("malformed") == {"episode_id": EPISODE_ID, "task_id": TASK_ID}


def test_long_reason_exceeds_the_limit() -> None:
    """long_reason's failure_reason is over the protocol's 2000 characters."""
    assert len(payload_of("long_reason")["failure"]["failure_reason"]) > MAX_FAILURE_REASON


def test_not_json_is_not_json() -> None:
    """not_json answers 200 with a body that does not decode."""
    reply = reply_of("not_json")
    assert reply.status == 200
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(reply.body)


def test_wrong_task_answers_for_another_task() -> None:
    """wrong_task echoes the episode but names another task id."""
    payload = payload_of("wrong_task")
    assert payload["episode_id"] == EPISODE_ID
    assert payload["task_id"]["taskset"] == "arith"
    assert payload["task_id"]["task_id"] != "17"


@pytest.mark.parametrize(("attempt", "stale_attempt"), [(2, 1), (1, 0), (0, 1)])
def test_stale_answers_another_attempt_of_the_rollout(attempt: int, stale_attempt: int) -> None:
    """stale carries attempt-1 (1 for attempt 0) of the same rollout and task."""
    payload = orjson.loads(reply_of("stale", attempt=attempt).body)
    assert payload["episode_id"] == {"rollout_id": "arith-17", "attempt": stale_attempt}
    assert payload["task_id"] == TASK_ID


@pytest.mark.parametrize(("fault", "status"), [("http500", 500), ("http503", 503), ("http429", 429)])
def test_http_status_faults(fault: str, status: int) -> None:
    """The http faults answer their status code."""
    assert reply_of(fault).status == status


@pytest.mark.parametrize("fault", ["http503", "http429"])
def test_retry_later_faults_send_retry_after(fault: str) -> None:
    """503 and 429 carry a Retry-After header."""
    assert (b"Retry-After", b"1") in reply_of(fault).headers


def test_die_is_an_action_without_a_body() -> None:
    """die returns the die action and nothing to send."""
    reply = reply_of("die")
    assert (reply.die, reply.body) == (True, b"")


def test_every_documented_fault_has_a_reply() -> None:
    """Every name in FAULTS builds a reply (none falls through by mistake except slow)."""
    normal = reply_of(None)
    differing = {fault for fault in FAULTS if reply_of(fault) != normal}
    assert differing == set(FAULTS) - {"slow"}
