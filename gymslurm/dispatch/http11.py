"""A minimal HTTP/1.1 keep-alive transport on asyncio streams for plain ``http://`` servers.

Why hand-written: measured (docs/transport.md, ``bench/transport.py``) at about 5x per-worker httpx
and 20x httpx's shared pool for the collector's many small concurrent requests, at about twice a raw
client's CPU. It implements httpx's transport interface, and its errors are httpx's own exceptions, so
nothing above the dispatch package can tell it from httpcore.

Trade-offs: no proxies (``HTTP_PROXY`` is ignored: Environment Servers are cluster-internal), no TLS,
no compression, no ``Expect: 100-continue``; responses framed by ``Content-Length``, chunked transfer
encoding, or connection close are all read. An idle connection is dropped after ``keepalive_expiry``
seconds (below uvicorn's 5 s keep-alive) so that a request is not written into a connection the server
is closing (that would be a needless possibly-delivered failure).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import httpx

from gymslurm.dispatch.budget import ReplyBudget, Reservation, _ReplyTooLarge

CRLF = b"\r\n"
HEAD_END = b"\r\n\r\n"


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.idle_since = reader, writer, 0.0

    def reusable(self, now: float, expiry: float) -> bool:
        fresh = now - self.idle_since < expiry
        return fresh and not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024  # a /run reply larger than this is a failure, not a result
_READ_CHUNK = 1 << 20


class Http11Transport(httpx.AsyncBaseTransport):
    """A minimal HTTP/1.1 keep-alive transport for plain ``http://`` servers (see the module docstring).

    :meth:`exchange` is the fast path :class:`EnvironmentClient` uses (bytes in, status and body out, no
    httpx objects built); :meth:`handle_async_request` is httpx's transport interface around it. Errors
    are httpx's exceptions, so callers cannot tell it from httpcore. ``read`` covers the whole wait for
    the answer.
    """

    def __init__(
        self,
        *,
        keepalive_expiry: float = 4.0,
        max_body_bytes: int | None = None,
        budget: ReplyBudget | None = None,
    ) -> None:
        self._keepalive_expiry = keepalive_expiry
        self._max_body = max_body_bytes
        self.budget = budget
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"Http11Transport speaks plain http only: {request.url}")
        head = b"%s %s HTTP/1.1\r\n" % (request.method.encode(), request.url.raw_path)
        head += b"".join(name + b": " + value + CRLF for name, value in request.headers.raw)
        timeouts = request.extensions.get("timeout", {})
        origin = (request.url.host, request.url.port or 80)
        held = Reservation(self.budget)
        try:
            status, headers, content = await self.exchange(
                origin, head + CRLF + request.content, timeouts, held
            )
        except httpx.TransportError as exc:
            exc.request = request
            raise
        finally:
            held.release()  # httpx's interface holds no budget past the read
        return httpx.Response(status, headers=headers, content=content, request=request)

    async def exchange(
        self,
        origin: tuple[str, int],
        data: bytes,
        timeouts: Mapping[str, float | None],
        held: Reservation | None = None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send one complete request (``data``) to ``origin`` and read its whole answer.

        The body is reserved in ``held`` (the caller's, of its budget) before and while it is read,
        and stays reserved: the caller settles it to the reply's cost and releases it. A read that
        fails releases it.
        """
        connection = self._take_idle(origin) or await _connect(origin, timeouts.get("connect"))
        try:
            await _send(connection, data, timeouts.get("write"))
            answer = await _receive(
                connection, timeouts.get("read"), self._max_body, held or Reservation(None)
            )
            status, headers, content, keep_alive = answer
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
    connection: _Connection,
    timeout: float | None,
    max_body: int | None = None,
    held: Reservation | None = None,
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    held = held or Reservation(None)
    try:
        return await _wait_response(connection, timeout, max_body, held)
    except BaseException:
        held.release()
        raise


async def _wait_response(
    connection: _Connection, timeout: float | None, max_body: int | None, held: Reservation
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    try:
        return await asyncio.wait_for(_read_response(connection.reader, max_body, held), timeout)
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


async def _read_response(
    reader: asyncio.StreamReader, max_body: int | None = None, held: Reservation | None = None
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    head = await reader.readuntil(HEAD_END)
    status_line, *header_lines = head[:-4].split(CRLF)
    version, status_text = status_line.split(b" ", 1)
    if not version.startswith(b"HTTP/1."):
        raise ValueError(f"status line {status_line[:80]!r}")
    status = int(status_text[:3])
    headers = [_header(line) for line in header_lines]
    held = held or Reservation(None)
    fields = {name.lower(): value.lower() for name, value in headers}
    keep_alive = version == b"HTTP/1.1" and fields.get(b"connection") != b"close"
    if fields.get(b"transfer-encoding", b"").endswith(b"chunked"):
        content = await _read_chunked(reader, max_body, held)
        headers = [(name, value) for name, value in headers if name.lower() != b"transfer-encoding"]
    elif b"content-length" in fields:
        size = int(fields[b"content-length"])
        if max_body is not None and size > max_body:
            raise _ReplyTooLarge(size, max_body)  # refused before reading a byte of it
        await held.take(held.body_need(size))  # before a byte is read: waits for room
        content = await reader.readexactly(size)
    elif status < 200 or status in (204, 304):
        content = b""
    else:
        content, keep_alive = await _read_to_close(reader, max_body, held), False
    return status, headers, content, keep_alive


def _header(line: bytes) -> tuple[bytes, bytes]:
    name, value = line.split(b":", 1)
    return name.strip(), value.strip()


async def _read_to_close(reader: asyncio.StreamReader, max_body: int | None, held: Reservation) -> bytes:
    parts: list[bytes] = []
    total = 0
    try:
        while chunk := await reader.read(_READ_CHUNK):
            total += len(chunk)
            if max_body is not None and total > max_body:
                raise _ReplyTooLarge(None, max_body)
            await held.take(held.body_need(total))
            parts.append(chunk)
    except BaseException:
        parts.clear()  # the traceback keeps this frame alive (the collector pauses the GC): drop the bytes
        raise
    return b"".join(parts)


async def _read_chunked(
    reader: asyncio.StreamReader, max_body: int | None = None, held: Reservation | None = None
) -> bytes:
    parts: list[bytes] = []
    total, held = 0, held or Reservation(None)
    try:
        while size := int((await reader.readuntil(CRLF)).split(b";", 1)[0], 16):
            total += size
            if max_body is not None and total > max_body:
                raise _ReplyTooLarge(None, max_body)
            await held.take(held.body_need(total))
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        while await reader.readuntil(CRLF) != CRLF:  # trailers
            pass
    except BaseException:
        parts.clear()  # as in _read_to_close
        raise
    return b"".join(parts)
