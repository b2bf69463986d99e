"""Memory bounded against any server (issue 20, section 4): one in-flight byte budget shared by all
requests, and a parse guard. Real loopback servers: replies of many tiny keys, and endless chunked or
close-framed bodies sent to many requests at once, never make the replies held together exceed
``max_inflight_reply_bytes``; what goes over is a retryable ``gymslurm:reply_too_large`` failure.
"""

from __future__ import annotations

import asyncio

import pytest

from gymslurm.dispatch import Completed, EnvironmentClient, Failed
from gymslurm.dispatch.budget import parsed_cost
from gymslurm.dispatch.classify import REPLY_TOO_LARGE
from tests.unit.test_dispatch import EPISODE, RUN_ID, TASK, ok_response, run_against

BUDGET = 4 * 1024 * 1024
HARD_STOP = 64 * 1024 * 1024  # the endless servers stop here whatever happens (bounded test)


def _tiny_keys(body: bytes, keys: int) -> bytes:
    content = ok_response(body).split(b"\r\n\r\n", 1)[1]
    many = b",".join(b'"k%d":1' % i for i in range(keys))
    content = content[:-1] + b', "junk": {' + many + b"}}"
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(content), content)


def test_a_reply_of_many_tiny_keys_is_refused_before_it_is_parsed() -> None:
    """Under max_reply_bytes but explosive when parsed: refused by the parse guard, not built."""
    (outcome,), _ = run_against(lambda body: _tiny_keys(body, 200_000), max_inflight_reply_bytes=BUDGET)
    assert isinstance(outcome, Failed) and outcome.record.failure.failure_kind == REPLY_TOO_LARGE
    assert "max_inflight_reply_bytes" in outcome.record.failure.failure_reason


def _deep_nesting(body: bytes, groups: int) -> bytes:
    """Lists nested 500 deep (under orjson's depth limit), repeated: no ``,`` or ``:`` inside a group,
    but every ``[`` builds a list (measured: ~80 bytes of objects per byte pair, 40 x the body)."""
    content = ok_response(body).split(b"\r\n\r\n", 1)[1]
    nested = b",".join([b"[" * 500 + b"]" * 500] * groups)
    content = content[:-1] + b', "junk": [' + nested + b"]}"
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(content), content)


def test_a_reply_of_deep_nesting_is_refused_before_it_is_parsed() -> None:
    """1 MB of nested lists (about 40 MB once parsed) is over a 4 MiB budget: refused, not built."""
    (outcome,), _ = run_against(lambda body: _deep_nesting(body, 1000), max_inflight_reply_bytes=BUDGET)
    assert isinstance(outcome, Failed) and outcome.record.failure.failure_kind == REPLY_TOO_LARGE


def test_an_ordinary_reply_passes_the_parse_guard() -> None:
    """A reply with a few keys costs little: parsed and classified as usual."""
    (outcome,), _ = run_against(ok_response, max_inflight_reply_bytes=BUDGET)
    assert outcome == Completed({"reward": 1.0})
    assert parsed_cost(b'{"a": 1, "b": [1, 2]}') == 64 * 4 + 160 * 2  # 2 "," and 2 ":"; 2 opened


async def _endless(framing: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.readuntil(b"\r\n\r\n")
        head = (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            if framing == "chunked"
            else (b"HTTP/1.0 200 OK\r\n\r\n")
        )
        start = b'{"result": {"reward": 1.0, "pad": "'
        writer.write(head + (b"%x\r\n%s\r\n" % (len(start), start) if framing == "chunked" else start))
        piece = b"x" * 65536
        chunk = b"%x\r\n%s\r\n" % (len(piece), piece) if framing == "chunked" else piece
        sent = 0
        while sent < HARD_STOP:
            writer.write(chunk)
            await writer.drain()
            sent += len(piece)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


@pytest.mark.parametrize("framing", ["chunked", "close-framed"])
def test_endless_bodies_to_many_requests_stay_within_the_shared_budget(framing: str) -> None:
    """16 requests in flight, each answered by an endless body: together they never hold more than
    the budget (not 16 x max_reply_bytes), every one fails retryably, and the budget is given back."""

    async def go() -> tuple[list[object], int, int]:
        server = await asyncio.start_server(lambda r, w: _endless(framing, r, w), "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with (
            server,
            EnvironmentClient(
                concurrency=16, run_id=RUN_ID, max_reply_bytes=HARD_STOP, max_inflight_reply_bytes=BUDGET
            ) as client,
        ):
            outcomes = await asyncio.gather(*(client.run(url, EPISODE, TASK) for _ in range(16)))
            return list(outcomes), client.budget.peak, client.budget.used

    outcomes, peak, left = asyncio.run(go())
    kinds = [o.record.failure.failure_kind if isinstance(o, Failed) else o for o in outcomes]
    assert kinds == [REPLY_TOO_LARGE] * 16, [
        o.record.failure.failure_reason for o in outcomes if isinstance(o, Failed)
    ]
    assert 0 < peak <= BUDGET and left == 0
