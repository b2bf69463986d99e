"""The small HTTP/1.1 layer, driven through a recording transport: framing, keep-alive, errors."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gymslurm.demo.http import HttpConnection, encode_reply
from gymslurm.demo.messages import TEXT, Reply


class RecordingTransport(asyncio.Transport):
    """A transport that keeps what is written and whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Record the bytes."""
        self.written += data

    def close(self) -> None:
        """Record the close."""
        self.closed = True

    def pause_reading(self) -> None:
        """Nothing to pause."""

    def resume_reading(self) -> None:
        """Nothing to resume."""


def echo(method: bytes, target: bytes, body: bytes) -> Reply:
    """A handler answering ``METHOD TARGET BODY`` as text."""
    return Reply(200, b"%s %s %s" % (method, target, body), TEXT)


def connect(handler=echo) -> tuple[HttpConnection, RecordingTransport]:  # type: ignore[no-untyped-def]
    """A connection with a recording transport."""
    connection, transport = HttpConnection(handler, set()), RecordingTransport()
    connection.connection_made(transport)
    return connection, transport


def post(body: bytes, headers: bytes = b"") -> bytes:
    """A raw POST /run request."""
    return b"POST /run HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s" % (headers, len(body), body)


def bodies(written: bytes) -> list[bytes]:
    """The bodies of the responses in ``written`` (framed by Content-Length)."""
    found = []
    while written:
        head, _, rest = written.partition(b"\r\n\r\n")
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        found.append(rest[:length])
        written = rest[length:]
    return found


def test_one_request_one_response() -> None:
    """A complete request is answered with a Content-Length framed response; the connection stays open."""
    connection, transport = connect()
    connection.data_received(post(b"{}"))
    assert transport.written.startswith(b"HTTP/1.1 200 OK\r\n")
    assert bodies(bytes(transport.written)) == [b"POST /run {}"]
    assert not transport.closed


def test_request_split_across_reads() -> None:
    """A request arriving byte by byte is answered once complete."""
    connection, transport = connect()
    for byte in post(b"abc"):
        connection.data_received(bytes([byte]))
    assert bodies(bytes(transport.written)) == [b"POST /run abc"]


def test_pipelined_requests_are_answered_in_order() -> None:
    """Two requests in one read get two responses, in order."""
    connection, transport = connect()
    connection.data_received(post(b"1") + post(b"2"))
    assert bodies(bytes(transport.written)) == [b"POST /run 1", b"POST /run 2"]


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /run HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"411"),
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"POST /run HTTP/1.1\r\nContent-Length: ten\r\n\r\n", b"400"),
        (b"POST /run HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n", b"413"),
        (b"GET /" + b"x" * 70_000, b"431"),
    ],
)
def test_unsupported_requests_are_rejected_and_closed(request_bytes: bytes, status: bytes) -> None:
    """Chunked bodies, bad framing and oversized heads or bodies get an error status and a close."""
    connection, transport = connect()
    connection.data_received(request_bytes)
    assert transport.written.startswith(b"HTTP/1.1 " + status)
    assert transport.closed


@pytest.mark.parametrize(
    ("version", "connection_header", "closed"),
    [
        (b"HTTP/1.1", b"", False),
        (b"HTTP/1.1", b"Connection: close\r\n", True),
        (b"HTTP/1.0", b"", True),
        (b"HTTP/1.0", b"Connection: keep-alive\r\n", False),
    ],
)
def test_keep_alive_rules(version: bytes, connection_header: bytes, closed: bool) -> None:
    """HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 closes unless told to keep it."""
    connection, transport = connect()
    connection.data_received(b"GET /health %s\r\n%s\r\n" % (version, connection_header))
    assert transport.closed is closed
    assert (b"Connection: close\r\n" in transport.written) is closed


def test_expect_continue() -> None:
    """A request head with Expect: 100-continue gets an interim 100 before its body arrives."""
    connection, transport = connect()
    request = post(b"body", b"Expect: 100-continue\r\n")
    head, body = request[: -len(b"body")], b"body"
    connection.data_received(head)
    assert transport.written == b"HTTP/1.1 100 Continue\r\n\r\n"
    connection.data_received(body)
    assert bodies(bytes(transport.written).removeprefix(b"HTTP/1.1 100 Continue\r\n\r\n")) == [
        b"POST /run body"
    ]


def test_handler_error_is_a_500_and_the_connection_survives() -> None:
    """A handler exception answers 500 and the next request is still served."""
    calls = []

    def flaky(method: bytes, target: bytes, body: bytes) -> Reply:
        calls.append(body)
        if len(calls) == 1:
            raise RuntimeError("bug")
        return echo(method, target, body)

    connection, transport = connect(flaky)
    connection.data_received(post(b"1") + post(b"2"))
    assert transport.written.startswith(b"HTTP/1.1 500")
    assert bodies(bytes(transport.written))[1] == b"POST /run 2"


def test_delayed_reply_holds_back_the_pipelined_one() -> None:
    """A reply with a delay is sent before the request pipelined behind it."""

    def delayed_first(method: bytes, target: bytes, body: bytes) -> Reply:
        return echo(method, target, body)._replace(delay_s=0.01 if body == b"1" else 0.0)

    async def scenario() -> list[bytes]:
        connection, transport = connect(delayed_first)
        connection.data_received(post(b"1") + post(b"2"))
        assert transport.written == b""
        while len(bodies(bytes(transport.written))) < 2:
            await asyncio.sleep(0.005)
        return bodies(bytes(transport.written))

    assert asyncio.run(scenario()) == [b"POST /run 1", b"POST /run 2"]


def test_encode_reply_extra_headers() -> None:
    """Extra headers are sent between the fixed headers and the body."""
    encoded = encode_reply(Reply(503, b"x", TEXT, headers=((b"Retry-After", b"1"),)), keep_alive=True)
    assert encoded.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert encoded.endswith(b"Content-Length: 1\r\nRetry-After: 1\r\n\r\nx")


@given(
    st.lists(st.binary(max_size=200) | st.sampled_from([b"\r\n\r\n", b"Content-Length: 3\r\n"]), max_size=6)
)
def test_arbitrary_bytes_never_crash_the_parser(chunks: list[bytes]) -> None:
    """Any byte stream is answered or rejected, never raises out of data_received."""
    connection, transport = connect()
    for chunk in [b"POST /run HTTP/1.1\r\n", *chunks]:
        connection.data_received(chunk)
    assert transport.written == b"" or transport.written.startswith(b"HTTP/1.1 ")
