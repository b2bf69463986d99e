"""The client: sends episode attempts (``POST /run``) with bounded concurrency and classifies answers.

Plain ``http://`` servers are reached through :class:`~gymslurm.dispatch.http11.Http11Transport`'s
byte-level fast path (no httpx request or response objects built); ``https://`` servers through
per-worker ``httpx.AsyncHTTPTransport`` instances (one connection each), the best httpx setup measured
(docs/transport.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from gymslurm.dispatch.budget import ReplyBudget, Reservation, _ReplyTooLarge, reply_cost
from gymslurm.dispatch.classify import (
    Completed,
    Failed,
    Outcome,
    classify_exception,
    classify_reply,
    request_body,
    with_row_refs,
)
from gymslurm.dispatch.http11 import DEFAULT_MAX_REPLY_BYTES, HEAD_END, Http11Transport
from gymslurm.errors import ConfigError
from gymslurm.records import FAILURE_KINDS, EpisodeId, Protocol

_log = logging.getLogger(__name__)
# All replies in flight together (their bytes, then their decoded cost): the collector's bound.
DEFAULT_INFLIGHT_REPLY_BYTES = 256 * 1024 * 1024


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
        max_reply_bytes: int | None = DEFAULT_MAX_REPLY_BYTES,
        protocol: Protocol | Mapping[str, Protocol] = "episode",
        max_inflight_reply_bytes: int | None = DEFAULT_INFLIGHT_REPLY_BYTES,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.run_id, self.route_failures = run_id, route_failures
        # one protocol for every server, or one per server URL (a run may mix them: collector/routing.py)
        self.protocol: Protocol = protocol if isinstance(protocol, str) else "episode"
        self._protocols: Mapping[str, Protocol] = {} if isinstance(protocol, str) else protocol
        self._timeouts = {"connect": connect_timeout, "read": read_timeout, "write": write_timeout}
        self._keepalive_expiry = keepalive_expiry
        self._max_reply = max_reply_bytes
        # every reply in flight together: bodies read and what parsing them builds (docs/security.md,
        # dispatch/budget.py); a reply waits for room rather than failing when it fits alone
        self.budget = ReplyBudget(max_inflight_reply_bytes)
        self._shared = transport
        self._slots = asyncio.Semaphore(concurrency)
        self._free: list[dict[str, httpx.AsyncBaseTransport]] = []
        self._all: list[dict[str, httpx.AsyncBaseTransport]] = []
        self._targets: dict[str, _Target] = {}
        self._warned_kinds: set[str] = set()

    async def run(
        self,
        url: str,
        episode: EpisodeId,
        task: Mapping[str, Any],
        *,
        run_id: str | None = None,
        indices: tuple[int, int] = (0, 0),
    ) -> Outcome:
        """POST one episode attempt to ``<url>/run`` and classify the answer (see :func:`classify_reply`).

        ``run_id`` overrides the client's for this attempt's failure record; ``indices`` (task index,
        repeat index) are stamped on a flat legacy row. Transport errors become failures; programming
        errors and cancellation propagate.
        """
        protocol = self._protocols.get(url, self.protocol)
        body = orjson.dumps(request_body(protocol, episode, task, indices))
        run_id = run_id or self.run_id
        held = self.budget.reservation()  # taken while the body is read; given back once classified
        try:
            status, content = await self._exchange(self._target(url), body, held)
            if more := held.settle(reply_cost(content)):  # what parsing builds must fit too (the guard)
                await held.take(more)
            outcome = classify_reply(
                status,
                content,
                episode=episode,
                task_id=task["task_id"],
                run_id=run_id,
                route_failures=self.route_failures,
                url=url,
                protocol=protocol,
                indices=indices,
            )
        except (httpx.TransportError, httpx.DecodingError, OSError) as exc:  # _ReplyTooLarge included
            return classify_exception(exc, episode=episode, run_id=run_id, url=url)
        finally:
            held.release()
        if isinstance(outcome, Failed):
            self._warn_unregistered(outcome.record.failure.failure_kind, url)
        if protocol == "legacy_agent" and isinstance(outcome, Completed):
            return with_row_refs(outcome, task["task_input"])
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
            url,
            kind,
        )

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

    async def _exchange(self, target: _Target, body: bytes, held: Reservation) -> tuple[int, bytes]:
        async with self._slots:
            slot = self._free.pop() if self._free else self._new_slot()
            try:
                transport = self._transport(slot, target.scheme)
                if isinstance(transport, Http11Transport):
                    status, _, content = await transport.exchange(
                        target.origin, target.request_bytes(body), self._timeouts, held
                    )
                    return status, content
                return await self._httpx_exchange(transport, target, body, held)
            finally:
                self._free.append(slot)

    async def _httpx_exchange(
        self, transport: httpx.AsyncBaseTransport, target: _Target, body: bytes, held: Reservation
    ) -> tuple[int, bytes]:
        request = httpx.Request(
            "POST",
            target.url,
            content=body,
            headers=REQUEST_HEADERS,
            extensions={"timeout": self._timeouts | {"pool": None}},
        )
        response = await transport.handle_async_request(request)
        try:
            return response.status_code, await self._bounded_body(response, held)
        finally:
            await response.aclose()

    async def _bounded_body(self, response: httpx.Response, held: Reservation) -> bytes:
        """The body, streamed so that an oversized reply is never held whole (max_reply_bytes), its
        bytes reserved in ``held`` as they arrive (settled and given back by :meth:`run`)."""
        parts, total = [], 0
        try:
            async for chunk in response.aiter_bytes():  # decoded: the bound is on what is held
                total += len(chunk)
                if self._max_reply is not None and total > self._max_reply:
                    raise _ReplyTooLarge(None, self._max_reply)
                await held.take(held.body_need(total))
                parts.append(chunk)
        except httpx.StreamConsumed:  # a transport that answered with the body already read (tests)
            parts = [response.content]
            if self._max_reply is not None and len(response.content) > self._max_reply:
                raise _ReplyTooLarge(len(response.content), self._max_reply) from None
            await held.take(held.body_need(len(response.content)))
        except BaseException:
            parts.clear()  # the traceback keeps this frame alive while the collector pauses the GC
            raise
        return b"".join(parts)

    def _new_slot(self) -> dict[str, httpx.AsyncBaseTransport]:
        slot: dict[str, httpx.AsyncBaseTransport] = {}
        self._all.append(slot)
        return slot

    def _new_transport(self, scheme: str) -> httpx.AsyncBaseTransport:
        """Plain http: the minimal transport; https: httpx's, one connection (read timeout per read)."""
        if scheme == "http":
            return Http11Transport(
                keepalive_expiry=self._keepalive_expiry, max_body_bytes=self._max_reply, budget=self.budget
            )
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


REQUEST_HEADERS = {"content-type": "application/json", "accept": "application/json"}


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
        headers = "".join(f"{name}: {value}\r\n" for name, value in REQUEST_HEADERS.items())
        prefix = f"POST {url.raw_path.decode('ascii')} HTTP/1.1\r\nhost: {host}\r\n{headers}content-length: "
        return cls(str(url), url.scheme, origin, prefix.encode("ascii"))

    def request_bytes(self, body: bytes) -> bytes:
        return self.head_prefix + str(len(body)).encode() + HEAD_END + body
