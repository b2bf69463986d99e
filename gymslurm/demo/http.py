"""A small HTTP/1.1 server on asyncio.Protocol: just enough HTTP for the demo Environment Server.

Why hand-written: the demo server shares two cores with a collector that must reach thousands of
rollouts per second, so a framework's per-request overhead (ASGI scopes, middleware, pydantic) would
be what limits the benchmark. This speaks the HTTP that collectors send: keep-alive (the default of
HTTP/1.1; ``Connection: close`` and HTTP/1.0 close), ``Content-Length`` bodies, pipelined requests
answered in order, ``Expect: 100-continue``. It rejects chunked request bodies (411), oversized
headers (431) and bodies (413), and unparsable request lines (400), then closes the connection.

Trade-offs: no TLS, no chunked bodies, no header folding, no ``Date`` header; a delayed reply
(injected latency) holds back the replies pipelined behind it on the same connection, as HTTP/1.1
requires. Replies are ``header prefix (precomputed per status and type) + length + body``.
The application (gymslurm/demo/app.py) decides what to answer; this module only does the I/O and
the actions a reply may carry: wait ``delay_s`` (``loop.call_later``, no task per request),
``die`` (``os._exit``, without answering), ``hang`` (stop answering anything) and ``later`` (an
awaitable whose reply is sent once it is done: the Environment Server asking its model server).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
from collections.abc import Callable
from http import HTTPStatus

from gymslurm.demo.messages import JSON, TEXT, Reply

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
DIE_EXIT_CODE = 70  # the exit status of an injected ``die`` (EX_SOFTWARE)
_SERVER_HEADER = b"Server: gymslurm-demo\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

Handler = Callable[[bytes, bytes, bytes], Reply]

_prefixes: dict[tuple[int, bytes], bytes] = {}


def _prefix(status: int, content_type: bytes) -> bytes:
    """``HTTP/1.1 <status> <reason>`` and the fixed headers, up to ``Content-Length: ``; cached."""
    key = (status, content_type)
    prefix = _prefixes.get(key)
    if prefix is None:
        reason = HTTPStatus(status).phrase.encode() if status in HTTPStatus._value2member_map_ else b"Unknown"
        prefix = b"HTTP/1.1 %d %s\r\n%sContent-Type: %s\r\nContent-Length: " % (
            status,
            reason,
            _SERVER_HEADER,
            content_type,
        )
        _prefixes[key] = prefix
    return prefix


def encode_reply(reply: Reply, keep_alive: bool) -> bytes:
    """The bytes of one HTTP response."""
    extra = b"".join(b"%s: %s\r\n" % pair for pair in reply.headers)
    if not keep_alive:
        extra += b"Connection: close\r\n"
    return b"%s%d\r\n%s\r\n%s" % (
        _prefix(reply.status, reply.content_type),
        len(reply.body),
        extra,
        reply.body,
    )


class _Request:
    __slots__ = ("body", "keep_alive", "method", "target")

    def __init__(self, method: bytes, target: bytes, body: bytes, keep_alive: bool) -> None:
        self.method, self.target, self.body, self.keep_alive = method, target, body, keep_alive


class _BadRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _parse_head(head: bytes) -> tuple[bytes, bytes, int, bool, bool]:
    """Parse a request head: (method, target, content length, keep-alive, expects 100-continue)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise _BadRequestError(400, f"malformed request line {lines[0][:200]!r}")
    method, target, version = parts
    keep_alive = version == b"HTTP/1.1"
    length, expect = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            if not value.strip().isdigit():
                raise _BadRequestError(400, f"invalid Content-Length {value.strip()[:50]!r}")
            length = int(value)
        elif name == b"connection":
            token = value.strip().lower()
            keep_alive = token == b"keep-alive" or (keep_alive and token != b"close")
        elif name == b"transfer-encoding":
            raise _BadRequestError(
                411, "chunked request bodies are not supported: send a Content-Length body"
            )
        elif name == b"expect":
            expect = value.strip().lower() == b"100-continue"
    if length > MAX_BODY_BYTES:
        raise _BadRequestError(413, f"request body of {length} bytes is over the limit of {MAX_BODY_BYTES}")
    return method, target, length, keep_alive, expect


class HttpConnection(asyncio.Protocol):
    """One client connection: parses requests, asks the handler, writes replies in order."""

    def __init__(self, handler: Handler, connections: set[HttpConnection]) -> None:
        self._handler = handler
        self._connections = connections
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiting = False  # a delayed reply is pending: later requests wait in the buffer
        self._continued = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport and count the connection (for shutdown)."""
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection; a pending delayed reply is dropped."""
        self._transport = None
        self._connections.discard(self)

    def pause_writing(self) -> None:
        """The client is not reading: stop reading its requests too."""
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        """The client reads again."""
        if self._transport is not None:
            self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        """Buffer the bytes and answer every complete request in them."""
        self._buffer += data
        if not self._waiting:
            self._drain()

    def close(self) -> None:
        """Close the connection (server shutdown)."""
        if self._transport is not None:
            self._transport.close()

    def _drain(self) -> None:
        while self._transport is not None and not self._waiting:
            try:
                request = self._next_request()
            except _BadRequestError as error:
                self._reject(error)
                return
            if request is None:
                return
            reply = self._answer(request)
            if reply.later is not None:
                self._waiting = True
                task = asyncio.ensure_future(reply.later)
                task.add_done_callback(lambda done, r=request: self._send_later(done, r.keep_alive))
                return
            if reply.delay_s > 0:
                self._waiting = True
                loop = asyncio.get_running_loop()
                loop.call_later(reply.delay_s, self._send_delayed, reply, request.keep_alive)
                return
            self._send(reply, request.keep_alive)

    def _answer(self, request: _Request) -> Reply:
        try:
            return self._handler(request.method, request.target, request.body)
        except Exception:  # a bug in the application: answer 500 and keep serving
            traceback.print_exc(file=sys.stderr)
            return Reply(500, b"Internal Server Error: see the demo server's stderr", TEXT)

    def _next_request(self) -> _Request | None:
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEADER_BYTES:
                raise _BadRequestError(431, f"request head over {MAX_HEADER_BYTES} bytes")
            return None
        method, target, length, keep_alive, expect = _parse_head(bytes(buffer[:end]))
        total = end + 4 + length
        if len(buffer) < total:
            if expect and not self._continued and self._transport is not None:
                self._continued = True
                self._transport.write(_CONTINUE)
            return None
        body = bytes(buffer[end + 4 : total])
        del buffer[:total]
        self._continued = False
        return _Request(method, target, body, keep_alive)

    def _send(self, reply: Reply, keep_alive: bool) -> None:
        if reply.die:
            _die()
        if reply.hang:
            _hang()
        transport = self._transport
        if transport is None:
            return
        transport.write(encode_reply(reply, keep_alive))
        if not keep_alive:
            transport.close()
            self._transport = None

    def _send_later(self, done: asyncio.Future[Reply], keep_alive: bool) -> None:
        if done.cancelled():  # the server is stopping (a wedged model's completion never ends on its own)
            return
        try:
            reply = done.result()
        except Exception:  # a bug in the application: answer 500 and keep serving
            traceback.print_exc(file=sys.stderr)
            reply = Reply(500, b"Internal Server Error: see the demo server's stderr", TEXT)
        if reply.delay_s > 0:
            asyncio.get_running_loop().call_later(reply.delay_s, self._send_delayed, reply, keep_alive)
            return
        self._send_delayed(reply, keep_alive)

    def _send_delayed(self, reply: Reply, keep_alive: bool) -> None:
        self._waiting = False
        self._send(reply, keep_alive)
        self._drain()

    def _reject(self, error: _BadRequestError) -> None:
        body = f"{error}\n".encode()
        self._send(Reply(error.status, body, TEXT), keep_alive=False)


def _hang() -> None:
    sys.stderr.write("gymslurm demo: injected fault 'hang': no longer answering anything\n")
    sys.stderr.flush()
    while True:  # block the event loop, as a hung GPU blocks a model server (SIGKILL ends it)
        time.sleep(3600)


def _die() -> None:
    sys.stderr.write(
        f"gymslurm demo-server: injected fault 'die': exiting at once with status {DIE_EXIT_CODE}\n"
    )
    sys.stderr.flush()
    os._exit(DIE_EXIT_CODE)


async def start_server(handler: Handler, host: str, port: int) -> tuple[asyncio.Server, set[HttpConnection]]:
    """Listen on ``host:port`` (0: a free port); return the server and its live connections."""
    connections: set[HttpConnection] = set()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpConnection(handler, connections), host, port, backlog=1024)
    return server, connections


__all__ = ["DIE_EXIT_CODE", "JSON", "HttpConnection", "encode_reply", "start_server"]
