"""What an Environment Server's answer means: outcome types and the pure classification of replies.

:func:`classify_reply` and :func:`classify_exception` turn every HTTP answer or transport exception
into exactly one outcome: :class:`Completed`, :class:`Failed` or :class:`Omitted` (docs/outcomes.md
has the table; spec 000 "Environment Server boundary", README readings 4 and 5). No I/O here.

Delivery evidence (reading 4): a connection that could not be made (refused, DNS, connect timeout) is
``not_sent``; once bytes may have reached the server (read/write timeouts, resets, a peer that closed
mid-answer, gateway answers 429/502/503/504) it is ``possibly_delivered``; any other HTTP answer is
``delivered``. There are **no automatic transport retries**: a timeout may have run the episode, and
delivery evidence never authorizes a replay (the collector decides, with a new reserved execution).

Three wire protocols (:data:`Protocol`, the ``environment_protocol`` setting; docs/nemo-gym.md):

- ``episode`` (the default): the typed request ``{episode_id, task}``, answered by the typed envelope
  ``{episode_id, task_id, result | failure}``;
- ``legacy_agent``: NeMo Gym's legacy agent ``/run`` (the ``legacy_agent`` relay): the flat row goes out
  (``task_input`` plus ``_ng_task_index``, ``_ng_rollout_index``, ``_ng_rollout_id`` and
  ``_ng_attempt_index``, as NeMo Gym's collector sends it), and the flat verify response comes back;
- ``legacy_reply``: the typed request, answered flat (the ``single_agent_turn_legacy`` adapter).

A flat answer is read by the spec's legacy rules: ``_ng_failure_class`` (with ``_ng_failure_terminal``,
``_ng_failure_message``, ``_ng_failure_stage``, ``_ng_failure_partial_response``) is a failure, a bare
``_ng_no_persist`` an omission, anything else a result (``execute_only`` results without a reward
stay unscored results). The request's own stamps echoed back are checked (another rollout: a protocol
violation; another attempt: stale) and dropped; every other ``_ng_*`` key is refused as for a typed
result. A flat answer is never accepted from a server declared ``episode``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, get_args

import httpx
from pydantic import ValidationError

from gymslurm.dispatch.budget import _ReplyTooLarge
from gymslurm.errors import ProtocolError
from gymslurm.formats import json_object
from gymslurm.identity import redact_text, redact_value
from gymslurm.records import (
    FAILURE_KINDS,
    LEGACY_JUDGE_MARKERS,
    MAX_FAILURE_REASON,
    Delivery,
    EpisodeFailure,
    EpisodeId,
    Protocol,
    RolloutFailureRecord,
    Source,
    Stage,
)
from gymslurm.selection import is_numeric_reward


@dataclass(frozen=True)
class Completed:
    """A completed episode: the environment's result as sent (masked, unscored or measured alike)."""

    result: dict[str, Any]


@dataclass(frozen=True)
class Failed:
    """A failed episode attempt: the canonical record plus what stays outside it in the sidecar row.

    ``legacy_class`` is a legacy producer's own routing class when it differs from the canonical kind
    (``_ng_failure_legacy_class``); ``response`` a partial response kept for inspection only
    (``_ng_failure_response``); ``diagnostics`` other producer fields (``_ng_failure_diagnostics``).
    """

    record: RolloutFailureRecord
    legacy_class: str | None = None
    response: object | None = None
    diagnostics: dict[str, Any] | None = None
    # A legacy producer's result as it sent it (``_ng_failure_class`` and its placeholders): what NeMo
    # Gym 0.7.0's ``run_examples`` gives a driver, which reads the class from the dict itself.
    legacy_result: dict[str, Any] | None = None


@dataclass(frozen=True)
class Omitted:
    """An intentional omission: the environment suppressed the result and reported no failure.

    ``payload`` is a legacy ``skipped`` failure's markers (``_ng_failure_class: skipped``, terminal,
    message), saved with the omission: its disposition is omitted, and an explicit ``skipped`` entry
    of ``count_failure_classes_as_zero`` can still score it (000).
    """

    payload: dict[str, Any] | None = None


Outcome = Completed | Failed | Omitted

RUN_PATH, VERIFY_PATH = "/run", "/verify"
PROTOCOL_VIOLATION = "environment_protocol_violation"
NO_PERSIST = "_ng_no_persist"
LEGACY_CLASS, LEGACY_TERMINAL, LEGACY_MESSAGE = (
    "_ng_failure_class",
    "_ng_failure_terminal",
    "_ng_failure_message",
)
SKIPPED_CLASS = "skipped"  # a legacy producer's intentional skip: an omission with its payload (000)
LEGACY_CLASS_KINDS = {"timeout_exceeded": "agent_timeout"}  # 001: agent_timeout is the shared name
STAGES = frozenset(get_args(Stage))
FAILURE_FIELDS = frozenset({"failure_reason", "terminal", "failure_kind", "stage"})
REPLY_FIELDS = frozenset({"episode_id", "task_id", "result", "failure", NO_PERSIST, "response"})
# The fields of the collector's RolloutFailureRecord around the episode's failure: the collector
# observes them (who saw the failure, whether the request reached the server); an agent cannot choose
# them (000), so a failure that claims one is a protocol violation, not data.
COLLECTOR_OWNED_FIELDS = frozenset(
    {"source", "delivery", "run_id", "schema_version", "episode_id", "failure"}
)
OBSERVATION_FIELDS = frozenset({"source", "delivery"})
DIAGNOSTIC_BODY_CHARS = 4000

LEGACY_STAGE, LEGACY_PARTIAL = "_ng_failure_stage", "_ng_failure_partial_response"
# Keys of a legacy failure that are not copied into its diagnostics: the markers themselves (read into
# the record) and the old reward/response placeholders (spec 000: "not copied into the failure record").
LEGACY_PLACEHOLDERS = frozenset(
    {LEGACY_CLASS, LEGACY_TERMINAL, LEGACY_MESSAGE, NO_PERSIST, "reward", "response", LEGACY_PARTIAL}
)
# The stamps a flat legacy row carries (NeMo Gym's key names); echoed back, they are checked and dropped.
TASK_INDEX, ROLLOUT_INDEX, ROLLOUT_ID, ATTEMPT_INDEX = (
    "_ng_task_index",
    "_ng_rollout_index",
    "_ng_rollout_id",
    "_ng_attempt_index",
)


def request_body(
    protocol: Protocol, episode: EpisodeId, task: Mapping[str, Any], indices: tuple[int, int] = (0, 0)
) -> dict[str, Any]:
    """The ``POST /run`` body of one attempt: the typed request, or the flat legacy row.

    ``indices`` are the rollout's (task index, repeat index), stamped on a flat row as NeMo Gym does.
    """
    if protocol != "legacy_agent":
        return {"episode_id": {"rollout_id": episode.rollout_id, "attempt": episode.attempt}, "task": task}
    return {**task["task_input"], **_legacy_stamps(episode, indices)}


# What NeMo Gym's collector copies from the row it sent onto the result (0.7.0 rollout_collection:
# ``agent_ref``, ``task_source``, ``skills_ref``), so a flat relay's rows carry them as its do.
ROW_REFS = ("agent_ref", "task_source", "skills_ref")


def with_row_refs(outcome: Completed, row: Mapping[str, Any]) -> Completed:
    """A flat relay's result with the sent row's ``agent_ref``/``task_source``/``skills_ref``, as NeMo
    Gym's collector writes them (the row's own, e.g. ``{"type": ..., "name": ...}``), unless the
    result has its own (pure)."""
    refs = {key: row[key] for key in ROW_REFS if key in row and key not in outcome.result}
    return Completed({**outcome.result, **refs}) if refs else outcome


def _legacy_stamps(episode: EpisodeId, indices: tuple[int, int]) -> dict[str, Any]:
    return {
        TASK_INDEX: indices[0],
        ROLLOUT_INDEX: indices[1],
        ROLLOUT_ID: episode.rollout_id,
        ATTEMPT_INDEX: episode.attempt,
    }


# Gateway and throttling answers: the Environment Server may or may not have seen the request.
# 429 and 503 say "not now" (the serving side is overloaded or throttling) → provider_unavailable;
# 502 says the upstream answered the gateway badly or hung up → transport_peer_drop; 504 that the
# gateway gave up waiting → transport_timeout, the same evidence as our own read timeout.
GATEWAY_STATUS_KINDS = {
    429: "provider_unavailable",
    502: "transport_peer_drop",
    503: "provider_unavailable",
    504: "transport_timeout",
}
# Answered by the server but saying nothing about the episode: resending the same request cannot help.
UNSERVABLE_5XX = frozenset({501, 505})


class _BadReplyError(Exception):
    """A 2xx reply that breaks the protocol; the message says what is wrong."""


class _StaleReplyError(Exception):
    """A reply for another attempt of the same rollout and task."""

    def __init__(self, attempt: object) -> None:
        super().__init__(attempt)
        self.attempt = attempt


# ---------------------------------------------------------------------------------------------------
# Classification (pure)


def classify_reply(
    status_code: int,
    body: bytes,
    *,
    episode: EpisodeId,
    task_id: Mapping[str, Any],
    run_id: str,
    route_failures: bool,
    url: str | None = None,
    path: str = RUN_PATH,
    protocol: Protocol = "episode",
    indices: tuple[int, int] = (0, 0),
) -> Outcome:
    """The one outcome an HTTP answer to ``POST /run`` for ``episode`` stands for.

    ``path`` names the endpoint in messages (``/verify`` answers are read by the same rules);
    ``protocol`` says how the server answers (module docstring), ``indices`` what a flat row carried.
    Raises :class:`ProtocolError` for a protocol violation when ``route_failures`` is off.
    """
    call = _Call(
        episode, dict(task_id), run_id, route_failures, url, status_code, body, path, protocol, indices
    )
    return _screened(_classify(call))


def _screened(outcome: Outcome) -> Outcome:
    """What a server sent back, every secret removed before it is saved (issue 20): a failure's reason,
    response and diagnostics, an omission's payload, by value and by shape (gymslurm.redaction) — a
    server may echo a key the collector was never given ("Incorrect API key provided: V"). A
    completed result is data: the store removes only learned values from it."""
    if isinstance(outcome, Omitted) and outcome.payload:
        return Omitted(redact_value(outcome.payload))
    if not isinstance(outcome, Failed):
        return outcome
    failure = outcome.record.failure
    reason = _truncate(redact_text(failure.failure_reason))
    screened = failure.model_copy(update={"failure_reason": reason})
    record = outcome.record.model_copy(update={"failure": screened})
    response = None if outcome.response is None else redact_value(outcome.response)
    diagnostics = None if outcome.diagnostics is None else redact_value(outcome.diagnostics)
    legacy = None if outcome.legacy_result is None else redact_value(outcome.legacy_result)
    return Failed(record, outcome.legacy_class, response, diagnostics, legacy)


def _classify(call: _Call) -> Outcome:
    status_code, episode, path = call.status_code, call.episode, call.path
    if 200 <= status_code < 300:
        try:
            return _classify_2xx(call)
        except _StaleReplyError as stale:
            # Retryable whatever the routing (reading 5). Kind transport_peer_drop: this attempt's own
            # answer was lost between server and collector (a retry somewhere on the path replayed an
            # older exchange), which is what a peer drop records; it is never the environment's verdict.
            reason = (
                f"stale reply: the Environment Server answered attempt {stale.attempt!r} of rollout "
                f"{episode.rollout_id!r} to the request for attempt {episode.attempt}; this attempt's "
                "own answer was lost in transit"
            )
            return call.collector_failure(reason, "transport_peer_drop", "delivered")
        except _BadReplyError as bad:
            return call.violation(str(bad))
    if status_code in GATEWAY_STATUS_KINDS:
        reason = f"HTTP {status_code} from a gateway or the server: the request may not have reached it"
        return call.collector_failure(reason, GATEWAY_STATUS_KINDS[status_code], "possibly_delivered")
    if status_code == 408:
        return call.collector_failure(
            "HTTP 408: the server timed out reading the request", "transport_timeout", "delivered"
        )
    if 500 <= status_code < 600 and status_code not in UNSERVABLE_5XX:
        return _server_error(call)
    return call.violation(
        f"HTTP {status_code} answer to POST {path}: the server refuses the request as sent (check the "
        "Environment Server URL, and that the server speaks this protocol)"
    )


def classify_exception(
    exc: BaseException, *, episode: EpisodeId, run_id: str, url: str | None = None, path: str = RUN_PATH
) -> Failed:
    """The failure a transport exception stands for; anything that is not one is re-raised.

    Programming errors and ``asyncio.CancelledError`` are never turned into failures. ``url`` (the
    server's base URL) names the request in the reason when the exception does not carry it.
    """
    kind, delivery = _exception_evidence(exc)
    where = f"POST {url.rstrip('/')}{path}" if url else _request_url(exc)
    reason = _truncate(redact_text(" ".join(filter(None, [type(exc).__name__, where])) + f": {exc}"))
    failure = EpisodeFailure(failure_reason=reason, terminal=False, failure_kind=kind)
    record = RolloutFailureRecord(
        episode_id=episode, run_id=run_id, source="collector", delivery=delivery, failure=failure
    )
    return Failed(record, diagnostics={"exception": type(exc).__name__})


class _Call(NamedTuple):
    """One classification's inputs: what was sent and what came back (a tuple: cheap to build per reply)."""

    episode: EpisodeId
    task_id: dict[str, Any]
    run_id: str
    route_failures: bool
    url: str | None
    status_code: int
    body: bytes
    path: str = "/run"
    protocol: Protocol = "episode"
    indices: tuple[int, int] = (0, 0)

    def record(
        self,
        reason: str,
        *,
        source: Source,
        delivery: Delivery,
        terminal: bool,
        kind: str | None,
        stage: Stage | None = None,
    ) -> RolloutFailureRecord:
        failure = EpisodeFailure(
            failure_reason=_truncate(redact_text(reason)), terminal=terminal, failure_kind=kind, stage=stage
        )
        return RolloutFailureRecord(
            episode_id=self.episode, run_id=self.run_id, source=source, delivery=delivery, failure=failure
        )

    def http_diagnostics(self) -> dict[str, Any]:
        return {"http_status": self.status_code, "body": _excerpt(self.body, DIAGNOSTIC_BODY_CHARS)}

    def collector_failure(self, reason: str, kind: str, delivery: Delivery) -> Failed:
        record = self.record(reason, source="collector", delivery=delivery, terminal=False, kind=kind)
        return Failed(record, diagnostics=self.http_diagnostics())

    def violation(self, problem: str) -> Failed:
        """A terminal protocol-violation failure, or ProtocolError when routing is off."""
        if not self.route_failures:
            where = f" from {redact_text(self.url)}" if self.url else ""
            raise ProtocolError(
                f"The Environment Server reply{where} for rollout {self.episode.rollout_id!r} attempt "
                f"{self.episode.attempt} (task {self.task_id!r}) breaks the protocol: {problem}. Fix the "
                "producer (the reply shapes are in gymslurm's docs/outcomes.md), or set "
                "+route_failures_to_sidecar=true to record such replies as terminal "
                "environment_protocol_violation failures and let the other tasks continue."
            )
        record = self.record(
            f"protocol violation: {problem}",
            source="collector",
            delivery="delivered",
            terminal=True,
            kind=PROTOCOL_VIOLATION,
        )
        return Failed(record, diagnostics=self.http_diagnostics())


def _exception_evidence(exc: BaseException) -> tuple[str, Delivery]:
    """(failure_kind, delivery) for a transport exception; re-raises what is not one."""
    if isinstance(exc, _ReplyTooLarge):
        return REPLY_TOO_LARGE, "delivered"  # the server answered; the answer was refused unread
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | ConnectionRefusedError):
        return "transport_unreachable", "not_sent"
    if isinstance(exc, httpx.PoolTimeout):
        return "transport_local_resource", "not_sent"
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return "transport_timeout", "possibly_delivered"
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        raise exc  # the URL or the request we built is wrong: a configuration or programming error
    if isinstance(exc, httpx.TransportError | httpx.DecodingError | OSError):
        return "transport_peer_drop", "possibly_delivered"
    raise exc


REPLY_TOO_LARGE = "gymslurm:reply_too_large"  # namespaced: the collector's own kind (PROTOCOL.md)


def _request_url(exc: BaseException) -> str:
    try:
        return f"POST {exc.request.url}" if isinstance(exc, httpx.RequestError) else ""
    except RuntimeError:  # httpx raises when the exception carries no request
        return ""


def _classify_2xx(call: _Call) -> Outcome:
    return _classify_episode_reply(call) if call.protocol == "episode" else _classify_flat_reply(call)


def _classify_flat_reply(call: _Call) -> Outcome:
    """A legacy server's flat answer (module docstring); a typed envelope is read as one."""
    reply = _parse_object(call.body)
    if isinstance(reply.get("episode_id"), dict) and ("result" in reply or "failure" in reply):
        return _classify_episode_reply(call)
    reply = _drop_echoed_stamps(reply, call)
    if LEGACY_CLASS in reply:
        return _legacy_failure(call, reply)
    if reply.get(NO_PERSIST) is True:
        return Omitted()  # a suppression without a reported failure
    return Completed(_checked_result(reply))


def _drop_echoed_stamps(reply: dict[str, Any], call: _Call) -> dict[str, Any]:
    """The reply without the stamps of the request; raise when they name another rollout or attempt."""
    sent = _legacy_stamps(call.episode, call.indices)
    echoed = {key: reply[key] for key in sent if key in reply}
    if not echoed:
        return reply
    attempt = echoed.pop(ATTEMPT_INDEX, call.episode.attempt)
    other = {key: value for key, value in echoed.items() if value != sent[key]}
    if other:
        raise _BadReplyError(f"reply for another rollout: {other}, sent {sent}")
    if attempt != call.episode.attempt:
        raise _StaleReplyError(attempt)
    return {key: value for key, value in reply.items() if key not in sent}


def _classify_episode_reply(call: _Call) -> Outcome:
    reply = _parse_object(call.body)
    _check_identity(reply, call.episode, call.task_id)
    result, failure = reply.get("result"), reply.get("failure")
    if (result is None) == (failure is None):
        raise _BadReplyError("the reply must carry exactly one of 'result' and 'failure'")
    if failure is not None:
        return _native_failure(call, reply, failure)
    if not isinstance(result, dict):
        raise _BadReplyError(f"'result' must be a JSON object, got {type(result).__name__}")
    if LEGACY_CLASS in result:
        return _legacy_failure(call, result)
    if result.get(NO_PERSIST) is True or reply.get(NO_PERSIST) is True:
        return Omitted()  # a suppression without a reported failure
    return Completed(_checked_result(result))


def _parse_object(body: bytes) -> dict[str, Any]:
    where = f"the body {_excerpt(body, 200)!r}"
    return json_object(body, where, _BadReplyError, "the server must answer one JSON object")


def _check_identity(reply: dict[str, Any], episode: EpisodeId, task_id: dict[str, Any]) -> None:
    """Raise unless the reply names the rollout and task that were sent; stale for another attempt."""
    got_episode, got_task = reply.get("episode_id"), reply.get("task_id")
    if not isinstance(got_episode, dict) or set(got_episode) - {"rollout_id", "attempt"}:
        raise _BadReplyError(f"'episode_id' must be {{rollout_id, attempt}}, got {got_episode!r}")
    if got_episode.get("rollout_id") != episode.rollout_id:
        raise _BadReplyError(f"reply for another rollout: {got_episode.get('rollout_id')!r}")
    if got_task != task_id:
        raise _BadReplyError(f"reply for another task: task_id {got_task!r}, sent {task_id!r}")
    attempt = got_episode.get("attempt", 0)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise _BadReplyError(f"'episode_id.attempt' must be an integer >= 0, got {attempt!r}")
    if attempt != episode.attempt:
        raise _StaleReplyError(attempt)


def _native_failure(call: _Call, reply: dict[str, Any], failure: object) -> Failed:
    """The environment's own failure: kind (even absent), terminal and stage kept; extras aside."""
    if not isinstance(failure, dict):
        raise _BadReplyError(f"'failure' must be a JSON object, got {type(failure).__name__}")
    claimed = sorted(COLLECTOR_OWNED_FIELDS.intersection(failure) | OBSERVATION_FIELDS.intersection(reply))
    if claimed:
        raise _BadReplyError(
            f"the failure claims the collector-owned record fields {claimed}: the collector observes "
            "who saw a failure and whether the request was delivered; report only failure_reason, "
            "terminal, failure_kind and stage"
        )
    extra = {key: value for key, value in failure.items() if key not in FAILURE_FIELDS}
    response = extra.pop("response", reply.get("response"))
    extra.pop(NO_PERSIST, None)  # a reported failure is saved even when suppression was asked (spec 000)
    stage = failure.get("stage")
    if isinstance(stage, str) and stage not in STAGES:
        extra["stage"] = stage  # "Unknown stages remain unset" (spec 000); the raw value is kept
        stage = None
    fields = {key: value for key, value in failure.items() if key in FAILURE_FIELDS} | {"stage": stage}
    try:
        canonical = EpisodeFailure.model_validate(fields, strict=True)
    except ValidationError as exc:
        raise _BadReplyError(f"'failure' breaks the EpisodeFailure schema: {_first_error(exc)}") from None
    envelope = {key: value for key, value in reply.items() if key not in REPLY_FIELDS}
    record = RolloutFailureRecord(
        episode_id=call.episode,
        run_id=call.run_id,
        source="environment",
        delivery="delivered",
        failure=canonical,
    )
    return Failed(record, response=response, diagnostics=(envelope | extra) or None)


def _legacy_failure(call: _Call, result: dict[str, Any]) -> Failed | Omitted:
    """A legacy result tagged ``_ng_failure_class``: converted explicitly, placeholders dropped.

    ``skipped`` is an intentional omission that carries its failure payload, not a failure (000).
    """
    legacy_class, terminal = result[LEGACY_CLASS], result.get(LEGACY_TERMINAL, False)
    message = result.get(LEGACY_MESSAGE)
    if not isinstance(legacy_class, str) or not legacy_class:
        raise _BadReplyError(f"'{LEGACY_CLASS}' must be a non-empty string, got {legacy_class!r}")
    if not isinstance(terminal, bool):
        raise _BadReplyError(f"'{LEGACY_TERMINAL}' must be a boolean, got {terminal!r}")
    if message is not None and not isinstance(message, str):
        raise _BadReplyError(f"'{LEGACY_MESSAGE}' must be a string, got {message!r}")
    if legacy_class == SKIPPED_CLASS:
        payload = {LEGACY_CLASS: legacy_class, LEGACY_TERMINAL: terminal}
        return Omitted(payload | ({LEGACY_MESSAGE: message[:MAX_FAILURE_REASON]} if message else {}))
    kind: str | None = LEGACY_CLASS_KINDS.get(legacy_class, legacy_class)
    kind = kind if kind in FAILURE_KINDS or ":" in legacy_class else None
    reason = message or f"legacy producer reported failure class {legacy_class!r} without a message"
    diagnostics = {key: value for key, value in result.items() if key not in LEGACY_PLACEHOLDERS}
    stage = result.get(LEGACY_STAGE)
    if stage in STAGES:
        diagnostics.pop(LEGACY_STAGE)  # kept in the record; an unknown stage stays here (spec 000)
    if len(reason) > MAX_FAILURE_REASON:
        diagnostics[LEGACY_MESSAGE] = reason  # the canonical reason is cut; the whole text stays here
    record = call.record(
        reason,
        source="environment",
        delivery="delivered",
        terminal=terminal,
        kind=kind,
        stage=stage if stage in STAGES else None,
    )
    response = result.get("response")
    return Failed(
        record,
        legacy_class=legacy_class if legacy_class != record.routing_class else None,
        response=response if response is not None else result.get(LEGACY_PARTIAL),
        diagnostics=diagnostics or None,
        legacy_result=result,
    )


def _checked_result(result: dict[str, Any]) -> dict[str, Any]:
    """A completed result as sent, once it is valid: no reserved keys, and a reward that is a number.

    A reward may be absent or null (unscored, no zero invented) but a present one must be a real,
    finite number: ``"abc"``, ``[1]``, ``true`` or ``"1.0"`` are malformed, never a score or an
    unscored completion (000: "Present invalid rewards ... still fail validation").
    """
    reward, response = result.get("reward"), result.get("response")
    if response is not None and type(response) is not dict:
        raise _BadReplyError(
            f"invalid_response: 'response' must be an object (the model's response) or absent, got a "
            f"{type(response).__name__}: {response!r:.100}"
        )
    if reward is not None and not is_numeric_reward(reward):
        raise _BadReplyError(
            f"'reward' must be a number (or absent / null for an unscored result), got {reward!r:.100}"
        )
    if result.get(NO_PERSIST) is False:
        result = {key: value for key, value in result.items() if key != NO_PERSIST}
    reserved = sorted(key for key in result if key.startswith("_ng_") and key not in LEGACY_JUDGE_MARKERS)
    if reserved:
        raise _BadReplyError(
            f"the result carries reserved keys {reserved}: only the collector writes _ng_* fields "
            f"(besides the legacy judge markers {sorted(LEGACY_JUDGE_MARKERS)})"
        )
    return result


def _server_error(call: _Call) -> Failed:
    """A 5xx answer: the environment's own well-formed failure if it sent one, else a bare failure."""
    with contextlib.suppress(_BadReplyError, _StaleReplyError):
        outcome = _classify_2xx(call)
        if isinstance(outcome, Failed):
            return outcome
    reason = f"HTTP {call.status_code} from the Environment Server: {_excerpt(call.body, 500)}"
    record = call.record(reason, source="environment", delivery="delivered", terminal=False, kind=None)
    return Failed(record, diagnostics=call.http_diagnostics())


def _excerpt(body: bytes, limit: int) -> str:
    text = body[: limit * 4].decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "…"


def _truncate(reason: str) -> str:
    return reason if len(reason) <= MAX_FAILURE_REASON else reason[: MAX_FAILURE_REASON - 1] + "…"


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "failure"
    return f"{where}: {error['msg']} (got {error.get('input')!r:.100})"
