"""The memory budget of the replies in flight (``max_inflight_reply_bytes``): what a reply costs, and
when it may take that from the budget, wait for room, or be refused.

A reply costs what the collector holds for it: its body, the strings parsing builds (a Python
``str`` holds 1, 2 or 4 bytes a character, by its widest character: one emoji makes a 60 MB string
240 MB) and the objects of its structure (:func:`parsed_cost`). Before its body is read a reply
reserves the most its body and strings can cost (``(1 + MAX_CHAR_WIDTH)`` x its length), so that
once read it only gives back; after it is read the reservation is settled to its measured cost.

Waiting never deadlocks (:func:`admission`): a reply that holds nothing waits in line; a reply that
holds a part (a chunked body, a structure heavier than its reservation) waits only while another
holder can still make progress, and is refused when every holder waits. A reply that cannot fit
even alone is refused at once, naming the limit and the setting to raise.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from enum import Enum

import httpx

# A str holds at most 4 bytes a character (PEP 393), and one body byte decodes to at most one character.
MAX_CHAR_WIDTH = 4
# What parsing a JSON reply builds, per separator (``,`` ``:``): a small dict entry or list item is
# about this many bytes of Python objects (measured: 5.5 M tiny keys in 60 MB took ~700 MB parsed).
PARSED_BYTES_PER_SEPARATOR = 64
# ... and per opened container (``[`` ``{``): a list or dict object, even empty, holding one item.
# Measured (CPython 3.11, orjson): lists nested 500 deep 80 bytes per ``[``; dicts nested as
# ``{"a":{"a":...`` 192 bytes per ``{"a":`` (covered with the ``:``: 160 + 64); ``[]`` 69.
PARSED_BYTES_PER_CONTAINER = 160

_ASTRAL_UTF8 = re.compile(rb"[\xf0-\xff]")  # the lead byte of a 4-byte UTF-8 character
_WIDE_UTF8 = re.compile(rb"[\xc4-\xef]")  # the lead byte of a character above U+00FF
_ASTRAL_ESCAPE = re.compile(rb"\\u[dD][89abAB]")  # a surrogate pair's first half: above U+FFFF
_WIDE_ESCAPE = re.compile(rb"\\u(?:0[1-9a-fA-F]|[1-9a-fA-F])")  # an escaped character above U+00FF


class _ReplyTooLarge(httpx.TransportError):
    """The server's answer is larger than ``max_reply_bytes``; it was not read whole.

    Private to dispatch: classify.py turns it into a ``gymslurm:reply_too_large`` failure, so it never
    reaches a caller (the exception tree of errors.py is for what does).
    """

    def __init__(self, size: int | None, limit: int) -> None:
        said = f"{size} bytes" if size is not None else f"more than {limit} bytes"
        super().__init__(
            f"the reply is {said}, over max_reply_bytes={limit}; it was not saved (raise "
            "+max_reply_bytes if such replies are expected, or make the server answer smaller)"
        )
        self.size, self.limit = size, limit


class _BudgetExhausted(_ReplyTooLarge):
    """The reply does not fit in ``max_inflight_reply_bytes``: not even alone, or not while every
    reply in flight holds a part and waits for more."""

    def __init__(self, message: str, total: int) -> None:
        httpx.TransportError.__init__(self, message)
        self.size, self.limit = None, total


def parsed_cost(content: bytes) -> int:
    """An upper estimate of the objects parsing ``content`` as JSON builds for its structure."""
    separators = content.count(b",") + content.count(b":")
    containers = content.count(b"[") + content.count(b"{")
    return PARSED_BYTES_PER_SEPARATOR * separators + PARSED_BYTES_PER_CONTAINER * containers


def char_width(content: bytes) -> int:
    """The widest a parsed string of ``content`` can store a character: 1, 2 or 4 bytes (PEP 393).

    An upper bound over the whole reply (one emoji anywhere counts as if in every string), from raw
    UTF-8 lead bytes and ``\\u`` escapes alike.
    """
    width = 1
    if not content.isascii():
        if _ASTRAL_UTF8.search(content):
            return MAX_CHAR_WIDTH
        width = 2 if _WIDE_UTF8.search(content) else 1
    if b"\\u" in content:
        if _ASTRAL_ESCAPE.search(content):
            return MAX_CHAR_WIDTH
        if _WIDE_ESCAPE.search(content):
            width = 2
    return width


def reply_cost(content: bytes) -> int:
    """What the collector holds for a reply while it is parsed: its body, its strings decoded at their
    widest, and its structure's objects (an upper estimate)."""
    return (1 + char_width(content)) * len(content) + parsed_cost(content)


def body_reservation(read: int, total: int | None) -> int:
    """What a reply holds once ``read`` bytes of its body are (or are about to be) read: the most they
    and their strings can cost, but no more than the whole budget (a reply whose worst case is over it
    is then admitted when nothing else is in flight, and refused once read if its measured cost is
    over), and never less than the bytes themselves (more than the budget: refused)."""
    worst = (1 + MAX_CHAR_WIDTH) * read
    return worst if total is None else max(read, min(worst, total))


class Admission(Enum):
    TAKE = "take"
    WAIT = "wait"
    REFUSE_ALONE = "refuse: does not fit even alone"
    REFUSE_DEADLOCK = "refuse: every holder waits"


def admission(
    need: int, held: int, used: int, total: int | None, *, others_active: bool, waiting_ahead: bool
) -> Admission:
    """May a reply that holds ``held`` bytes take ``need`` more, while ``used`` of ``total`` are taken?

    ``others_active``: another reply holds a part and is not waiting, or waits for no more than is
    free now (it will go on, then give back or wait);
    ``waiting_ahead`` (for a reply holding nothing): a reply that holds a part waits to grow, or one
    that holds nothing waits ahead in line (first come, first served: a large reservation is not
    passed over forever by small ones, and a reply half-way is finished before new ones start).
    """
    if total is None:
        return Admission.TAKE
    if held + need > total:
        return Admission.REFUSE_ALONE
    if held == 0 and waiting_ahead:
        return Admission.WAIT
    if used + need <= total:
        return Admission.TAKE
    if held == 0 or others_active:
        return Admission.WAIT  # holding nothing, waiting blocks no one; or someone else still moves
    return Admission.REFUSE_DEADLOCK


class ReplyBudget:
    """The bytes every reply in flight may hold together, shared by all of a client's requests.

    Replies take from it through a :class:`Reservation`; ``total`` None: no bound.
    """

    def __init__(self, total: int | None) -> None:
        self.total, self.used, self.peak = total, 0, 0
        self.holders = 0  # replies holding a part
        self.wanted: dict[object, int] = {}  # ... of which waiting for more: how much more
        self._line: deque[object] = deque()  # replies holding nothing that wait, first come first
        self._changed: asyncio.Event | None = None

    def reservation(self) -> Reservation:
        return Reservation(self)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _wait_change(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        await self._changed.wait()

    def _add(self, size: int) -> None:
        self.used += size
        self.peak = max(self.peak, self.used)
        if self._changed is not None:  # any change may let a waiter take, or show it that all wait
            self._notify()


class Reservation:
    """What one reply holds of the budget: taken before and while its body is read, settled to its
    measured cost once read, given back whole when it is done or fails."""

    __slots__ = ("budget", "size")

    def __init__(self, budget: ReplyBudget | None) -> None:
        self.budget, self.size = budget, 0

    async def take(self, need: int) -> None:
        """Take ``need`` more bytes, waiting for room as :func:`admission` allows."""
        budget = self.budget
        if budget is None or need <= 0:
            return
        if budget.total is None or (
            not budget.wanted and not budget._line and budget.used + need <= budget.total
        ):
            self._grow(need)  # what admission() answers here (room, no one waiting), without its cost
            return
        token = object()
        try:
            while True:
                verdict = admission(
                    need,
                    self.size,
                    budget.used,
                    budget.total,
                    others_active=self._others_active(token),
                    waiting_ahead=bool(budget.wanted)
                    or (bool(budget._line) and budget._line[0] is not token),
                )
                if verdict is Admission.TAKE:
                    self._grow(need)
                    return
                if verdict is not Admission.WAIT:
                    raise _BudgetExhausted(self._refusal(verdict, need), budget.total or 0)
                await self._wait(token, need)
        finally:
            if token in budget._line:
                budget._line.remove(token)
                budget._notify()

    def body_need(self, read: int) -> int:
        """What is still to take once ``read`` bytes of body are read (:func:`body_reservation`)."""
        return 0 if self.budget is None else body_reservation(read, self.budget.total) - self.size

    def settle(self, cost: int) -> int:
        """Hold no more than ``cost`` bytes (the reply's measured cost): give back what the reservation
        held over it; what is still to take (a structure heavier than the reservation) is returned."""
        if self.budget is None or cost >= self.size:
            return 0 if self.budget is None else cost - self.size
        self.budget._add(cost - self.size)
        self.size = cost
        return 0

    def release(self) -> None:
        """Give back everything this reply holds."""
        if self.budget is not None and self.size:
            self.budget.holders -= 1
            self.budget._add(-self.size)
            self.size = 0

    def _grow(self, need: int) -> None:
        assert self.budget is not None
        if not self.size:
            self.budget.holders += 1
        self.size += need
        self.budget._add(need)

    def _others_active(self, token: object) -> bool:
        """Whether another holder will go on: it is not waiting, or what it waits for is free now."""
        budget = self.budget
        assert budget is not None
        if budget.holders - len(budget.wanted) - (self.size > 0) > 0:
            return True
        free = (budget.total or 0) - budget.used
        return any(need <= free for other, need in budget.wanted.items() if other is not token)

    async def _wait(self, token: object, need: int) -> None:
        budget = self.budget
        assert budget is not None
        holding = self.size > 0
        if holding:
            budget.wanted[token] = need
            budget._notify()  # one fewer active holder: a waiter may now see that all wait
        elif token not in budget._line:
            budget._line.append(token)
        try:
            await budget._wait_change()
        finally:
            budget.wanted.pop(token, None)

    def _refusal(self, verdict: Admission, need: int) -> str:
        assert self.budget is not None
        total = self.budget.total
        if verdict is Admission.REFUSE_ALONE:
            return (
                f"the reply needs {self.size + need} bytes held at once (its body, its strings as parsed, "
                f"up to {MAX_CHAR_WIDTH} bytes a character, and its structure), over "
                f"max_inflight_reply_bytes={total}, so it cannot fit even alone; it was not saved "
                "(raise +max_inflight_reply_bytes if such replies are expected, or make the server "
                "answer smaller)"
            )
        return (
            f"the reply holds {self.size} bytes and needs {need} more while every reply in flight "
            f"holds a part of max_inflight_reply_bytes={total} ({self.budget.used} taken) and waits "
            "for more; this one was refused so the others can go on (a server sending endless or "
            "explosive replies; raise +max_inflight_reply_bytes if such replies are expected)"
        )
