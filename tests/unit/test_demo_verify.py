"""The demo server's judge-only re-grading: POST /verify, the judge_failed fault, per-attempt scripts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gymslurm.demo.app import DemoApp, DemoConfig
from gymslurm.demo.arith import response_object
from gymslurm.demo.faults import choose_fault, task_fault_problems
from gymslurm.demo.server import summary
from gymslurm.dispatch import Completed, Failed, classify_reply
from gymslurm.records import EpisodeId

EPISODE: dict[str, Any] = {"rollout_id": "arith-17", "attempt": 2}
EPISODE_ID = EpisodeId(rollout_id="arith-17", attempt=2)
TASK_ID = {"taskset": "arith", "task_id": "17"}
RUN_ID = "run-" + "0" * 32


def verify_body(response: Any = "42", *, episode: Any = None, **extra: Any) -> dict[str, Any]:
    """A /verify body for 17 + 25 grading ``response``, with extra task_input fields."""
    task = {"task_id": TASK_ID, "task_input": {"a": 17, "b": 25, "op": "+", **extra}}
    return {"episode_id": EPISODE if episode is None else episode, "task": task, "response": response}


def post(app: DemoApp, path: bytes, body: Any) -> tuple[int, Any, dict[bytes, bytes]]:
    """POST ``body`` (encoded unless bytes) to the app; status, decoded JSON (or None) and headers."""
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    reply = app.handle(b"POST", path, raw)
    try:
        payload = orjson.loads(reply.body)
    except orjson.JSONDecodeError:
        payload = None
    return reply.status, payload, dict(reply.headers)


@pytest.mark.parametrize(
    ("response", "reward"),
    [
        ("42", 1.0),
        (" 42 ", 1.0),
        ("41", 0.0),
        ({"answer": "42"}, 1.0),
        (response_object("42"), 1.0),
        (response_object("40"), 0.0),
        ({"output": [{"type": "message", "content": [{"type": "output_text", "text": "42"}]}]}, 1.0),
    ],
    ids=["text", "padded text", "wrong text", "answer field", "demo response", "wrong demo", "output"],
)
def test_verify_grades_the_saved_answer(response: Any, reward: float) -> None:
    """/verify grades the answer the response holds and echoes the response in the result."""
    status, payload, _ = post(DemoApp(DemoConfig()), b"/verify", verify_body(response))
    assert status == 200
    assert payload == {
        "episode_id": EPISODE,
        "task_id": TASK_ID,
        "result": {"reward": reward, "response": response, "expected_answer": "42"},
    }


def test_verify_never_asks_the_policy() -> None:
    """With a policy that is always wrong, a saved right answer still grades 1.0 and /run is not counted."""
    app = DemoApp(DemoConfig(accuracy=0.0))
    _, payload, _ = post(app, b"/verify", verify_body("42"))
    assert (payload["result"]["reward"], app.run_requests, app.verify_requests) == (1.0, 0, 1)


def test_verify_ignores_run_faults() -> None:
    """A task scripted to fail on /run (here its judge) is graded normally by /verify."""
    _, payload, _ = post(DemoApp(DemoConfig()), b"/verify", verify_body("42", _demo_fault="judge_failed"))
    assert payload["result"]["reward"] == 1.0


def test_verify_reply_is_a_completed_outcome_for_dispatch() -> None:
    """The collector's classifier reads a /verify grade of a saved answer (the response object /run
    returned) as a completed result for the episode."""
    body = verify_body(response_object("42"))
    reply = DemoApp(DemoConfig()).handle(b"POST", b"/verify", orjson.dumps(body))
    outcome = classify_reply(
        reply.status,
        reply.body,
        episode=EPISODE_ID,
        task_id=TASK_ID,
        run_id=RUN_ID,
        route_failures=False,
        path="/verify",
    )
    assert isinstance(outcome, Completed) and outcome.result["reward"] == 1.0


INVALID: list[tuple[str, Any, list[str] | None]] = [
    ("not JSON", b"{", []),
    ("no response", {k: v for k, v in verify_body().items() if k != "response"}, ["body", "response"]),
    ("response without answer", verify_body({"status": "completed"}), ["body", "response"]),
    ("null response", verify_body(None), ["body", "response"]),
    ("unknown field", {**verify_body(), "extra": 1}, ["body", "extra"]),
    ("bad rollout id", verify_body(episode={"rollout_id": "x-a1", "attempt": 0}), None),
    ("bad attempt", verify_body(episode={"rollout_id": "x", "attempt": "1"}), None),
    ("unknown verify fault", verify_body(_demo_verify_fault="nope"), None),
    ("bad operands", {**verify_body(), "task": {"task_id": TASK_ID, "task_input": {"op": "+"}}}, None),
]


@pytest.mark.parametrize(("body", "loc"), [r[1:] for r in INVALID], ids=[r[0] for r in INVALID])
def test_verify_validation_is_422(body: Any, loc: list[str] | None) -> None:
    """A /verify body that breaks the schema is answered 422 in FastAPI's shape, naming where."""
    status, payload, _ = post(DemoApp(DemoConfig()), b"/verify", body)
    assert status == 422 and payload["detail"]
    if loc is not None:
        assert loc in [error["loc"][: len(loc)] for error in payload["detail"]]


def test_verify_fault_judge_failed() -> None:
    """_demo_verify_fault judge_failed answers a non-terminal judge failure at stage verification."""
    status, payload, _ = post(
        DemoApp(DemoConfig()), b"/verify", verify_body(_demo_verify_fault="judge_failed")
    )
    failure = payload["failure"]
    assert status == 200 and (payload["episode_id"], payload["task_id"]) == (EPISODE, TASK_ID)
    assert (failure["terminal"], failure["failure_kind"], failure["stage"]) == (
        False,
        "judge_failed",
        "verification",
    )


def test_verify_fault_http503() -> None:
    """_demo_verify_fault http503 answers 503 with Retry-After."""
    status, _, headers = post(DemoApp(DemoConfig()), b"/verify", verify_body(_demo_verify_fault="http503"))
    assert (status, headers[b"Retry-After"]) == (503, b"1")


def test_verify_fault_malformed() -> None:
    """_demo_verify_fault malformed answers neither a result nor a failure."""
    _, payload, _ = post(DemoApp(DemoConfig()), b"/verify", verify_body(_demo_verify_fault="malformed"))
    assert payload == {"episode_id": EPISODE, "task_id": TASK_ID}


def test_verify_is_post_only() -> None:
    """GET /verify is 405 with Allow: POST."""
    reply = DemoApp(DemoConfig()).handle(b"GET", b"/verify", b"")
    assert (reply.status, dict(reply.headers)[b"Allow"]) == (405, b"POST")


def test_run_judge_failed_fault_keeps_the_answer() -> None:
    """/run's judge_failed fault is a legacy judge failure whose response holds the policy's answer."""
    body = verify_body(_demo_fault="judge_failed")
    del body["response"]
    status, payload, _ = post(DemoApp(DemoConfig(accuracy=1.0)), b"/run", body)
    result = payload["result"]
    assert status == 200 and "reward" not in result
    assert (result["_ng_failure_class"], result["_ng_failure_terminal"]) == ("judge_failed", False)
    assert result["response"] == response_object("42")


def test_run_judge_failed_is_saved_as_a_judge_failure_with_answer() -> None:
    """dispatch reads the judge_failed fault as a retryable judge_failed failure keeping the answer."""
    body = verify_body(_demo_fault="judge_failed")
    del body["response"]
    reply = DemoApp(DemoConfig(accuracy=1.0)).handle(b"POST", b"/run", orjson.dumps(body))
    outcome = classify_reply(
        reply.status,
        reply.body,
        episode=EPISODE_ID,
        task_id=TASK_ID,
        run_id=RUN_ID,
        route_failures=False,
    )
    assert isinstance(outcome, Failed)
    assert (outcome.record.failure.failure_kind, outcome.record.failure.terminal) == ("judge_failed", False)
    assert outcome.response == response_object("42")


@pytest.mark.parametrize(("attempt", "fault"), [(0, "judge_failed"), (1, "retryable"), (2, None), (3, None)])
def test_fault_script_list_is_per_attempt(attempt: int, fault: str | None) -> None:
    """A list _demo_fault gives attempt i its item i; null and attempts past the end answer normally."""
    script = {"_demo_fault": ["judge_failed", "retryable", None]}
    assert choose_fault(script, attempt, 0.0, (("terminal", 1.0),)) == fault


@pytest.mark.parametrize("script", [["judge_failed", "nope"], [], [None], "judge_failed"])
def test_fault_script_validation(script: Any) -> None:
    """A list of known names and nulls is valid; an unknown name inside it is named."""
    problems = task_fault_problems({"_demo_fault": script})
    assert problems == ([] if "nope" not in script else [("_demo_fault", problems[0][1])])
    assert all("'nope'" in message for _, message in problems)


def test_summary_counts_run_and_verify() -> None:
    """The shutdown summary reports /run and /verify requests apart."""
    app = DemoApp(DemoConfig())
    post(app, b"/verify", verify_body("41"))
    line = summary(app)
    assert line.startswith("stopped after 0 /run requests (nothing) and 1 /verify requests (wrong 1)")
