"""What the e2e and Slurm tests share: waiting for a condition, with a deadline.

:func:`wait_until` is their one poll loop: it fails with what it waited for and for how long, never
hangs; :func:`on_change` keeps an expensive check (a ``status`` process) to the moments a run's records
(:func:`run_records`) changed. (The unit tests' scripted Slurm client is tests/unit/scripted_slurm.py.)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
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


def on_change(
    check: Callable[[], T], state: Callable[[], object], recheck_s: float = 5.0
) -> Callable[[], T | None]:
    """``check``, called only when ``state()`` changed since its last call or ``recheck_s`` after it.

    For a check that costs a process, such as ``gymslurm status`` (~0.8 s of CPU, its imports), polled
    by :func:`wait_until` as often as a cheap one: the test waits on the event (a ledger written) and
    reacts to it at the poll's pace, and the periodic re-check covers what ``state`` does not show.
    """
    last: list[tuple[object, float]] = []

    def gated() -> T | None:
        seen, now = state(), time.monotonic()  # before the check: a change during it is seen next time
        if last and last[0][0] == seen and now - last[0][1] < recheck_s:
            return None
        last[:] = [(seen, now)]
        return check()

    return gated


def run_records(run: Path) -> tuple[tuple[str, int, int], ...]:
    """Each ledger (shards', aggregation's, a suite's benchmarks') and local job file of a run, with its
    size and mtime: what a status's verdicts are read from, beside the Slurm queue."""
    found = []
    for path in sorted([*run.rglob("ledger.jsonl"), *run.glob("local/jobs/*.json")]):
        with contextlib.suppress(OSError):
            stat = path.stat()
            found.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(found)
