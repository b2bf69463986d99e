"""Classification of every Environment Server answer or transport exception, and the HTTP transport.

Classification rows go through :class:`EnvironmentClient` with ``httpx.MockTransport`` (a handler that
answers with a status and body), so the request the client builds is checked too. The transport
tests run a real asyncio HTTP server on loopback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from gymslurm.dispatch import (
    Completed,
    EnvironmentClient,
    Failed,
    Http11Transport,
    Omitted,
    Outcome,
    classify_exception,
    classify_reply,
)
from gymslurm.errors import ConfigError, ProtocolError
from gymslurm.records import EpisodeId

RUN_ID = "run-" + "0" * 32
EPISODE = EpisodeId(rollout_id="arith-7", attempt=2)
TASK_ID = {"taskset": "arith", "task_id": "7"}
TASK = {"task_id": TASK_ID, "task_input": {"question": "6*7"}}
URL = "http://env.test:8000"


def reply(**fields: Any) -> dict[str, Any]:
    """A reply naming the episode and task that were sent, plus ``fields``."""
    return {
        "episode_id": {"rollout_id": EPISODE.rollout_id, "attempt": EPISODE.attempt},
        "task_id": TASK_ID,
    } | fields


def failure(**fields: Any) -> dict[str, Any]:
    return {"failure_reason": "sandbox died", "terminal": False} | fields


def run_once(
    status: int, body: bytes | dict | list, *, route_failures: bool = True
) -> tuple[Outcome, list[httpx.Request]]:
    """Send TASK for EPISODE through a MockTransport answering ``status``/``body``."""
    seen: list[httpx.Request] = []
    content = body if isinstance(body, bytes) else orjson.dumps(body)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=content)

    async def go() -> Outcome:
        client = EnvironmentClient(
            concurrency=2,
            run_id=RUN_ID,
            route_failures=route_failures,
            transport=httpx.MockTransport(handler),
        )
        async with client:
            return await client.run(URL, EPISODE, TASK)

    return asyncio.run(go()), seen


# ---------------------------------------------------------------------------------------------------
# Completed and omitted


@dataclass
class Case:
    why: str
    status: int
    body: bytes | dict | list
    expect: dict[str, Any] = field(default_factory=dict)


COMPLETED = [
    Case(
        "a graded result is saved as sent",
        200,
        reply(result={"reward": 0.0, "answer": "41"}),
        {"result": {"reward": 0.0, "answer": "41"}},
    ),
    Case(
        "a masked result is a result",
        200,
        reply(result={"reward": 1.0, "mask_sample": True}),
        {"result": {"reward": 1.0, "mask_sample": True}},
    ),
    Case(
        "a result without reward stays without one (unscored)",
        200,
        reply(result={"answer": "x"}),
        {"result": {"answer": "x"}},
    ),
    Case(
        "a null reward is an unscored result, kept as sent",
        200,
        reply(result={"reward": None}),
        {"result": {"reward": None}},
    ),
    Case(
        "an old execute_only result is completed",
        200,
        reply(result={"execute_only": True}),
        {"result": {"execute_only": True}},
    ),
    Case(
        "the two legacy judge markers are accepted",
        200,
        reply(
            result={"response": {"output_text": "r"}, "_ng_judge_failsafe": True, "_ng_judge_invalid": False}
        ),
        {
            "result": {
                "response": {"output_text": "r"},
                "_ng_judge_failsafe": True,
                "_ng_judge_invalid": False,
            }
        },
    ),
    Case(
        "_ng_no_persist=false is no suppression and is not saved",
        200,
        reply(result={"reward": 1, "_ng_no_persist": False}),
        {"result": {"reward": 1}},
    ),
    Case(
        "a masked result with a failure_kind is still a result",
        200,
        reply(result={"mask_sample": True, "failure_kind": "session_lost"}),
        {"result": {"mask_sample": True, "failure_kind": "session_lost"}},
    ),
    Case(
        "any 2xx status carries an episode reply", 201, reply(result={"reward": 1}), {"result": {"reward": 1}}
    ),
]


@pytest.mark.parametrize("case", COMPLETED, ids=lambda case: case.why)
def test_completed_replies(case: Case) -> None:
    """Completed replies keep the environment's result exactly; no reward is ever invented."""
    outcome, _ = run_once(case.status, case.body)
    assert outcome == Completed(case.expect["result"])


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(reply(result={"_ng_no_persist": True}), id="bare _ng_no_persist result"),
        pytest.param(reply(result={}, _ng_no_persist=True), id="_ng_no_persist beside an empty result"),
        pytest.param(
            reply(result={"_ng_no_persist": True, "note": "skipped"}), id="suppression with other fields"
        ),
    ],
)
def test_suppression_without_failure_is_an_omission(body: dict) -> None:
    """A suppression that reports no failure is an intentional omission."""
    outcome, _ = run_once(200, body)
    assert outcome == Omitted()


def test_request_follows_the_protocol() -> None:
    """The client POSTs {episode_id, task} as JSON to <url>/run."""
    _, seen = run_once(200, reply(result={"reward": 1}))
    (request,) = seen
    assert (request.method, str(request.url)) == ("POST", URL + "/run")
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {
        "episode_id": {"rollout_id": "arith-7", "attempt": 2},
        "task": TASK,
    }


# ---------------------------------------------------------------------------------------------------
# Environment-reported failures


@dataclass
class FailureCase:
    why: str
    status: int
    body: dict
    kind: str | None
    terminal: bool
    stage: str | None = None
    response: object = None
    diagnostics: dict | None = None
    legacy_class: str | None = None
    reason: str = "sandbox died"


ENVIRONMENT_FAILURES = [
    FailureCase(
        "kind, terminal and stage are kept",
        200,
        reply(failure=failure(failure_kind="session_lost", terminal=True, stage="seed")),
        "session_lost",
        True,
        "seed",
    ),
    FailureCase("an absent failure_kind stays absent", 200, reply(failure=failure()), None, False),
    FailureCase(
        "an unregistered or namespaced kind is kept",
        200,
        reply(failure=failure(failure_kind="harbor:disk_full")),
        "harbor:disk_full",
        False,
    ),
    FailureCase(
        "admission timeouts keep their stage",
        200,
        reply(failure=failure(failure_kind="agent_timeout", stage="admission")),
        "agent_timeout",
        False,
        "admission",
    ),
    FailureCase(
        "kill_shaped with _ng_no_persist in the failure is saved",
        200,
        reply(failure=failure(failure_kind="kill_shaped", _ng_no_persist=True)),
        "kill_shaped",
        False,
    ),
    FailureCase(
        "kill_shaped with a top-level _ng_no_persist is saved",
        200,
        reply(failure=failure(failure_kind="kill_shaped"), _ng_no_persist=True),
        "kill_shaped",
        False,
    ),
    FailureCase(
        "producer fields go to diagnostics, the partial response aside",
        200,
        reply(failure=failure(trace_path="/t/1", response={"output": []}), grader="notes"),
        None,
        False,
        response={"output": []},
        diagnostics={"trace_path": "/t/1", "grader": "notes"},
    ),
    FailureCase(
        "a top-level partial response is kept aside",
        200,
        reply(failure=failure(), response={"output": ["partial"]}),
        None,
        False,
        response={"output": ["partial"]},
    ),
    FailureCase(
        "an unknown stage stays unset and is kept in diagnostics",
        200,
        reply(failure=failure(stage="teardown")),
        None,
        False,
        diagnostics={"stage": "teardown"},
    ),
    FailureCase(
        "a null result beside a failure is no result",
        200,
        reply(result=None, failure=failure(stage=None, failure_kind=None)),
        None,
        False,
    ),
    FailureCase(
        "a 500 carrying a well-formed failure keeps the environment's verdict",
        500,
        reply(failure=failure(terminal=True, failure_kind="verifier_error")),
        "verifier_error",
        True,
    ),
    FailureCase(
        "legacy _ng_failure_class results are converted, reward placeholder dropped",
        200,
        reply(
            result={
                "_ng_failure_class": "judge_failed",
                "_ng_failure_message": "judge 500",
                "reward": 0.0,
                "response": {"output": ["A"]},
                "tokens": 12,
            }
        ),
        "judge_failed",
        False,
        response={"output": ["A"]},
        diagnostics={"tokens": 12},
        reason="judge 500",
    ),
    FailureCase(
        "legacy timeout_exceeded is agent_timeout, its class kept",
        200,
        reply(result={"_ng_failure_class": "timeout_exceeded", "_ng_failure_terminal": True}),
        "agent_timeout",
        True,
        legacy_class="timeout_exceeded",
        reason="legacy producer reported failure class 'timeout_exceeded' without a message",
    ),
    FailureCase(
        "a legacy unregistered class has no canonical kind",
        200,
        reply(result={"_ng_failure_class": "gdpval_stage_fail", "_ng_failure_message": "m"}),
        None,
        False,
        legacy_class="gdpval_stage_fail",
        reason="m",
    ),
    FailureCase(
        "a legacy generic class is no kind and no separate legacy class",
        200,
        reply(result={"_ng_failure_class": "environment_server_failed", "_ng_failure_message": "m"}),
        None,
        False,
        reason="m",
    ),
    FailureCase(
        "a legacy kill_shaped result with _ng_no_persist is saved, not omitted",
        200,
        reply(
            result={
                "_ng_failure_class": "kill_shaped",
                "_ng_no_persist": True,
                "_ng_failure_message": "killed",
            }
        ),
        "kill_shaped",
        False,
        reason="killed",
    ),
]


@pytest.mark.parametrize("case", ENVIRONMENT_FAILURES, ids=lambda case: case.why)
def test_environment_failures(case: FailureCase) -> None:
    """Environment-reported failures are delivered, source environment, with their own fields kept."""
    outcome, _ = run_once(case.status, case.body, route_failures=False)
    assert isinstance(outcome, Failed)
    record = outcome.record
    assert (record.source, record.delivery, record.run_id, record.episode_id) == (
        "environment",
        "delivered",
        RUN_ID,
        EPISODE,
    )
    assert (record.failure.failure_kind, record.failure.terminal, record.failure.stage) == (
        case.kind,
        case.terminal,
        case.stage,
    )
    assert record.failure.failure_reason == case.reason
    assert (outcome.response, outcome.diagnostics, outcome.legacy_class) == (
        case.response,
        case.diagnostics,
        case.legacy_class,
    )


def test_unregistered_kind_is_kept_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    """An unregistered kind is saved as sent, with one warning per name; namespaced kinds need none."""

    async def go() -> list[Outcome]:
        kinds = iter(["disk_on_fire", "disk_on_fire", "harbor:disk_full", "session_lost"])

        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, content=orjson.dumps(reply(failure=failure(failure_kind=next(kinds)))))

        async with EnvironmentClient(
            concurrency=1, run_id=RUN_ID, transport=httpx.MockTransport(handler)
        ) as client:
            return [await client.run(URL, EPISODE, TASK) for _ in range(4)]

    with caplog.at_level("WARNING", logger="gymslurm.dispatch"):
        outcomes = asyncio.run(go())
    assert [o.record.failure.failure_kind for o in outcomes if isinstance(o, Failed)] == [
        "disk_on_fire",
        "disk_on_fire",
        "harbor:disk_full",
        "session_lost",
    ]
    assert len(caplog.records) == 1
    assert "'disk_on_fire'" in caplog.records[0].getMessage()


def test_public_api_is_pinned() -> None:
    """dispatch's public names are exactly these."""
    import gymslurm.dispatch

    assert sorted(gymslurm.dispatch.__all__) == [
        "Completed",
        "EnvironmentClient",
        "Failed",
        "Http11Transport",
        "MetricsRows",
        "ModelLoad",
        "Omitted",
        "Outcome",
        "classify_exception",
        "classify_reply",
        "fetch_aggregate_metrics",
        "fetch_environment_config",
        "post_aggregate_metrics",
        "probe_answers",
        "probe_completion",
        "probe_health",
        "router_worker",
        "verify_answer",
        "verify_client",
        "watch_model_queue",
    ]


def test_absent_kind_routes_as_environment_server_failed() -> None:
    """Only the routing alias, never the canonical kind, is the generic environment_server_failed."""
    outcome, _ = run_once(200, reply(failure=failure()))
    assert isinstance(outcome, Failed)
    assert outcome.record.failure.failure_kind is None
    assert outcome.record.routing_class == "environment_server_failed"


def test_long_legacy_message_is_cut_and_kept_whole_in_diagnostics() -> None:
    """A legacy message over 2000 characters is shortened in the record and kept whole beside it."""
    message = "x" * 2500
    outcome, _ = run_once(
        200, reply(result={"_ng_failure_class": "judge_failed", "_ng_failure_message": message})
    )
    assert isinstance(outcome, Failed)
    assert len(outcome.record.failure.failure_reason) == 2000
    assert outcome.diagnostics == {"_ng_failure_message": message}


# ---------------------------------------------------------------------------------------------------
# Stale replies and protocol violations


@pytest.mark.parametrize("route_failures", [True, False], ids=["routing on", "routing off"])
def test_stale_reply_is_retryable(route_failures: bool) -> None:
    """A reply for another attempt of the same rollout is a retryable failure, routing on or off."""
    body = reply(result={"reward": 1}) | {"episode_id": {"rollout_id": EPISODE.rollout_id, "attempt": 1}}
    outcome, _ = run_once(200, body, route_failures=route_failures)
    assert isinstance(outcome, Failed)
    record = outcome.record
    assert (record.source, record.delivery, record.failure.terminal, record.failure.failure_kind) == (
        "collector",
        "delivered",
        False,
        "transport_peer_drop",
    )
    assert "stale reply" in record.failure.failure_reason


VIOLATIONS = [
    Case(
        "a reply for another rollout",
        200,
        reply(result={}) | {"episode_id": {"rollout_id": "arith-8", "attempt": 2}},
    ),
    Case(
        "a reply for another task", 200, reply(result={}) | {"task_id": {"taskset": "arith", "task_id": "8"}}
    ),
    Case(
        "another rollout even with another attempt",
        200,
        reply(result={}) | {"episode_id": {"rollout_id": "arith-8", "attempt": 0}},
    ),
    Case(
        "another task even with another attempt",
        200,
        reply(result={})
        | {
            "episode_id": {"rollout_id": "arith-7", "attempt": 0},
            "task_id": {"taskset": "arith", "task_id": "8"},
        },
    ),
    Case("no episode_id", 200, {"task_id": TASK_ID, "result": {}}),
    Case(
        "an attempt that is not an integer",
        200,
        reply(result={}) | {"episode_id": {"rollout_id": "arith-7", "attempt": "2"}},
    ),
    Case("neither result nor failure", 200, reply()),
    Case("both result and failure", 200, reply(result={"reward": 1}, failure=failure())),
    Case("a body that is not JSON", 200, b"<html>Bad Gateway</html>"),
    Case("an empty body", 200, b""),
    Case("a JSON array", 200, [1, 2]),
    Case("a result that is not an object", 200, reply(result=[1])),
    Case("a result with a reserved _ng_ key", 200, reply(result={"reward": 1, "_ng_rollout_id": "x"})),
    Case("a failure_reason over 2000 characters", 200, reply(failure=failure(failure_reason="x" * 2001))),
    Case(
        "the former 'message' name instead of failure_reason",
        200,
        reply(failure={"message": "m", "terminal": False}),
    ),
    Case("a terminal flag that is not a boolean", 200, reply(failure=failure(terminal="true"))),
    Case("a missing terminal flag", 200, reply(failure={"failure_reason": "m"})),
    Case("a stage that is not a string", 200, reply(failure=failure(stage=3))),
    Case("a failure_kind that is not a string", 200, reply(failure=failure(failure_kind=7))),
    Case("a failure that is not an object", 200, reply(failure="boom")),
    Case(
        "a legacy terminal flag that is not a boolean",
        200,
        reply(result={"_ng_failure_class": "judge_failed", "_ng_failure_terminal": "yes"}),
    ),
    Case("a reward that is text", 200, reply(result={"reward": "abc"})),
    Case("a reward that is numeric text", 200, reply(result={"reward": "1.0"})),
    Case("a reward that is a list", 200, reply(result={"reward": [1]})),
    Case("a reward that is a boolean", 200, reply(result={"reward": True})),
    Case("a response that is text (invalid_response)", 200, reply(result={"reward": 1.0, "response": "4"})),
    Case(
        "a response that is a list (invalid_response)", 200, reply(result={"reward": 1.0, "response": ["4"]})
    ),
    Case("a response that is a number (invalid_response)", 200, reply(result={"reward": 1.0, "response": 4})),
    Case("a masked result with an invalid reward", 200, reply(result={"reward": "n/a", "mask_sample": True})),
    Case(
        "a failure claiming the collector's source and delivery",
        200,
        reply(failure=failure(source="collector", delivery="not_sent")),
    ),
    Case("a failure claiming a run id", 200, reply(failure=failure(run_id="run-" + "0" * 32))),
    Case(
        "a whole failure record instead of a failure",
        200,
        reply(failure={"schema_version": 1, "failure": failure(), "source": "environment"}),
    ),
    Case(
        "a reply claiming the delivery beside its failure",
        200,
        reply(failure=failure()) | {"delivery": "not_sent"},
    ),
    Case("HTTP 404 (wrong endpoint)", 404, b"Not Found"),
    Case("HTTP 422 (request rejected)", 422, {"detail": "bad task_input"}),
    Case("HTTP 501 (no POST /run)", 501, b""),
    Case("HTTP 302 (redirects are not followed)", 302, b""),
]


@pytest.mark.parametrize("case", VIOLATIONS, ids=lambda case: case.why)
def test_violation_with_routing_is_terminal_failure(case: Case) -> None:
    """With routing on, a protocol violation is a terminal environment_protocol_violation failure."""
    outcome, _ = run_once(case.status, case.body, route_failures=True)
    assert isinstance(outcome, Failed)
    record = outcome.record
    assert (record.source, record.delivery, record.failure.terminal, record.failure.failure_kind) == (
        "collector",
        "delivered",
        True,
        "environment_protocol_violation",
    )
    assert outcome.diagnostics is not None
    assert outcome.diagnostics["http_status"] == case.status


@pytest.mark.parametrize("case", VIOLATIONS, ids=lambda case: case.why)
def test_violation_without_routing_stops_collection(case: Case) -> None:
    """With routing off, a protocol violation raises ProtocolError naming the rollout and the way out."""
    with pytest.raises(ProtocolError) as raised:
        run_once(case.status, case.body, route_failures=False)
    message = str(raised.value)
    assert "'arith-7' attempt 2" in message
    assert URL in message
    assert "+route_failures_to_sidecar=true" in message


def test_protocol_error_points_at_the_projects_own_docs() -> None:
    """The protocol-error text names a page of gymslurm's docs, never a path outside the project."""
    with pytest.raises(ProtocolError) as raised:
        run_once(200, {"not": "an episode reply"}, route_failures=False)
    message = str(raised.value)
    assert "docs/outcomes.md" in message and "shared/spec" not in message


# ---------------------------------------------------------------------------------------------------
# HTTP errors

HTTP_FAILURES = [
    # (status, source, delivery, kind, why)
    (429, "collector", "possibly_delivered", "provider_unavailable", "throttled: maybe not received"),
    (502, "collector", "possibly_delivered", "transport_peer_drop", "bad gateway: maybe not received"),
    (503, "collector", "possibly_delivered", "provider_unavailable", "unavailable: maybe not received"),
    (504, "collector", "possibly_delivered", "transport_timeout", "gateway timeout: maybe received"),
    (500, "environment", "delivered", None, "bare 500: delivered, no canonical kind"),
    (507, "environment", "delivered", None, "other 5xx: like a bare 500"),
    (408, "collector", "delivered", "transport_timeout", "408: the server answered, so delivered"),
]


@pytest.mark.parametrize(
    ("status", "source", "delivery", "kind"),
    [row[:4] for row in HTTP_FAILURES],
    ids=[row[4] for row in HTTP_FAILURES],
)
@pytest.mark.parametrize("route_failures", [True, False], ids=["routing on", "routing off"])
def test_http_errors_are_retryable_failures(
    status: int, source: str, delivery: str, kind: str | None, route_failures: bool
) -> None:
    """Gateway, throttling and server errors are non-terminal failures with their delivery evidence."""
    outcome, _ = run_once(status, b"<html>upstream error</html>", route_failures=route_failures)
    assert isinstance(outcome, Failed)
    record = outcome.record
    assert (record.source, record.delivery, record.failure.terminal, record.failure.failure_kind) == (
        source,
        delivery,
        False,
        kind,
    )
    assert outcome.diagnostics == {"http_status": status, "body": "<html>upstream error</html>"}


def test_classify_reply_is_pure() -> None:
    """classify_reply needs no client: the same bytes give the same outcome."""
    body = orjson.dumps(reply(result={"reward": 1}))
    kwargs: dict[str, Any] = {
        "episode": EPISODE,
        "task_id": TASK_ID,
        "run_id": RUN_ID,
        "route_failures": False,
    }
    assert (
        classify_reply(200, body, **kwargs) == classify_reply(200, body, **kwargs) == Completed({"reward": 1})
    )


# ---------------------------------------------------------------------------------------------------
# Exceptions

REQUEST = httpx.Request("POST", URL + "/run")
EXCEPTIONS = [
    (httpx.ConnectError("refused", request=REQUEST), "not_sent", "transport_unreachable"),
    (httpx.ConnectError("[Errno -2] Name or service not known"), "not_sent", "transport_unreachable"),
    (httpx.ConnectTimeout("connect timed out", request=REQUEST), "not_sent", "transport_unreachable"),
    (ConnectionRefusedError(111, "Connection refused"), "not_sent", "transport_unreachable"),
    (httpx.PoolTimeout("no free connection", request=REQUEST), "not_sent", "transport_local_resource"),
    (httpx.ReadTimeout("read timed out", request=REQUEST), "possibly_delivered", "transport_timeout"),
    (httpx.WriteTimeout("write timed out", request=REQUEST), "possibly_delivered", "transport_timeout"),
    (TimeoutError(), "possibly_delivered", "transport_timeout"),
    (httpx.ReadError("connection reset", request=REQUEST), "possibly_delivered", "transport_peer_drop"),
    (httpx.WriteError("broken pipe", request=REQUEST), "possibly_delivered", "transport_peer_drop"),
    (
        httpx.RemoteProtocolError("server disconnected", request=REQUEST),
        "possibly_delivered",
        "transport_peer_drop",
    ),
    (httpx.DecodingError("bad gzip", request=REQUEST), "possibly_delivered", "transport_peer_drop"),
    (ConnectionResetError(104, "reset by peer"), "possibly_delivered", "transport_peer_drop"),
]


@pytest.mark.parametrize(("exc", "delivery", "kind"), EXCEPTIONS, ids=lambda v: type(v).__name__)
def test_exception_mapping(exc: BaseException, delivery: str, kind: str) -> None:
    """Transport exceptions become non-terminal collector failures with the right delivery evidence."""
    outcome = classify_exception(exc, episode=EPISODE, run_id=RUN_ID)
    record = outcome.record
    assert (record.source, record.delivery, record.failure.failure_kind, record.failure.terminal) == (
        "collector",
        delivery,
        kind,
        False,
    )
    assert type(exc).__name__ in record.failure.failure_reason


def test_exception_reason_names_the_url() -> None:
    """The failure reason says which request failed."""
    outcome = classify_exception(
        httpx.ReadTimeout("timed out", request=REQUEST), episode=EPISODE, run_id=RUN_ID
    )
    assert outcome.record.failure.failure_reason == f"ReadTimeout POST {URL}/run: timed out"


@pytest.mark.parametrize(
    "exc",
    [
        KeyError("task_id"),
        TypeError("not serializable"),
        asyncio.CancelledError(),
        httpx.LocalProtocolError("bad header"),
        httpx.UnsupportedProtocol("ftp://"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_programming_errors_propagate_from_classify_exception(exc: BaseException) -> None:
    """Programming errors, bad URLs and cancellation are re-raised, never turned into failures."""
    with pytest.raises(type(exc)):
        classify_exception(exc, episode=EPISODE, run_id=RUN_ID)


def raising_client(exc: BaseException) -> EnvironmentClient:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return EnvironmentClient(concurrency=1, run_id=RUN_ID, transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(
    ("exc", "delivery", "kind"), EXCEPTIONS[:1] + EXCEPTIONS[5:6], ids=["connect", "read"]
)
def test_client_turns_transport_exceptions_into_failures(
    exc: BaseException, delivery: str, kind: str
) -> None:
    """EnvironmentClient.run returns the classified failure of a transport exception."""
    outcome = asyncio.run(raising_client(exc).run(URL, EPISODE, TASK))
    assert isinstance(outcome, Failed)
    assert (outcome.record.delivery, outcome.record.failure.failure_kind) == (delivery, kind)


@pytest.mark.parametrize(
    "exc", [KeyError("boom"), asyncio.CancelledError()], ids=["KeyError", "CancelledError"]
)
def test_client_lets_programming_errors_and_cancellation_propagate(exc: BaseException) -> None:
    """EnvironmentClient.run never hides a programming error or a cancellation."""
    with pytest.raises(type(exc)):
        asyncio.run(raising_client(exc).run(URL, EPISODE, TASK))


def test_bad_server_url_is_a_configuration_error() -> None:
    """A URL that is not http(s)://HOST:PORT is a ConfigError naming the setting."""
    client = EnvironmentClient(concurrency=1, run_id=RUN_ID)
    with pytest.raises(ConfigError, match="environment_server_url"):
        asyncio.run(client.run("ftp://env:1", EPISODE, TASK))


def test_concurrency_must_be_positive() -> None:
    """A concurrency below 1 is refused."""
    with pytest.raises(ValueError, match="concurrency"):
        EnvironmentClient(concurrency=0, run_id=RUN_ID)


def test_concurrency_is_bounded() -> None:
    """No more than ``concurrency`` requests are in flight at once."""
    in_flight, peak = 0, 0

    async def go() -> None:
        nonlocal in_flight, peak
        release = asyncio.Event()

        async def handler(request: httpx.Request) -> httpx.Response:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await release.wait()
            in_flight -= 1
            return httpx.Response(200, content=orjson.dumps(reply(result={})))

        client = EnvironmentClient(concurrency=3, run_id=RUN_ID, transport=httpx.MockTransport(handler))
        runs = [asyncio.create_task(client.run(URL, EPISODE, TASK)) for _ in range(10)]
        for _ in range(20):
            await asyncio.sleep(0)
        release.set()
        await asyncio.gather(*runs)

    asyncio.run(go())
    assert peak == 3


# ---------------------------------------------------------------------------------------------------
# The HTTP/1.1 transport against a real loopback server

Responder = Callable[[bytes], bytes | None]


def ok_response(body: bytes) -> bytes:
    """An echoing keep-alive answer framed by Content-Length."""
    request = json.loads(body)
    content = orjson.dumps(
        {
            "episode_id": request["episode_id"],
            "task_id": request["task"]["task_id"],
            "result": {"reward": 1.0},
        }
    )
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(content), content)


def closes_connection(answer: bytes) -> bool:
    """Whether the server must close after ``answer`` (asked to, or framed by the close itself)."""
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    return b"connection: close" in head or (b"content-length" not in head and b"chunked" not in head)


async def serve(responder: Responder) -> tuple[asyncio.Server, str, list[int]]:
    """A loopback server answering each request with ``responder(body)``; None closes the connection."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                answer = responder(await reader.readexactly(length))
                if answer is None:
                    break
                writer.write(answer)  # b"": no answer, keep the connection open
                await writer.drain()
                if answer and closes_connection(answer):
                    break
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", connections


def run_against(responder: Responder, requests: int = 1, **client_options: Any) -> tuple[list[Outcome], int]:
    """Send ``requests`` episodes one after another; return the outcomes and the connections opened."""

    async def go() -> tuple[list[Outcome], int]:
        server, url, connections = await serve(responder)
        async with server, EnvironmentClient(concurrency=1, run_id=RUN_ID, **client_options) as client:
            outcomes = [await client.run(url, EPISODE, TASK) for _ in range(requests)]
        return outcomes, len(connections)

    return asyncio.run(go())


def test_transport_keeps_the_connection_alive() -> None:
    """Sequential requests reuse one keep-alive connection."""
    outcomes, connections = run_against(ok_response, requests=3)
    assert outcomes == [Completed({"reward": 1.0})] * 3
    assert connections == 1


def test_transport_reads_chunked_answers() -> None:
    """A chunked answer is reassembled and the connection reused."""

    def chunked(body: bytes) -> bytes:
        content = ok_response(body).split(b"\r\n\r\n", 1)[1]
        half = len(content) // 2
        chunks = b"%x\r\n%s\r\n%x;ext=1\r\n%s\r\n0\r\n\r\n" % (
            half,
            content[:half],
            len(content) - half,
            content[half:],
        )
        return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks

    outcomes, connections = run_against(chunked, requests=2)
    assert outcomes == [Completed({"reward": 1.0})] * 2
    assert connections == 1


def test_transport_reads_answers_framed_by_close() -> None:
    """An answer without length is read to the end of the connection, which is then not reused."""

    def close_framed(body: bytes) -> bytes:
        return b"HTTP/1.0 200 OK\r\n\r\n" + ok_response(body).split(b"\r\n\r\n", 1)[1]

    outcomes, connections = run_against(close_framed, requests=2)
    assert outcomes == [Completed({"reward": 1.0})] * 2
    assert connections == 2


def test_transport_honours_connection_close() -> None:
    """An answer saying ``connection: close`` is not followed by reuse of its connection."""

    def closing(body: bytes) -> bytes:
        return ok_response(body).replace(b"200 OK\r\n", b"200 OK\r\nConnection: close\r\n")

    outcomes, connections = run_against(closing, requests=2)
    assert outcomes == [Completed({"reward": 1.0})] * 2
    assert connections == 2


def test_transport_drops_expired_idle_connections() -> None:
    """An idle connection older than keepalive_expiry is closed, not reused."""
    outcomes, connections = run_against(ok_response, requests=2, keepalive_expiry=0.0)
    assert outcomes == [Completed({"reward": 1.0})] * 2
    assert connections == 2


def test_connection_closed_by_server_while_idle_is_not_reused() -> None:
    """A keep-alive connection the server closed while idle is replaced, not written into."""

    async def go() -> tuple[list[Outcome], int]:
        closed, connections = asyncio.Event(), []

        async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connections.append(1)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            writer.write(ok_response(await reader.readexactly(length)))
            writer.close()
            await writer.wait_closed()
            closed.set()

        server = await asyncio.start_server(answer_once, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server, EnvironmentClient(concurrency=1, run_id=RUN_ID) as client:
            first = await client.run(url, EPISODE, TASK)
            await closed.wait()
            for _ in range(20):
                await asyncio.sleep(0)  # let the client's event loop see the FIN
            second = await client.run(url, EPISODE, TASK)
        return [first, second], len(connections)

    outcomes, connections = asyncio.run(go())
    assert outcomes == [Completed({"reward": 1.0})] * 2
    assert connections == 2


def test_server_that_hangs_up_is_possibly_delivered() -> None:
    """A server that closes after receiving the request leaves delivery possible (peer drop)."""
    (outcome,), _ = run_against(lambda body: None)
    assert isinstance(outcome, Failed)
    assert (outcome.record.delivery, outcome.record.failure.failure_kind) == (
        "possibly_delivered",
        "transport_peer_drop",
    )


def test_server_that_never_answers_is_a_timeout() -> None:
    """The read timeout gives a possibly-delivered transport_timeout failure."""

    async def go() -> Outcome:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server, EnvironmentClient(concurrency=1, run_id=RUN_ID, read_timeout=0.05) as client:
            return await client.run(url, EPISODE, TASK)

    outcome = asyncio.run(go())
    assert isinstance(outcome, Failed)
    assert (outcome.record.delivery, outcome.record.failure.failure_kind) == (
        "possibly_delivered",
        "transport_timeout",
    )


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_refused_connection_is_not_sent(scheme: str) -> None:
    """Nobody listening on the port: the request was never sent (plain and TLS transports alike)."""

    async def go() -> Outcome:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        async with EnvironmentClient(concurrency=1, run_id=RUN_ID) as client:
            return await client.run(f"{scheme}://127.0.0.1:{port}", EPISODE, TASK)

    outcome = asyncio.run(go())
    assert isinstance(outcome, Failed)
    assert (outcome.record.delivery, outcome.record.failure.failure_kind) == (
        "not_sent",
        "transport_unreachable",
    )
    assert f"ConnectError POST {scheme}://127.0.0.1:" in outcome.record.failure.failure_reason


def test_malformed_http_is_a_peer_drop() -> None:
    """Bytes that are not an HTTP answer are a possibly-delivered protocol failure of the transport."""
    (outcome,), _ = run_against(lambda body: b"SSH-2.0-OpenSSH\r\n\r\n")
    assert isinstance(outcome, Failed)
    assert outcome.record.failure.failure_kind == "transport_peer_drop"


def test_cancelled_request_propagates_and_drops_its_connection() -> None:
    """Cancelling an in-flight request raises CancelledError and never reuses its half-used connection."""

    async def go() -> int:
        received = asyncio.Event()

        def slow_then_ok(body: bytes) -> bytes | None:
            if not received.is_set():
                received.set()
                return b""  # the first request gets no answer before it is cancelled
            return ok_response(body)

        server, url, connections = await serve(slow_then_ok)
        async with server, EnvironmentClient(concurrency=1, run_id=RUN_ID) as client:
            first = asyncio.create_task(client.run(url, EPISODE, TASK))
            await received.wait()
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            assert await client.run(url, EPISODE, TASK) == Completed({"reward": 1.0})
        return len(connections)

    assert asyncio.run(go()) == 2


def test_http11_transport_speaks_httpx() -> None:
    """Http11Transport works as an httpx transport, so httpx.AsyncClient can use it."""

    async def go() -> httpx.Response:
        server, url, _ = await serve(ok_response)
        async with server, httpx.AsyncClient(transport=Http11Transport()) as client:
            return await client.post(url + "/run", json={"episode_id": {"rollout_id": "a"}, "task": TASK})

    response = asyncio.run(go())
    assert response.status_code == 200
    assert response.json()["result"] == {"reward": 1.0}


def test_flat_metrics_keeps_scalars_of_both_sections() -> None:
    """/aggregate_metrics replies flatten to the scalar entries of agent_metrics and key_metrics."""
    from gymslurm.dispatch.calls import flat_metrics

    body = {"agent_metrics": {"a": 1, "nested": {"x": 1}}, "key_metrics": {"b": "s"}, "other": {"c": 2}}
    assert flat_metrics(body) == {"a": 1, "b": "s"}


def test_a_relays_result_carries_the_sent_rows_refs_as_nemo_gyms_collector_writes_them() -> None:
    """NeMo Gym's collector copies the row's own ``agent_ref`` (with its ``type``), ``task_source`` and
    ``skills_ref`` onto the result; a flat relay's result gets them too, unless it has its own."""
    from gymslurm.dispatch.classify import Completed, with_row_refs

    row = {"agent_ref": {"type": "responses_api_agents", "name": "a"}, "task_source": "s", "q": 1}
    assert with_row_refs(Completed({"reward": 1.0}), row).result == {
        "reward": 1.0,
        "agent_ref": {"type": "responses_api_agents", "name": "a"},
        "task_source": "s",
    }
    own = Completed({"reward": 0.0, "agent_ref": {"name": "b"}})
    assert with_row_refs(own, row).result["agent_ref"] == {"name": "b"}
    bare = Completed({"reward": 0.0})
    assert with_row_refs(bare, {"q": 1}) is bare
