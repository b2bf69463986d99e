"""The reply budget counts what a reply costs decoded and waits for room (issue 33, item 5).

The rule (dispatch/budget.py) as tables: a reply's cost (its body, its strings at their widest
character, its structure), what a body reserves before it is read, and when a reservation is taken,
waits, or is refused. Then real loopback servers answering many requests at once: replies that fit
alone all complete however many are in flight, while what they hold together stays within
``max_inflight_reply_bytes``; a wide string counts 4 bytes a character; a reply that cannot fit even
alone is refused naming the setting to raise.
"""

from __future__ import annotations

import asyncio
import json

import orjson
import pytest

from gymslurm.dispatch import Completed, EnvironmentClient, Failed, Outcome
from gymslurm.dispatch.budget import (
    Admission,
    admission,
    body_reservation,
    char_width,
    parsed_cost,
    reply_cost,
)
from gymslurm.dispatch.classify import REPLY_TOO_LARGE
from tests.unit.test_dispatch import EPISODE, RUN_ID, TASK

KIB = 1024
MIB = 1024 * KIB

# (content, widest bytes a character of its parsed strings can take)
WIDTHS = [
    (b'{"a": "plain ascii"}', 1),
    ('{"a": "caf\u00e9"}'.encode(), 1),  # U+00E9: still one byte a character (latin-1)
    ('{"a": "\u0101"}'.encode(), 2),  # U+0101
    ('{"a": "\u20ac"}'.encode(), 2),  # the euro sign, 3 bytes of UTF-8
    ('{"a": "\U0001f600"}'.encode(), 4),  # an emoji, 4 bytes of UTF-8
    (b'{"a": "caf\\u00e9"}', 1),  # escaped, as json.dumps writes it
    (b'{"a": "\\u20ac"}', 2),
    (b'{"a": "\\ud83d\\ude00"}', 4),  # an escaped emoji (a surrogate pair)
    (b'{"a": "\\uD83D\\uDE00"}', 4),  # ... in capitals
    ('{"a": "\u20ac", "b": "\\ud83d\\ude00"}'.encode(), 4),  # raw and escaped together: the widest
]


@pytest.mark.parametrize(("content", "width"), WIDTHS)
def test_the_widest_character_sets_what_a_parsed_string_costs(content: bytes, width: int) -> None:
    """A str stores every character as wide as its widest (PEP 393): read from UTF-8 and escapes."""
    assert char_width(content) == width
    assert reply_cost(content) == (1 + width) * len(content) + parsed_cost(content)


def test_one_emoji_in_a_long_string_costs_four_bytes_a_character_parsed() -> None:
    """The issue's case: the estimate is not below what parsing really builds."""
    content = orjson.dumps({"s": "x" * 1_000_000 + "\U0001f600"})
    parsed = orjson.loads(content)["s"]
    real = len(content) + parsed.__sizeof__()
    assert real <= reply_cost(content) < real + 1000


# (body bytes read or declared, budget) -> what the reply holds for them before they are read
RESERVATIONS = [
    (100, None, 500),  # unbounded: the worst case, 5 x
    (100, 1000, 500),  # fits: the worst case
    (100, 300, 300),  # worst case over the budget: the whole budget (admitted when nothing else is)
    (300, 300, 300),  # ... until the bytes alone fill it
    (400, 300, 400),  # the bytes alone over the budget: never less than the bytes (refused)
]


@pytest.mark.parametrize(("read", "total", "reserved"), RESERVATIONS)
def test_what_a_body_reserves_before_it_is_read(read: int, total: int | None, reserved: int) -> None:
    """The worst its bytes and strings cost, capped at the whole budget, never below the bytes."""
    assert body_reservation(read, total) == reserved


# (need, held, used, total, others_active, waiting_ahead) -> admission
ADMISSIONS = [
    (10**12, 0, 10**12, None, False, True, Admission.TAKE),  # no bound
    (50, 0, 40, 100, False, False, Admission.TAKE),  # room
    (100, 0, 0, 100, False, False, Admission.TAKE),  # the whole budget when nothing is in flight
    (101, 0, 0, 100, False, False, Admission.REFUSE_ALONE),  # cannot fit even alone
    (60, 50, 50, 100, False, False, Admission.REFUSE_ALONE),  # held + need over: never fits
    (50, 0, 60, 100, True, False, Admission.WAIT),  # no room: holding nothing, it waits
    (50, 0, 60, 100, False, False, Admission.WAIT),  # ... even when every holder waits
    (10, 0, 0, 100, False, True, Admission.WAIT),  # room, but another waits ahead: in line
    (10, 5, 60, 100, True, True, Admission.TAKE),  # a holder is not in the line
    (50, 10, 60, 100, True, False, Admission.WAIT),  # a holder waits while another can go on
    (50, 10, 60, 100, False, False, Admission.REFUSE_DEADLOCK),  # every holder waits: refused
]


@pytest.mark.parametrize(("need", "held", "used", "total", "active", "ahead", "verdict"), ADMISSIONS)
def test_when_a_reply_takes_waits_or_is_refused(  # noqa: PLR0917
    need: int, held: int, used: int, total: int | None, active: bool, ahead: bool, verdict: Admission
) -> None:
    """Wait for room rather than fail; refuse only what cannot fit alone, or what would deadlock."""
    assert admission(need, held, used, total, others_active=active, waiting_ahead=ahead) is verdict


def _answer(request: bytes, text: str, chunked: bool = False) -> bytes:
    """A valid answer echoing the request, its result carrying ``text`` (framed by length, or chunked)."""
    asked = json.loads(request)
    result = {"reward": 1.0, "text": text}
    content = orjson.dumps(
        {"episode_id": asked["episode_id"], "task_id": asked["task"]["task_id"], "result": result}
    )
    if chunked:
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(content[i : i + 4096]), content[i : i + 4096])
            for i in range(0, len(content), 4096)
        )
        return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(content), content)


def _in_flight(
    text: str, requests: int, budget: int, chunked: bool = False
) -> tuple[list[Outcome], int, int]:
    """``requests`` episodes in flight at once against a server that answers none before it has them
    all (every reply arrives together); the outcomes, the budget's peak and what is left taken."""

    async def go() -> tuple[list[Outcome], int, int]:
        arrived = asyncio.Barrier(requests)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(h.split(b":")[1])
                    for h in head.split(b"\r\n")
                    if h.lower().startswith(b"content-length")
                )
                body = await reader.readexactly(length)
                await arrived.wait()
                writer.write(_answer(body, text, chunked))
                await writer.drain()
                await reader.read()  # until the client closes
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with (
            server,
            EnvironmentClient(concurrency=requests, run_id=RUN_ID, max_inflight_reply_bytes=budget) as client,
        ):
            outcomes = await asyncio.gather(*(client.run(url, EPISODE, TASK) for _ in range(requests)))
            return list(outcomes), client.budget.peak, client.budget.used

    return asyncio.run(asyncio.wait_for(go(), 60))


def _reasons(outcomes: list[Outcome]) -> list[str]:
    return [o.record.failure.failure_reason or "" for o in outcomes if isinstance(o, Failed)]


def test_replies_that_fit_alone_all_complete_however_many_are_in_flight() -> None:
    """16 replies of 256 KiB arrive at once into a 2 MiB budget (together 4 MiB): each waits for
    room, none fails, and what they hold together never exceeds the budget."""
    outcomes, peak, left = _in_flight("x" * 256 * KIB, 16, 2 * MIB)
    assert _reasons(outcomes) == []
    assert all(isinstance(o, Completed) for o in outcomes)
    assert peak <= 2 * MIB and left == 0


def test_a_reply_over_the_budget_at_its_worst_is_admitted_alone() -> None:
    """Replies of 400 KiB reserve their worst case (2 MB, over a 1 MiB budget) before they are read:
    each is admitted when nothing else is in flight, measured (800 KiB), and completes."""
    outcomes, peak, left = _in_flight("x" * 400 * KIB, 4, 1 * MIB)
    assert _reasons(outcomes) == []
    assert peak <= 1 * MIB and left == 0


def test_wide_strings_count_four_bytes_a_character_and_wait_for_room() -> None:
    """8 replies of 256 KiB with one emoji each (about 1.3 MiB each parsed) arrive at once into a
    2 MiB budget: they complete one or so at a time, and the budget saw the decoded size."""
    text = "x" * 256 * KIB + "\U0001f600"
    outcomes, peak, left = _in_flight(text, 8, 2 * MIB)
    assert _reasons(outcomes) == []
    assert 5 * 256 * KIB <= peak <= 2 * MIB and left == 0


def test_a_wide_reply_that_cannot_fit_even_alone_is_refused_naming_the_setting() -> None:
    """600 KiB with one emoji costs about 3 MiB parsed: over a 2 MiB budget even alone, so it is a
    retryable reply_too_large failure that says which limit and which setting, not held."""
    outcomes, peak, left = _in_flight("x" * 600 * KIB + "\U0001f600", 1, 2 * MIB)
    (outcome,) = outcomes
    assert isinstance(outcome, Failed) and outcome.record.failure.failure_kind == REPLY_TOO_LARGE
    reason = outcome.record.failure.failure_reason or ""
    assert "max_inflight_reply_bytes=2097152" in reason and "+max_inflight_reply_bytes" in reason
    assert "cannot fit even alone" in reason
    assert peak <= 2 * MIB and left == 0


def test_chunked_replies_holding_parts_never_wait_for_each_other_forever() -> None:
    """8 chunked replies of 512 KiB (no length to reserve from) fill a 2 MiB budget part by part:
    when every one holds a part and waits, one is refused (retryable) so the others go on; the rest
    complete, and nothing is left taken."""
    outcomes, peak, left = _in_flight("x" * 512 * KIB, 8, 2 * MIB, chunked=True)
    completed = sum(isinstance(o, Completed) for o in outcomes)
    assert all("every reply in flight holds a part" in reason for reason in _reasons(outcomes))
    assert completed >= 1 and peak <= 2 * MIB and left == 0


def test_a_reply_reserves_its_worst_decoded_cost_from_its_content_length_before_its_body() -> None:
    """A server that sends its head (content-length 100 KiB) and then holds the body: the reply
    already holds 5 x 100 KiB (its bytes and their widest strings) before a byte of the body came."""
    declared = 100 * KIB

    async def go() -> tuple[int, Outcome]:
        release = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")
            )
            answer = _answer(await reader.readexactly(length), "x" * declared)
            start, body = answer.split(b"\r\n\r\n", 1)
            writer.write(start + b"\r\n\r\n")
            await writer.drain()
            await release.wait()
            writer.write(body)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with (
            server,
            EnvironmentClient(concurrency=1, run_id=RUN_ID, max_inflight_reply_bytes=8 * MIB) as client,
        ):
            running = asyncio.create_task(client.run(url, EPISODE, TASK))
            while client.budget.used == 0:
                await asyncio.sleep(0.005)
            held_before_body = client.budget.used
            release.set()
            return held_before_body, await running

    held, outcome = asyncio.run(asyncio.wait_for(go(), 30))
    assert isinstance(outcome, Completed)
    assert 5 * declared <= held <= 5 * (declared + KIB)  # the whole answer is the text and a few fields
