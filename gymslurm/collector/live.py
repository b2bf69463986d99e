"""The collector's liveness while it dispatches: the stall rule and the live progress record.

Ticked by the dispatch loop: a collection whose requests are in flight but that saved no outcome
for ``stall_window_s`` stops itself (exit 1, its rollouts stay unfinished); the record
``<stem>_progress.json`` (``store/live.py``) is what ``gymslurm status`` reads while a link runs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from gymslurm.clock import utc_now
from gymslurm.collector.view import LoopResult
from gymslurm.errors import StoreError
from gymslurm.progress import Counters, rate_and_eta, say
from gymslurm.store.live import LiveProgress, write_progress


class WatchedLoop(Protocol):
    """What the watch needs of the dispatch loop (``collector.DispatchLoop``)."""

    counters: Counters
    last_outcome_at: float
    result: LoopResult

    @property
    def stopping(self) -> bool: ...

    def stop(self, reason: str) -> None: ...

    def oldest_in_flight_s(self, now: float) -> float | None: ...

    def busy_seconds(self, now: float) -> float: ...

    def in_flight_seconds(self, now: float) -> tuple[float, int]: ...


def is_stalled(in_flight: int, quiet_s: float, window_s: float | None) -> bool:
    """The stall rule: requests are in flight and no outcome was saved for ``window_s`` (pure)."""
    return window_s is not None and in_flight > 0 and quiet_s >= window_s


STALL = "stall"


@dataclass
class LiveWatch:
    """Every tick: stop the loop on a stall, and replace the live progress record every interval.

    The record (``<stem>_progress.json``, gymslurm/store/live.py) is what ``gymslurm status``
    reads while a link runs. Writing it is best effort: a failure is said once on stderr and never
    stops a collection (the outcomes themselves are written and checked elsewhere).
    """

    loop: WatchedLoop
    path: Path
    interval_s: float
    stall_window_s: float | None
    stderr: IO[str]
    started_epoch: float = field(default_factory=time.time)
    _last_write: float = float("-inf")
    _warned: bool = False

    def tick(self, now: float) -> None:
        """Check the stall rule, then write the record when the interval has passed."""
        loop = self.loop
        if not loop.stopping and is_stalled(
            loop.counters.in_flight, now - loop.last_outcome_at, self.stall_window_s
        ):
            say(
                self.stderr,
                f"stalled: no outcome saved for {self.stall_window_s:g}s (stall_window_s) while "
                f"{loop.counters.in_flight} request(s) were in flight; a hung server or GPU? Cancelling "
                "them (their rollouts stay unfinished, no budget spent) and exiting 1 so the chain moves "
                "to a fresh link",
            )
            loop.stop(STALL)
        if now - self._last_write >= self.interval_s:
            self.write(now)

    def write(self, now: float, ended: bool = False) -> None:
        """Replace the live progress record now."""
        self._last_write = now
        try:
            write_progress(self.path, self.record(now, ended))
        except StoreError as error:
            if not self._warned:
                self._warned = True
                say(self.stderr, f"warning: the live progress record was not written: {error}")

    def record(self, now: float, ended: bool) -> LiveProgress:
        """The record for this moment (``now`` is the monotonic clock)."""
        counters, loop = self.loop.counters, self.loop
        rate, _ = rate_and_eta(counters, now)
        in_flight_s, requests = loop.in_flight_seconds(now)
        return LiveProgress(
            written_at=utc_now(),
            epoch=time.time(),
            pid=os.getpid(),
            job_id=os.environ.get("SLURM_JOB_ID") or os.environ.get("GYMSLURM_JOB_ID"),
            expected=counters.total,
            successful=counters.done,
            failed=counters.failed,
            intentionally_omitted=counters.omitted,
            in_flight=counters.in_flight,
            interrupted=counters.interrupted,
            new_outcomes=max(counters.new_outcomes, 0),
            started_epoch=self.started_epoch,
            rate_per_s=max(rate, 0.0),
            oldest_in_flight_s=loop.oldest_in_flight_s(now),
            last_outcome_age_s=max(now - loop.last_outcome_at, 0.0),
            stalled=loop.result.stopped_by == STALL,
            ended=ended,
            busy_s=round(loop.busy_seconds(now), 3),
            in_flight_s=round(in_flight_s, 3),
            requests=requests,
        )
