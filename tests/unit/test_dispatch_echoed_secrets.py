"""What a server echoes back is screened before it is saved (issue 20, "scrub by value").

A key only the server knows (its ``servers[].env``, which the collector is never given) comes back
in its error text — "Incorrect API key provided: V", as OpenAI's API answers. The collector cannot
remove it by value, so the shape table is applied to everything of a failure that is saved: the
reason, the response, the diagnostics (an HTTP error's body), a legacy failure's whole message.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gymslurm.dispatch import Completed, Failed, Omitted, classify_reply
from gymslurm.records import EpisodeId
from gymslurm.redaction import REDACTED, forget_all

KEY = "sk-proj-ECHOED0canary0only0the0server0knows"
OPENAI_ERROR = f"Incorrect API key provided: {KEY}. You can find your API key at https://platform/keys."
EPISODE = EpisodeId(rollout_id="arith-7", attempt=0)
TASK_ID = {"taskset": "arith", "task_id": "7"}
HEAD = {"episode_id": {"rollout_id": "arith-7", "attempt": 0}, "task_id": TASK_ID}
ERROR_BODY = {"error": {"message": OPENAI_ERROR, "type": "invalid_request_error", "code": "invalid_api_key"}}

LONG = OPENAI_ERROR * 20  # over MAX_FAILURE_REASON: kept whole in the diagnostics
REFUSED = {"failure_reason": "policy refused", "terminal": False}
ECHOES = {
    "a native failure's reason": (200, {**HEAD, "failure": {**REFUSED, "failure_reason": OPENAI_ERROR}}),
    "a native failure's response": (200, {**HEAD, "failure": {**REFUSED, "response": ERROR_BODY}}),
    "a native failure's extra fields": (200, {**HEAD, "failure": {**REFUSED, "upstream": OPENAI_ERROR}}),
    "an HTTP 500 body": (500, ERROR_BODY),
    "a legacy failure's long message": (
        200,
        {**HEAD, "result": {"_ng_failure_class": "judge_failed", "_ng_failure_message": LONG}},
    ),
    "a legacy failure's response": (
        200,
        {**HEAD, "result": {"_ng_failure_class": "judge_failed", "response": ERROR_BODY}},
    ),
    "a legacy skip's message": (
        200,
        {**HEAD, "result": {"_ng_failure_class": "skipped", "_ng_failure_message": OPENAI_ERROR}},
    ),
}


def _classify(status: int, body: dict[str, Any]) -> Any:
    forget_all()  # the collector never learned the server's key
    return classify_reply(
        status,
        orjson.dumps(body),
        episode=EPISODE,
        task_id=TASK_ID,
        run_id="r",
        route_failures=True,
        protocol="legacy_reply",
    )


@pytest.mark.parametrize("status, body", ECHOES.values(), ids=ECHOES.keys())
def test_a_key_a_server_echoes_is_not_in_what_the_collector_saves(status: int, body: dict[str, Any]) -> None:
    """Whatever part of a failure or omission carries the echoed key, what is saved holds none of it."""
    outcome = _classify(status, body)
    assert isinstance(outcome, Failed | Omitted)
    saved = repr(outcome)
    assert KEY not in saved and REDACTED in saved


def test_a_failure_keeps_what_is_not_a_secret() -> None:
    """Screening removes the key only: the reason's text and the response's other fields stay."""
    outcome = _classify(200, ECHOES["a native failure's response"][1])
    assert isinstance(outcome, Failed)
    assert outcome.record.failure.failure_reason == "policy refused"
    error = outcome.response["error"]  # type: ignore[index]
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
    assert error["message"].startswith(f"Incorrect API key provided: {REDACTED}")
    assert error["message"].endswith("You can find your API key at https://platform/keys.")


def test_a_completed_result_is_saved_as_sent() -> None:
    """A result is data: no shape rule rewrites it (only learned values are removed, by the store)."""
    result = {"reward": 1.0, "response": {"output_text": "api_key=abcdef123 is a string the model wrote"}}
    assert _classify(200, {**HEAD, "result": result}) == Completed(result)
