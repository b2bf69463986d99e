"""Fault injection: which fault an episode attempt gets, and the exact reply each fault produces.

Two ways to ask for faults, for tests and demos:
- **per task**: ``task_input["_demo_fault"] = NAME`` scripts exactly what one task does;
  ``_demo_fault_attempts = k`` limits it to attempts ``< k`` (then the task answers normally, so a
  resume test sees the retry succeed); a list ``[NAME | null, ...]`` scripts one fault per attempt
  (attempt ``i`` gets item ``i``, ``null`` and attempts past the end answer normally);
  ``_demo_latency_ms`` adds latency; ``_demo_failure_kind`` replaces the failure kind of a failure
  or masked fault. A scripted task never gets a rate fault. ``_demo_verify_fault`` (one of
  :data:`VERIFY_FAULTS`) is what ``POST /verify`` answers instead of a grade; ``/run`` ignores it.
- **by rates** (CLI flags): one uniform draw per ``(seed, rollout_id, attempt)`` falls into the
  cumulative rate intervals in :data:`RATE_ORDER`; the same attempt always gets the same fault, a
  new attempt draws afresh.

Every reply is what a real (misbehaving) NeMo Gym Environment Server could send, see FAULTS and
docs/demo-server.md. ``die`` is returned as an action (``Reply.die``): the HTTP layer performs it.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gymslurm.demo.arith import response_object
from gymslurm.demo.messages import JSON, TEXT, Episode, Reply, json_reply
from gymslurm.records import MAX_FAILURE_REASON

# name -> what the server does. The order is the order of the docs.
FAULTS: dict[str, str] = {
    "retryable": "non-terminal failure, failure_kind session_lost, stage seed",
    "terminal": "terminal failure, failure_kind agent_command_not_allowed, stage agent",
    "unspecified": "non-terminal failure without failure_kind or stage",
    "admission": "non-terminal failure at stage admission (an admission timeout), no failure_kind",
    "kill_shaped": "non-terminal failure, failure_kind kill_shaped, plus top-level _ng_no_persist: true",
    "masked": "result with mask_sample true, failure_kind verifier_error, no answer and no reward",
    "masked_kept": "result with mask_sample true, failure_kind verifier_error, the answer kept, no reward",
    "unscored": "result with the answer but without reward",
    "omit": 'bare result {"_ng_no_persist": true}: an intentional omission',
    "malformed": "reply with neither result nor failure (breaks the schema)",
    "long_reason": f"failure whose failure_reason is over {MAX_FAILURE_REASON} chars (breaks the schema)",
    "not_json": "HTTP 200 whose body is not JSON",
    "wrong_task": "normal result for another task id (a protocol violation)",
    "stale": "normal result carrying another attempt of the same rollout (attempt-1, or 1 for attempt 0)",
    "http500": "HTTP 500 Internal Server Error, plain text",
    "http503": "HTTP 503 with Retry-After: 1",
    "http429": "HTTP 429 with Retry-After: 1",
    "slow": "normal result after _demo_latency_ms (default 1000 ms) on top of --latency-ms",
    "die": "the process exits at once (os._exit) after receiving the request, without answering",
    "judge_failed": "legacy judge failure (_ng_failure_class judge_failed) keeping the answer in response",
    "rejected_key": "non-terminal provider_unavailable failure echoing the server's own API key "
    "(DEMO_API_KEY) as OpenAI refuses one, in failure_reason and response",
}

# The faults the --<name>-rate flags draw, in the order their intervals are laid out on [0, 1).
# Flags are --<name with dashes>-rate. New faults go at the end, so old seeds keep their draws.
RATE_ORDER: tuple[str, ...] = (
    "retryable",
    "terminal",
    "masked",
    "unscored",
    "omit",
    "malformed",
    "stale",
    "http503",
    "unspecified",
    "admission",
    "kill_shaped",
    "masked_kept",
    "wrong_task",
    "http500",
    "http429",
    "judge_failed",
)
SLOW_DEFAULT_MS = 1000.0
FAULT_FIELD = "_demo_fault"
ATTEMPTS_FIELD = "_demo_fault_attempts"
LATENCY_FIELD = "_demo_latency_ms"
KIND_FIELD = "_demo_failure_kind"
VERIFY_FAULT_FIELD = "_demo_verify_fault"

# What ``POST /verify`` can be told to do instead of grading (task field ``_demo_verify_fault``).
VERIFY_FAULTS: dict[str, str] = {
    "judge_failed": "non-terminal failure, failure_kind judge_failed, stage verification (the judge is down)",
    "http503": "HTTP 503 with Retry-After: 1",
    "malformed": "reply with neither result nor failure (breaks the schema)",
}

Rates = tuple[tuple[str, float], ...]


def rates_problem(rates: Rates) -> str | None:
    """Why a rate table cannot be used (unknown fault, rate outside [0, 1], sum over 1), or None."""
    for name, rate in rates:
        if name not in FAULTS:
            return f"unknown fault {name!r}; known faults: {', '.join(FAULTS)}"
        if not 0.0 <= rate <= 1.0:
            return f"the {name} rate must be within [0, 1], got {rate}"
    total = sum(rate for _, rate in rates)
    if total > 1.0 + 1e-9:
        return f"the fault rates add up to {total:g}, more than 1: lower some --*-rate flags"
    return None


def task_fault_problems(task_input: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``_demo_*`` fields of a task input that are malformed, with what is wrong with each."""
    problems: list[tuple[str, str]] = []
    if FAULT_FIELD in task_input:
        problem = _fault_script_problem(task_input[FAULT_FIELD])
        if problem:
            problems.append((FAULT_FIELD, problem))
    verify = task_input.get(VERIFY_FAULT_FIELD)
    if VERIFY_FAULT_FIELD in task_input and not (isinstance(verify, str) and verify in VERIFY_FAULTS):
        known = ", ".join(VERIFY_FAULTS)
        problems.append((VERIFY_FAULT_FIELD, f"unknown /verify fault {verify!r}; known: {known}"))
    attempts = task_input.get(ATTEMPTS_FIELD)
    if ATTEMPTS_FIELD in task_input and not _non_negative_int(attempts):
        problems.append((ATTEMPTS_FIELD, f"must be an integer >= 0, got {attempts!r}"))
    latency = task_input.get(LATENCY_FIELD)
    if LATENCY_FIELD in task_input and not _non_negative_number(latency):
        problems.append((LATENCY_FIELD, f"must be a number of milliseconds >= 0, got {latency!r}"))
    kind = task_input.get(KIND_FIELD)
    if KIND_FIELD in task_input and not (isinstance(kind, str) and kind):
        problems.append((KIND_FIELD, f"must be a non-empty string, got {kind!r}"))
    return problems


def _fault_script_problem(fault: object) -> str | None:
    """Why a ``_demo_fault`` value is unusable: a known name, or a list of known names and nulls."""
    names = fault if isinstance(fault, list) else [fault]
    for name in names:
        if name is None and isinstance(fault, list):
            continue
        if not (isinstance(name, str) and name in FAULTS):
            known = ", ".join(FAULTS)
            return f"unknown fault {name!r} (a name, or a list of names and nulls); known: {known}"
    return None


def _non_negative_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _non_negative_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value >= 0


def choose_fault(task_input: dict[str, Any], attempt: int, draw: float, rates: Rates) -> str | None:
    """The fault of one attempt: the task's scripted fault if it has one, else the rates' draw."""
    if FAULT_FIELD in task_input:
        limit = task_input.get(ATTEMPTS_FIELD)
        if limit is not None and attempt >= limit:
            return None
        script = task_input[FAULT_FIELD]
        if isinstance(script, list):
            return script[attempt] if attempt < len(script) else None
        return str(script)
    edge = 0.0
    for name, rate in rates:
        edge += rate
        if draw < edge:
            return name
    return None


def delay_seconds(fault: str | None, task_input: dict[str, Any], latency_ms: float) -> float:
    """How long to wait before answering: the server's latency, the task's, and the ``slow`` default."""
    task_ms = task_input.get(LATENCY_FIELD)
    if task_ms is None and fault == "slow":
        task_ms = SLOW_DEFAULT_MS
    return (latency_ms + (task_ms or 0.0)) / 1000.0


def result_reply(episode: Episode, result: dict[str, Any], **actions: Any) -> Reply:
    """A 200 reply carrying ``result`` for this episode."""
    payload = {"episode_id": episode.episode_id, "task_id": episode.task_id, "result": result}
    return json_reply(200, payload, **actions)


def _failure_payload(
    episode: Episode, reason: str, terminal: bool, kind: str | None, stage: str | None
) -> dict[str, Any]:
    failure: dict[str, Any] = {"failure_reason": reason, "terminal": terminal}
    kind = episode.task_input.get(KIND_FIELD, kind)
    if kind is not None:
        failure["failure_kind"] = kind
    if stage is not None:
        failure["stage"] = stage
    return {"episode_id": episode.episode_id, "task_id": episode.task_id, "failure": failure}


def _failure(episode: Episode, reason: str, terminal: bool, kind: str | None, stage: str | None) -> Reply:
    return json_reply(200, _failure_payload(episode, reason, terminal, kind, stage))


def provider_failure(episode: Episode, reason: str) -> Reply:
    """The model server (``--policy-url``) did not answer: a non-terminal ``provider_unavailable``."""
    return _failure(episode, reason[:500], False, "provider_unavailable", "agent")


def _reason(name: str) -> str:
    return f"demo-server: injected fault {name!r}: {FAULTS[name]}"


def _masked(episode: Episode, answer: str, expected: str, keep_answer: bool) -> Reply:
    result: dict[str, Any] = {
        "mask_sample": True,
        "failure_kind": episode.task_input.get(KIND_FIELD, "verifier_error"),
        "expected_answer": expected,
    }
    if keep_answer:
        result["response"] = response_object(answer)
    return result_reply(episode, result)


def _judge_failed(episode: Episode, answer: str, expected: str) -> Reply:
    """A legacy judge-failsafe result: the judge could not grade, the generated answer is kept."""
    result = {
        "_ng_failure_class": "judge_failed",
        "_ng_failure_terminal": False,
        "_ng_failure_message": _reason("judge_failed"),
        "response": response_object(answer),
        "expected_answer": expected,
    }
    return result_reply(episode, result)


def _rejected_key(episode: Episode, api_key: str) -> Reply:
    """The policy's provider refused the server's key and said which: the text OpenAI answers with."""
    refusal = f"Incorrect API key provided: {api_key}. You can find your API key at https://example/keys."
    reason = f"demo-server: injected fault 'rejected_key': the policy provider answered 401: {refusal}"
    payload = _failure_payload(episode, reason, False, "provider_unavailable", "agent")
    payload["failure"]["response"] = {"error": {"message": refusal, "code": "invalid_api_key"}}
    return json_reply(200, payload)


def _kill_shaped(episode: Episode) -> Reply:
    payload = _failure_payload(episode, _reason("kill_shaped"), False, "kill_shaped", None)
    payload["_ng_no_persist"] = True
    return json_reply(200, payload)


def _long_reason(episode: Episode) -> Reply:
    reason = _reason("long_reason") + " " + "x" * MAX_FAILURE_REASON
    return _failure(episode, reason, False, "session_lost", "agent")


def _retry_later(status: int) -> Reply:
    detail = {"detail": f"demo-server: injected HTTP {status}; retry later"}
    return json_reply(status, detail, headers=((b"Retry-After", b"1"),))


def _other_task(episode: Episode, result: dict[str, Any]) -> Reply:
    other = {**episode.task_id, "task_id": f"{episode.task_id['task_id']}-other"}
    return json_reply(200, {"episode_id": episode.episode_id, "task_id": other, "result": result})


def _stale(episode: Episode, result: dict[str, Any]) -> Reply:
    attempt = episode.attempt - 1 if episode.attempt > 0 else 1
    stale_id = {"rollout_id": episode.rollout_id, "attempt": attempt}
    return json_reply(200, {"episode_id": stale_id, "task_id": episode.task_id, "result": result})


# fault -> builder(episode, answer, expected, graded result). "slow" and None answer normally.
_BUILDERS: dict[str, Callable[[Episode, str, str, dict[str, Any]], Reply]] = {
    "retryable": lambda e, a, x, r: _failure(e, _reason("retryable"), False, "session_lost", "seed"),
    "terminal": lambda e, a, x, r: _failure(
        e, _reason("terminal"), True, "agent_command_not_allowed", "agent"
    ),
    "unspecified": lambda e, a, x, r: _failure(e, _reason("unspecified"), False, None, None),
    "admission": lambda e, a, x, r: _failure(e, _reason("admission"), False, None, "admission"),
    "kill_shaped": lambda e, a, x, r: _kill_shaped(e),
    "masked": lambda e, a, x, r: _masked(e, a, x, keep_answer=False),
    "masked_kept": lambda e, a, x, r: _masked(e, a, x, keep_answer=True),
    "unscored": lambda e, a, x, r: result_reply(e, {"response": response_object(a), "expected_answer": x}),
    "omit": lambda e, a, x, r: result_reply(e, {"_ng_no_persist": True}),
    "malformed": lambda e, a, x, r: json_reply(200, {"episode_id": e.episode_id, "task_id": e.task_id}),
    "long_reason": lambda e, a, x, r: _long_reason(e),
    "not_json": lambda e, a, x, r: Reply(200, b"demo-server: injected fault 'not_json'", JSON),
    "wrong_task": lambda e, a, x, r: _other_task(e, r),
    "stale": lambda e, a, x, r: _stale(e, r),
    "http500": lambda e, a, x, r: Reply(500, b"Internal Server Error", TEXT),
    "http503": lambda e, a, x, r: _retry_later(503),
    "http429": lambda e, a, x, r: _retry_later(429),
    "die": lambda e, a, x, r: Reply(0, b"", die=True),
    "judge_failed": lambda e, a, x, r: _judge_failed(e, a, x),
}


def episode_reply(
    fault: str | None,
    episode: Episode,
    answer: str,
    expected: str,
    result: dict[str, Any],
    *,
    api_key: str = "",
) -> Reply:
    """The reply to one episode attempt given its fault (None: the graded ``result``); ``api_key`` is
    the server's own key, which ``rejected_key`` echoes."""
    if fault == "rejected_key":
        return _rejected_key(episode, api_key)
    builder = _BUILDERS.get(fault) if fault is not None else None
    return builder(episode, answer, expected, result) if builder else result_reply(episode, result)


def verify_fault_reply(fault: str, episode: Episode) -> Reply:
    """The reply ``POST /verify`` sends for a ``_demo_verify_fault`` instead of a grade."""
    if fault == "judge_failed":
        reason = f"demo-server: injected /verify fault 'judge_failed': {VERIFY_FAULTS['judge_failed']}"
        return _failure(episode, reason, False, "judge_failed", "verification")
    if fault == "http503":
        return _retry_later(503)
    return json_reply(200, {"episode_id": episode.episode_id, "task_id": episode.task_id})
