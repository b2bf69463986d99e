"""What the e2e and Slurm tests share: waiting for a condition, with a deadline.

:func:`wait_until` is their one poll loop: it fails with what it waited for and for how long, never
hangs. (The unit tests' scripted Slurm client is tests/unit/scripted_slurm.py.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T], timeout_s: float, what: str | Callable[[], str], every_s: float = 0.5
) -> T:
    """Call ``check`` every ``every_s`` until it gives something true, and return that.

    After ``timeout_s`` without it, fail saying what was waited for (``what``, or what it returns
    when called then: the state the test saw last) and for how long.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {said}")
        time.sleep(every_s)
