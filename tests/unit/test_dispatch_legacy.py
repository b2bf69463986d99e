"""NeMo Gym's legacy protocols: the flat row out (``legacy_agent``), the flat answer back (both legacy modes).

Spec 000's legacy rules applied to a flat answer: ``_ng_failure_class`` markers are a failure with their
placeholders dropped, a bare ``_ng_no_persist`` is an omission, ``execute_only`` results stay unscored
results, and only the collector writes ``_ng_*`` keys. Rows go through :class:`EnvironmentClient` with
``httpx.MockTransport``, so the request body each protocol builds is checked too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from gymslurm.dispatch import Completed, EnvironmentClient, Failed, Omitted, Outcome
from gymslurm.dispatch.classify import Protocol
from gymslurm.errors import ProtocolError
from gymslurm.records import EpisodeId

RUN_ID = "run-" + "0" * 32
EPISODE = EpisodeId(rollout_id="weather-3-r1", attempt=2)
TASK_ID = {"taskset": "weather", "task_id": "3"}
ROW = {"responses_create_params": {"input": "what's it like in sf?"}, "expected": "cold"}
TASK = {"task_id": TASK_ID, "task_input": ROW}
INDICES = (3, 1)
STAMPS = {
    "_ng_task_index": 3,
    "_ng_rollout_index": 1,
    "_ng_rollout_id": "weather-3-r1",
    "_ng_attempt_index": 2,
}
VERIFY_RESPONSE = {**ROW, "response": {"output": ["It is cold in sf."]}, "reward": 1.0}


def run_once(
    protocol: Protocol, status: int, body: dict[str, Any] | bytes, *, route_failures: bool = True
) -> tuple[Outcome, dict[str, Any]]:
    """Send TASK for EPISODE with ``protocol`` to a MockTransport answering ``status``/``body``."""
    sent: list[dict[str, Any]] = []
    content = body if isinstance(body, bytes) else orjson.dumps(body)

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(orjson.loads(request.content))
        return httpx.Response(status, content=content)

    async def go() -> Outcome:
        transport = httpx.MockTransport(handler)
        client = EnvironmentClient(
            concurrency=1,
            run_id=RUN_ID,
            route_failures=route_failures,
            transport=transport,
            protocol=protocol,
        )
        async with client:
            return await client.run("http://env.test:1", EPISODE, TASK, indices=INDICES)

    outcome = asyncio.run(go())
    return outcome, sent[0]


# --- what goes out -------------------------------------------------------------------------------


def test_legacy_agent_sends_the_flat_row_with_nemo_gyms_stamps() -> None:
    """legacy_agent: the row itself plus _ng_task_index/_ng_rollout_index/_ng_rollout_id/_ng_attempt_index."""
    _, sent = run_once("legacy_agent", 200, VERIFY_RESPONSE)
    assert sent == {**ROW, **STAMPS}


@pytest.mark.parametrize("protocol", ["episode", "legacy_reply"])
def test_typed_request_for_episode_and_legacy_reply(protocol: Protocol) -> None:
    """episode and legacy_reply send the typed request {episode_id, task}."""
    _, sent = run_once(protocol, 200, VERIFY_RESPONSE)
    assert sent == {"episode_id": {"rollout_id": "weather-3-r1", "attempt": 2}, "task": TASK}


# --- what comes back -----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["legacy_agent", "legacy_reply"])
def test_a_flat_verify_response_is_a_result(protocol: Protocol) -> None:
    """The flat verify response is the result as sent (the adapter's agent_ref included)."""
    answer = {**VERIFY_RESPONSE, "agent_ref": {"name": "weather_agent"}}
    outcome, _ = run_once(protocol, 200, answer)
    assert outcome == Completed(answer)


def test_echoed_stamps_are_dropped_from_the_result() -> None:
    """A relay echoing the request's own stamps: they are checked, then dropped (the store re-stamps)."""
    outcome, _ = run_once("legacy_agent", 200, {**VERIFY_RESPONSE, **STAMPS})
    assert outcome == Completed(VERIFY_RESPONSE)


def test_an_execute_only_result_without_reward_stays_a_result() -> None:
    """Older producers' execute_only=true results are completed and unscored, never failures (spec 000)."""
    answer = {**ROW, "execute_only": True, "response": {"output": []}}
    outcome, _ = run_once("legacy_agent", 200, answer)
    assert outcome == Completed(answer)


@pytest.mark.parametrize("protocol", ["legacy_agent", "legacy_reply"])
def test_a_bare_no_persist_answer_is_an_omission(protocol: Protocol) -> None:
    """A bare _ng_no_persist flat answer is an intentional omission."""
    outcome, _ = run_once(protocol, 200, {**ROW, "_ng_no_persist": True})
    assert outcome == Omitted()


ADAPTER_FAILURE = {
    "_ng_failure_class": "environment_server_failed",
    "_ng_failure_terminal": False,
    "_ng_failure_message": "agent session seed failed",
    "_ng_failure_stage": "seed",
    "_ng_failure_partial_response": {"output": ["half"]},
    "agent_ref": {"name": "weather_agent"},
}


def test_the_adapters_failure_markers_are_a_failure_with_stage_and_partial_response() -> None:
    """The adapter's _ng_failure_*: reason, terminal and stage in the record, partial response aside."""
    outcome, _ = run_once("legacy_reply", 200, ADAPTER_FAILURE)
    assert isinstance(outcome, Failed)
    failure = outcome.record.failure
    assert failure.failure_reason == "agent session seed failed"
    assert (failure.terminal, failure.stage) == (False, "seed")
    assert failure.failure_kind is None  # the generic routing label is never invented as the kind
    assert outcome.record.routing_class == "environment_server_failed" and outcome.legacy_class is None
    assert outcome.response == {"output": ["half"]}
    assert outcome.diagnostics == {"agent_ref": {"name": "weather_agent"}}


def test_a_relayed_legacy_failure_keeps_its_class_and_drops_placeholders() -> None:
    """A legacy agent's _ng_failure_class maps to the shared kind; reward/response placeholders dropped."""
    answer = {
        "_ng_failure_class": "timeout_exceeded",
        "_ng_failure_terminal": True,
        "_ng_failure_message": "agent ran out of time",
        "reward": 0.0,
        "response": None,
    }
    outcome, _ = run_once("legacy_agent", 200, answer)
    assert isinstance(outcome, Failed)
    assert outcome.record.failure.failure_kind == "agent_timeout" and outcome.record.failure.terminal is True
    assert outcome.legacy_class == "timeout_exceeded" and outcome.diagnostics is None


def test_a_legacy_failure_in_a_5xx_answer_is_that_failure() -> None:
    """An HTTP 500 whose body carries _ng_failure_* markers is the producer's own failure."""
    outcome, _ = run_once("legacy_agent", 500, ADAPTER_FAILURE)
    assert isinstance(outcome, Failed)
    assert outcome.record.failure.failure_reason == "agent session seed failed"


def test_other_reserved_keys_in_a_flat_answer_are_a_violation() -> None:
    """Only the collector writes _ng_* fields: a flat answer with another one is a protocol violation."""
    outcome, _ = run_once("legacy_agent", 200, {**VERIFY_RESPONSE, "_ng_run_id": "forged"})
    assert isinstance(outcome, Failed)
    assert outcome.record.failure.failure_kind == "environment_protocol_violation"


def test_echoed_stamps_of_another_rollout_are_a_violation() -> None:
    """A flat answer naming another rollout (its echoed _ng_task_index differs) breaks the protocol."""
    with pytest.raises(ProtocolError, match="another rollout"):
        run_once("legacy_agent", 200, {**VERIFY_RESPONSE, "_ng_task_index": 4}, route_failures=False)


def test_an_echoed_other_attempt_is_a_stale_retryable_failure() -> None:
    """A flat answer echoing another _ng_attempt_index is stale: retryable, not the environment's verdict."""
    outcome, _ = run_once("legacy_agent", 200, {**VERIFY_RESPONSE, "_ng_attempt_index": 1})
    assert isinstance(outcome, Failed)
    failure = outcome.record.failure
    assert failure.failure_kind == "transport_peer_drop" and not failure.terminal


def test_a_typed_envelope_from_a_legacy_server_is_read_as_one() -> None:
    """A server declared legacy that answers the typed envelope: read by the typed rules."""
    envelope = {
        "episode_id": {"rollout_id": "weather-3-r1", "attempt": 2},
        "task_id": TASK_ID,
        "result": {"reward": 0.5},
    }
    outcome, _ = run_once("legacy_reply", 200, envelope)
    assert outcome == Completed({"reward": 0.5})


def test_a_flat_answer_from_a_typed_server_stays_a_violation() -> None:
    """Never silently for a typed server: protocol episode refuses a flat answer."""
    with pytest.raises(ProtocolError, match="episode_id"):
        run_once("episode", 200, {**VERIFY_RESPONSE, "agent_ref": {"name": "a"}}, route_failures=False)


def test_a_422_from_the_legacy_agent_is_a_violation() -> None:
    """The HTTP status rules are the typed protocol's: a 422 refusal is a protocol violation."""
    outcome, _ = run_once("legacy_agent", 422, b'{"detail": "responses_create_params missing"}')
    assert isinstance(outcome, Failed) and outcome.record.failure.terminal is True
