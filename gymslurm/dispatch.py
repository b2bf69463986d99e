"""The only module that speaks HTTP: ``POST /run`` to an Environment Server, and what the answer means.

(Also ``POST /verify``, judge-only re-grading of a saved answer: :func:`verify_answer`, answered and
classified exactly like ``/run``; synchronous and sequential, see its docstring.)

Two halves. The pure half, :func:`classify_reply` and :func:`classify_exception`, turns every HTTP
answer or transport exception into exactly one outcome: :class:`Completed`, :class:`Failed` or
:class:`Omitted` (docs/outcomes.md has the table; spec 000 "Environment Server boundary", README
readings 4 and 5). The I/O half, :class:`EnvironmentClient`, sends one episode attempt and hands the
answer to the pure half. Nothing above this module knows that httpx is used: transport exceptions are
translated here, once.

Three one-off synchronous calls cross the same boundary: :func:`fetch_environment_config`
(``GET /global_config_dict_yaml``, once per ``collect`` invocation, for the run's identity),
:func:`fetch_aggregate_metrics` (``POST /aggregate_metrics``, once per aggregation) and
:func:`probe_health` (``GET <health_path>`` of a server a job started, while it comes up). They are off the
hot path, so they use a plain ``httpx.Client`` (no proxy) and the measurements below do not apply.

Delivery evidence (reading 4): a connection that could not be made (refused, DNS, connect timeout) is
``not_sent``; once bytes may have reached the server (read/write timeouts, resets, a peer that closed
mid-answer, gateway answers 429/502/503/504) it is ``possibly_delivered``; any other HTTP answer is
``delivered``. There are **no automatic transport retries**: a timeout may have run the episode, and
delivery evidence never authorizes a replay (the collector decides, with a new reserved execution).

Transport, chosen by measurement (``bench/transport.py``: 2 cores shared with other work, loopback,
a raw asyncio keep-alive server in its own process; best of 3 interleaved rounds; req/s, p99 ms, and
the client's CPU time per request, the figure least disturbed by foreign load)::

    in flight                 1                     32                     128
    raw asyncio client   10729  1.1   24 µs    31885    1.6   16 µs    12546    22   22 µs
    httpx, shared         1343  6.8  570 µs      558    346 1720 µs      379   623 1253 µs
    httpx, shared, tuned   390   13  832 µs      339    432 2881 µs       40  5717 11081 µs
    httpx, per-worker      672   14  675 µs     1288     76  567 µs     1080   189  581 µs
    EnvironmentClient    11024 0.14   38 µs    12213     10   34 µs    10142    32   45 µs

("tuned": keep-alive limit raised to the number in flight; "per-worker": one client of one
connection per slot.) A quieter A/B run at 32 in flight: raw 67,439 req/s at 15 µs of CPU,
EnvironmentClient 34,864 req/s at 29 µs (0.52×; both saturate the client's core). Against the demo
Environment Server at 32 in flight: raw 11,942, EnvironmentClient 11,229 (0.94×), httpx per-worker
1,101, httpx shared 302.

httpx's shared pool (httpcore) collapses as soon as requests queue: it re-scans every connection and
queued request on each change, and past ``max_keepalive_connections`` it closes connections it has
just used; raising the limits makes it worse. Per-worker clients avoid the collapse, but httpx spends
about 0.6 ms of CPU per request on this machine, which caps a core near 1,700 req/s: 4-9 % of the raw
client, while the collector aims at 4,000 rollouts/s with its bookkeeping. So plain-``http://``
servers are reached through :class:`Http11Transport`, a minimal HTTP/1.1 keep-alive transport on
asyncio streams that implements httpx's transport interface (tests inject ``httpx.MockTransport``;
errors are httpx's own exceptions), keeps an idle-connection stack per origin and does O(1) work per
request; :class:`EnvironmentClient` calls its byte-level fast path without building httpx request or
response objects. It costs about twice the raw client's CPU (validation and classification included)
and reaches 0.5-1.0× its rate. ``https://`` servers use per-worker ``httpx.AsyncHTTPTransport``
instances (one connection each), the best httpx setup measured. No aiohttp: a new dependency for
what some 150 lines of asyncio do here.

Trade-offs of :class:`Http11Transport`: no proxies (``HTTP_PROXY`` is ignored: Environment Servers
are cluster-internal), no TLS, no compression, no ``Expect: 100-continue``; responses framed by
``Content-Length``, chunked transfer encoding, or connection close are all read. An idle connection
is dropped after ``keepalive_expiry`` seconds (below uvicorn's 5 s keep-alive) so that a request is
not written into a connection the server is closing (that would be a needless possibly-delivered
failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, get_args

import httpx
import orjson
from pydantic import ValidationError

from gymslurm.errors import ConfigError, EnvironmentUnreachableError, MetricsUnavailableError, ProtocolError
from gymslurm.records import (
    FAILURE_KINDS,
    MAX_FAILURE_REASON,
    Delivery,
    EpisodeFailure,
    EpisodeId,
    RolloutFailureRecord,
    Source,
    Stage,
)

_log = logging.getLogger(__name__)

__all__ = [
    "Completed",
    "EnvironmentClient",
    "Failed",
    "Http11Transport",
    "Omitted",
    "Outcome",
    "classify_exception",
    "classify_reply",
    "fetch_aggregate_metrics",
    "fetch_environment_config",
    "probe_health",
    "verify_answer",
    "verify_client",
]

# ---------------------------------------------------------------------------------------------------
# Outcomes


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


@dataclass(frozen=True)
class Omitted:
    """An intentional omission: the environment suppressed the result and reported no failure."""


Outcome = Completed | Failed | Omitted

RUN_PATH, VERIFY_PATH = "/run", "/verify"
PROTOCOL_VIOLATION = "environment_protocol_violation"
LEGACY_JUDGE_MARKERS = frozenset({"_ng_judge_failsafe", "_ng_judge_invalid"})
NO_PERSIST = "_ng_no_persist"
LEGACY_CLASS, LEGACY_TERMINAL, LEGACY_MESSAGE = (
    "_ng_failure_class",
    "_ng_failure_terminal",
    "_ng_failure_message",
)
LEGACY_CLASS_KINDS = {"timeout_exceeded": "agent_timeout"}  # 001: agent_timeout is the shared name
STAGES = frozenset(get_args(Stage))
FAILURE_FIELDS = frozenset({"failure_reason", "terminal", "failure_kind", "stage"})
REPLY_FIELDS = frozenset({"episode_id", "task_id", "result", "failure", NO_PERSIST, "response"})
DIAGNOSTIC_BODY_CHARS = 4000

# Gateway and throttling answers: the Environment Server may or may not have seen the request.
# 429 and 503 say "not now" (the serving side is overloaded or throttling) → provider_unavailable;
# 502 says the upstream answered the gateway badly or hung up → transport_peer_drop; 504 that the
# gateway gave up waiting → transport_timeout, the same evidence as our own read timeout.
GATEWAY_STATUS_KINDS = {429: "provider_unavailable", 502: "transport_peer_drop",
                        503: "provider_unavailable", 504: "transport_timeout"}  # fmt: skip
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
) -> Outcome:
    """The one outcome an HTTP answer to ``POST /run`` for ``episode`` stands for.

    ``path`` names the endpoint in messages (``/verify`` answers are read by the same rules).
    Raises :class:`ProtocolError` for a protocol violation when ``route_failures`` is off.
    """
    call = _Call(episode, dict(task_id), run_id, route_failures, url, status_code, body, path)
    if 200 <= status_code < 300:
        try:
            return _classify_episode_reply(call)
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
        return call.collector_failure("HTTP 408: the server timed out reading the request",
                                      "transport_timeout", "delivered")  # fmt: skip
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
    reason = _truncate(" ".join(filter(None, [type(exc).__name__, where])) + f": {exc}")
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

    def record(
        self, reason: str, *, source: Source, delivery: Delivery, terminal: bool, kind: str | None
    ) -> RolloutFailureRecord:
        failure = EpisodeFailure(failure_reason=_truncate(reason), terminal=terminal, failure_kind=kind)
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
            where = f" from {self.url}" if self.url else ""
            raise ProtocolError(
                f"The Environment Server reply{where} for rollout {self.episode.rollout_id!r} attempt "
                f"{self.episode.attempt} (task {self.task_id!r}) breaks the protocol: {problem}. Fix the "
                "producer (../shared/spec/PROTOCOL.md), or set +route_failures_to_sidecar=true to record "
                "such replies as terminal environment_protocol_violation failures and let the other "
                "tasks continue."
            )
        record = self.record(f"protocol violation: {problem}", source="collector", delivery="delivered",
                             terminal=True, kind=PROTOCOL_VIOLATION)  # fmt: skip
        return Failed(record, diagnostics=self.http_diagnostics())


def _exception_evidence(exc: BaseException) -> tuple[str, Delivery]:
    """(failure_kind, delivery) for a transport exception; re-raises what is not one."""
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


def _request_url(exc: BaseException) -> str:
    try:
        return f"POST {exc.request.url}" if isinstance(exc, httpx.RequestError) else ""
    except RuntimeError:  # httpx raises when the exception carries no request
        return ""


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
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _BadReplyError(f"the body is not JSON ({exc}): {_excerpt(body, 200)!r}") from None
    if not isinstance(reply, dict):
        raise _BadReplyError(f"the body must be a JSON object, got {type(reply).__name__}")
    return reply


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
        episode_id=call.episode, run_id=call.run_id, source="environment", delivery="delivered",
        failure=canonical,
    )  # fmt: skip
    return Failed(record, response=response, diagnostics=(envelope | extra) or None)


def _legacy_failure(call: _Call, result: dict[str, Any]) -> Failed:
    """A legacy result tagged ``_ng_failure_class``: converted explicitly, placeholders dropped."""
    legacy_class, terminal = result[LEGACY_CLASS], result.get(LEGACY_TERMINAL, False)
    message = result.get(LEGACY_MESSAGE)
    if not isinstance(legacy_class, str) or not legacy_class:
        raise _BadReplyError(f"'{LEGACY_CLASS}' must be a non-empty string, got {legacy_class!r}")
    if not isinstance(terminal, bool):
        raise _BadReplyError(f"'{LEGACY_TERMINAL}' must be a boolean, got {terminal!r}")
    if message is not None and not isinstance(message, str):
        raise _BadReplyError(f"'{LEGACY_MESSAGE}' must be a string, got {message!r}")
    kind: str | None = LEGACY_CLASS_KINDS.get(legacy_class, legacy_class)
    kind = kind if kind in FAILURE_KINDS or ":" in legacy_class else None
    reason = message or f"legacy producer reported failure class {legacy_class!r} without a message"
    dropped = {LEGACY_CLASS, LEGACY_TERMINAL, LEGACY_MESSAGE, NO_PERSIST, "reward", "response"}
    diagnostics = {key: value for key, value in result.items() if key not in dropped}
    if len(reason) > MAX_FAILURE_REASON:
        diagnostics[LEGACY_MESSAGE] = reason  # the canonical reason is cut; the whole text stays here
    record = call.record(reason, source="environment", delivery="delivered", terminal=terminal, kind=kind)
    return Failed(
        record,
        legacy_class=legacy_class if legacy_class != record.routing_class else None,
        response=result.get("response"),
        diagnostics=diagnostics or None,
    )


def _checked_result(result: dict[str, Any]) -> dict[str, Any]:
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
        outcome = _classify_episode_reply(call)
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


# ---------------------------------------------------------------------------------------------------
# Transport (I/O)

_CRLF = b"\r\n"
_HEAD_END = b"\r\n\r\n"


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.idle_since = reader, writer, 0.0

    def reusable(self, now: float, expiry: float) -> bool:
        fresh = now - self.idle_since < expiry
        return fresh and not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class Http11Transport(httpx.AsyncBaseTransport):
    """A minimal HTTP/1.1 keep-alive transport for plain ``http://`` servers (see the module docstring).

    :meth:`exchange` is the fast path :class:`EnvironmentClient` uses (bytes in, status and body out, no
    httpx objects built); :meth:`handle_async_request` is httpx's transport interface around it. Errors
    are httpx's exceptions, so callers cannot tell it from httpcore. ``read`` covers the whole wait for
    the answer.
    """

    def __init__(self, *, keepalive_expiry: float = 4.0) -> None:
        self._keepalive_expiry = keepalive_expiry
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"Http11Transport speaks plain http only: {request.url}")
        head = b"%s %s HTTP/1.1\r\n" % (request.method.encode(), request.url.raw_path)
        head += b"".join(name + b": " + value + _CRLF for name, value in request.headers.raw)
        timeouts = request.extensions.get("timeout", {})
        origin = (request.url.host, request.url.port or 80)
        try:
            status, headers, content = await self.exchange(origin, head + _CRLF + request.content, timeouts)
        except httpx.TransportError as exc:
            exc.request = request
            raise
        return httpx.Response(status, headers=headers, content=content, request=request)

    async def exchange(
        self, origin: tuple[str, int], data: bytes, timeouts: Mapping[str, float | None]
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send one complete request (``data``) to ``origin`` and read its whole answer."""
        connection = self._take_idle(origin) or await _connect(origin, timeouts.get("connect"))
        try:
            await _send(connection, data, timeouts.get("write"))
            status, headers, content, keep_alive = await _receive(connection, timeouts.get("read"))
        except BaseException:
            connection.close()  # never reuse a connection with an unread or half-written exchange
            raise
        if keep_alive:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(origin, []).append(connection)
        else:
            connection.close()
        return status, headers, content

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def _take_idle(self, origin: tuple[str, int]) -> _Connection | None:
        idle, now = self._idle.get(origin), time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.reusable(now, self._keepalive_expiry):
                return connection
            connection.close()
        return None


async def _connect(origin: tuple[str, int], timeout: float | None) -> _Connection:
    where = f"{origin[0]}:{origin[1]}"
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*origin), timeout)
    except TimeoutError:
        raise httpx.ConnectTimeout(f"no connection to {where} within {timeout} s") from None
    except OSError as exc:
        raise httpx.ConnectError(f"cannot connect to {where}: {exc}") from exc
    return _Connection(reader, writer)


async def _send(connection: _Connection, data: bytes, timeout: float | None) -> None:
    connection.writer.write(data)
    if not connection.writer.transport.get_write_buffer_size():
        return  # all handed to the kernel: skip drain() (with a timeout it costs a task per request)
    try:
        await asyncio.wait_for(connection.writer.drain(), timeout)
    except TimeoutError:
        raise httpx.WriteTimeout(f"request not written within {timeout} s") from None
    except OSError as exc:
        raise httpx.WriteError(f"writing the request failed: {exc}") from exc


async def _receive(
    connection: _Connection, timeout: float | None
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    try:
        return await asyncio.wait_for(_read_response(connection.reader), timeout)
    except TimeoutError:
        raise httpx.ReadTimeout(f"no complete answer within {timeout} s") from None
    except asyncio.IncompleteReadError as exc:
        what = "without sending a response" if not exc.partial else "in the middle of its response"
        raise httpx.RemoteProtocolError(f"server disconnected {what}") from None
    except asyncio.LimitOverrunError:
        raise httpx.RemoteProtocolError("response header line too long") from None
    except (ValueError, IndexError) as exc:
        raise httpx.RemoteProtocolError(f"malformed HTTP response: {exc}") from None
    except OSError as exc:
        raise httpx.ReadError(f"reading the response failed: {exc}") from exc


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    head = await reader.readuntil(_HEAD_END)
    status_line, *header_lines = head[:-4].split(_CRLF)
    version, status_text = status_line.split(b" ", 1)
    if not version.startswith(b"HTTP/1."):
        raise ValueError(f"status line {status_line[:80]!r}")
    status = int(status_text[:3])
    headers = [_header(line) for line in header_lines]
    fields = {name.lower(): value.lower() for name, value in headers}
    keep_alive = version == b"HTTP/1.1" and fields.get(b"connection") != b"close"
    if fields.get(b"transfer-encoding", b"").endswith(b"chunked"):
        content = await _read_chunked(reader)
        headers = [(name, value) for name, value in headers if name.lower() != b"transfer-encoding"]
    elif b"content-length" in fields:
        content = await reader.readexactly(int(fields[b"content-length"]))
    elif status < 200 or status in (204, 304):
        content = b""
    else:
        content, keep_alive = await reader.read(), False
    return status, headers, content, keep_alive


def _header(line: bytes) -> tuple[bytes, bytes]:
    name, value = line.split(b":", 1)
    return name.strip(), value.strip()


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while size := int((await reader.readuntil(_CRLF)).split(b";", 1)[0], 16):
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
    while await reader.readuntil(_CRLF) != _CRLF:  # trailers
        pass
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------------
# The client


class EnvironmentClient:
    """Sends episode attempts to Environment Servers with at most ``concurrency`` requests in flight.

    Each of the ``concurrency`` slots owns its transports (one per URL scheme, created when first
    needed), so connections are never shared between concurrent requests and no pool is searched.
    ``transport`` replaces them all with one shared transport (tests pass ``httpx.MockTransport``).
    ``read_timeout=None`` waits as long as the server takes: the server's own episode timeout is the
    right bound, and a shorter collector-side one turns slow episodes into possibly-delivered failures.
    """

    def __init__(
        self,
        *,
        concurrency: int,
        run_id: str,
        route_failures: bool = False,
        connect_timeout: float | None = 10.0,
        read_timeout: float | None = None,
        write_timeout: float | None = 60.0,
        keepalive_expiry: float = 4.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.run_id, self.route_failures = run_id, route_failures
        self._timeouts = {"connect": connect_timeout, "read": read_timeout, "write": write_timeout}
        self._keepalive_expiry = keepalive_expiry
        self._shared = transport
        self._slots = asyncio.Semaphore(concurrency)
        self._free: list[dict[str, httpx.AsyncBaseTransport]] = []
        self._all: list[dict[str, httpx.AsyncBaseTransport]] = []
        self._targets: dict[str, _Target] = {}
        self._warned_kinds: set[str] = set()

    async def run(
        self, url: str, episode: EpisodeId, task: Mapping[str, Any], *, run_id: str | None = None
    ) -> Outcome:
        """POST one episode attempt to ``<url>/run`` and classify the answer (see :func:`classify_reply`).

        ``run_id`` overrides the client's for this attempt's failure record. Transport errors become
        failures; programming errors and cancellation propagate.
        """
        payload = {"episode_id": {"rollout_id": episode.rollout_id, "attempt": episode.attempt}, "task": task}
        body = orjson.dumps(payload)
        run_id = run_id or self.run_id
        try:
            status, content = await self._exchange(self._target(url), body)
        except (httpx.TransportError, httpx.DecodingError, OSError) as exc:
            return classify_exception(exc, episode=episode, run_id=run_id, url=url)
        outcome = classify_reply(
            status, content, episode=episode, task_id=task["task_id"], run_id=run_id,
            route_failures=self.route_failures, url=url,
        )  # fmt: skip
        if isinstance(outcome, Failed):
            self._warn_unregistered(outcome.record.failure.failure_kind, url)
        return outcome

    def _warn_unregistered(self, kind: str | None, url: str) -> None:
        """One warning per unregistered, unnamespaced failure kind (PROTOCOL.md); it is kept as sent."""
        if kind is None or kind in FAILURE_KINDS or ":" in kind or kind in self._warned_kinds:
            return
        self._warned_kinds.add(kind)
        _log.warning(
            "Environment Server %s reported failure_kind %r, which is not in the shared vocabulary "
            "(gymslurm.records.FAILURE_KINDS); it is saved as sent. Use a registered kind, or namespace "
            "the server's own as '<server>:<kind>'.",
            url, kind,
        )  # fmt: skip

    async def aclose(self) -> None:
        """Close every idle connection; call after in-flight requests finished or were cancelled."""
        closing = [self._shared] if self._shared else [t for slot in self._all for t in slot.values()]
        self._all, self._free = [], []
        for transport in closing:
            await transport.aclose()

    async def __aenter__(self) -> EnvironmentClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = _Target.parse(url)
        return target

    async def _exchange(self, target: _Target, body: bytes) -> tuple[int, bytes]:
        async with self._slots:
            slot = self._free.pop() if self._free else self._new_slot()
            try:
                transport = self._transport(slot, target.scheme)
                if isinstance(transport, Http11Transport):
                    status, _, content = await transport.exchange(
                        target.origin, target.request_bytes(body), self._timeouts
                    )
                    return status, content
                return await self._httpx_exchange(transport, target, body)
            finally:
                self._free.append(slot)

    async def _httpx_exchange(
        self, transport: httpx.AsyncBaseTransport, target: _Target, body: bytes
    ) -> tuple[int, bytes]:
        request = httpx.Request(
            "POST", target.url, content=body, headers=_REQUEST_HEADERS,
            extensions={"timeout": self._timeouts | {"pool": None}},
        )  # fmt: skip
        response = await transport.handle_async_request(request)
        try:
            return response.status_code, await response.aread()
        finally:
            await response.aclose()

    def _new_slot(self) -> dict[str, httpx.AsyncBaseTransport]:
        slot: dict[str, httpx.AsyncBaseTransport] = {}
        self._all.append(slot)
        return slot

    def _new_transport(self, scheme: str) -> httpx.AsyncBaseTransport:
        """Plain http: the minimal transport; https: httpx's, one connection (read timeout per read)."""
        if scheme == "http":
            return Http11Transport(keepalive_expiry=self._keepalive_expiry)
        limits = httpx.Limits(
            max_connections=1, max_keepalive_connections=1, keepalive_expiry=self._keepalive_expiry
        )
        return httpx.AsyncHTTPTransport(limits=limits, trust_env=False)

    def _transport(self, slot: dict[str, httpx.AsyncBaseTransport], scheme: str) -> httpx.AsyncBaseTransport:
        if self._shared is not None:
            return self._shared
        if scheme not in slot:
            slot[scheme] = self._new_transport(scheme)
        return slot[scheme]


_REQUEST_HEADERS = {"content-type": "application/json", "accept": "application/json"}


@dataclass(frozen=True)
class _Target:
    """An Environment Server's ``/run`` endpoint, parsed once, with its constant request head."""

    url: str
    scheme: str
    origin: tuple[str, int]
    head_prefix: bytes

    @classmethod
    def parse(cls, base_url: str) -> _Target:
        url = httpx.URL(base_url.rstrip("/") + "/run")
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(
                f"Environment Server URL {base_url!r} is not http(s)://HOST:PORT: check "
                "+environment_server_url (or the taskset-to-server mapping)"
            )
        origin = (url.host, url.port or (443 if url.scheme == "https" else 80))
        host = url.netloc.decode("ascii")
        headers = "".join(f"{name}: {value}\r\n" for name, value in _REQUEST_HEADERS.items())
        prefix = f"POST {url.raw_path.decode('ascii')} HTTP/1.1\r\nhost: {host}\r\n{headers}content-length: "
        return cls(str(url), url.scheme, origin, prefix.encode("ascii"))

    def request_bytes(self, body: bytes) -> bytes:
        return self.head_prefix + str(len(body)).encode() + _HEAD_END + body


# ---------------------------------------------------------------------------------------------------
# Judge-only re-grading: POST /verify


def verify_client(timeout_s: float | None = 60.0) -> httpx.Client:
    """A blocking client for :func:`verify_answer` (no proxies from the environment, like ``/run``)."""
    return httpx.Client(timeout=timeout_s, trust_env=False)


def verify_answer(
    client: httpx.Client,
    url: str,
    episode: EpisodeId,
    task: Mapping[str, Any],
    response: object,
    *,
    run_id: str,
) -> Outcome:
    """POST a saved answer to ``<url>/verify`` and classify the answer exactly like ``/run``'s.

    The body is ``{"episode_id", "task", "response"}`` (docs/aggregation.md, "Re-grading protocol").
    Protocol violations are recorded as terminal failures, never raised: a re-grade is saved either
    way. Blocking httpx, one call at a time: judge-only recovery re-grades the few answers a judge
    outage left behind, so the fast transport of :class:`EnvironmentClient` would buy nothing here.
    """
    payload = {
        "episode_id": {"rollout_id": episode.rollout_id, "attempt": episode.attempt},
        "task": dict(task),
        "response": response,
    }
    endpoint = url.rstrip("/") + VERIFY_PATH
    try:
        reply = client.post(endpoint, content=orjson.dumps(payload), headers=_REQUEST_HEADERS)
    except (httpx.TransportError, httpx.DecodingError, OSError) as exc:
        return classify_exception(exc, episode=episode, run_id=run_id, url=url, path=VERIFY_PATH)
    return classify_reply(
        reply.status_code, reply.content, episode=episode, task_id=task["task_id"], run_id=run_id,
        route_failures=True, url=url, path=VERIFY_PATH,
    )  # fmt: skip


# One-off calls: the server's configuration and its reward metrics (synchronous, off the hot path)

CONFIG_ENDPOINT = "/global_config_dict_yaml"
METRICS_ENDPOINT = "/aggregate_metrics"
METRIC_SECTIONS = ("agent_metrics", "key_metrics")
_CONFIG_ADVICE = (
    "Start the Environment Server first, point +head_server_url= at the NeMo Gym head server, "
    "or give the configuration explicitly with +environment_config={...}"
)


def fetch_environment_config(url: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The resolved configuration a running (NeMo Gym) head server reports at its config endpoint.

    Raises :class:`EnvironmentUnreachableError` (exit 1, retryable) when no connection can be made or
    the answer is a gateway or "not now" status (429/502/503/504, :data:`GATEWAY_STATUS_KINDS`), and
    :class:`ConfigError` (exit 2) when the server itself answers without a usable configuration.
    """
    where = url.rstrip("/") + CONFIG_ENDPOINT
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False, follow_redirects=True) as http:
            reply = http.get(where)  # trust_env off: servers are cluster-internal, no proxy
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as error:
        raise ConfigError(
            f"cannot read the configuration from {where!r}: {error}. {_CONFIG_ADVICE}"
        ) from None
    except httpx.TransportError as error:
        raise EnvironmentUnreachableError(
            f"cannot read the Environment Server's configuration from {where}: {error}. {_CONFIG_ADVICE}"
        ) from None
    if reply.status_code in GATEWAY_STATUS_KINDS:
        raise EnvironmentUnreachableError(
            f"cannot read the Environment Server's configuration from {where}: it answered HTTP "
            f"{reply.status_code} (a gateway or an overloaded server; not now). Retry later. {_CONFIG_ADVICE}"
        )
    if not reply.is_success:
        raise ConfigError(
            f"the Environment Server's configuration is required for the run's identity, but {where} "
            f"answered HTTP {reply.status_code}. {_CONFIG_ADVICE}"
        )
    return parse_environment_config(reply.text, where)


def probe_health(url: str, path: str, timeout_s: float) -> bool:
    """Whether ``GET <url><path>`` answers 2xx (redirects followed); false on any transport failure.

    Used while waiting for a server a job started to come up (``launcher/servers.py``): a refused
    connection or a 5xx just means "not yet", so this never raises for them.
    """
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False, follow_redirects=True) as http:
            return http.get(url.rstrip("/") + path).is_success
    except (httpx.HTTPError, httpx.InvalidURL):
        return False


def parse_environment_config(text: str, where: str) -> dict[str, Any]:
    """The mapping in a config endpoint's answer: YAML, or YAML inside a JSON string (NeMo Gym)."""
    import yaml

    try:
        parsed = yaml.safe_load(text)
        if isinstance(parsed, str):  # NeMo Gym answers with the YAML text as a JSON string
            parsed = yaml.safe_load(parsed)
    except yaml.YAMLError as error:
        raise ConfigError(f"{where} did not return YAML ({error}). {_CONFIG_ADVICE}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(f"{where} returned an empty or non-mapping configuration. {_CONFIG_ADVICE}")
    return parsed


def fetch_aggregate_metrics(url: str, rows: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    """``POST <url>/aggregate_metrics`` with the projection; its flat ``agent_metrics`` and ``key_metrics``.

    Raises :class:`MetricsUnavailableError` for any failure (transport, HTTP status, body): the caller
    falls back to its own metrics.
    """
    where = url.rstrip("/") + METRICS_ENDPOINT
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as http:
            reply = http.post(
                where, content=orjson.dumps({"verify_responses": rows}), headers=_REQUEST_HEADERS
            )
        reply.raise_for_status()
        body = orjson.loads(reply.content)
    except (httpx.HTTPError, httpx.InvalidURL, orjson.JSONDecodeError) as error:
        raise MetricsUnavailableError(
            f"the Environment Server at {url} did not answer {METRICS_ENDPOINT} ({error})"
        ) from error
    if not isinstance(body, dict):
        raise MetricsUnavailableError(
            f"the Environment Server at {url} answered {METRICS_ENDPOINT} with a non-object"
        )
    return flat_metrics(body)


def flat_metrics(body: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar entries of the reply's metric sections, merged (later sections win)."""
    out: dict[str, Any] = {}
    for section in METRIC_SECTIONS:
        value = body.get(section)
        if isinstance(value, dict):
            out.update({str(k): v for k, v in value.items() if isinstance(v, int | float | str | bool)})
    return out
