"""A shard's counts as status shows them: rollouts done, failed, interrupted, ETA and walltime (pure).

The newest of the collector's coverage file and its live progress record, with interruptions
(``kill_shaped``: the job's own stop or a server's death; they run again and spend no budget)
taken out of the failures, so a requeue or a cancel never reads as failed rollouts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime

from gymslurm.coverage import Coverage
from gymslurm.store import live


@functools.lru_cache(maxsize=4096)  # status asks the same few values (a cap, 0s) once per shard
def human_duration(seconds: float | None) -> str:
    """``45s``, ``12m05s``, ``3h04m``, ``2d03h`` (``-`` for unknown)."""
    if seconds is None:
        return "-"
    total = round(max(seconds, 0.0))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


@dataclass
class Counts:
    """A shard's coverage counts, from the live record while a collector runs, else its coverage file.

    ``failed`` are failures that stand; ``interrupted`` are rollouts whose attempt was interrupted by
    the job's own stop or a server's death (``kill_shaped``: they run again and spend no budget), so
    a requeue or a cancel never reads as failures.
    """

    expected: int | None = None
    successful: int = 0
    failed: int = 0
    omitted: int = 0
    in_flight: int = 0
    rate_per_s: float | None = None
    live: bool = False
    failed_by_class: dict[str, int] = field(default_factory=dict)
    interrupted: int = 0

    @property
    def text(self) -> str:
        """``30/200 ok, 1 failed`` (``, 8 interrupted`` when some are; ``-`` before any collector wrote)."""
        if self.expected is None:
            return "-"
        shown = f"{self.successful}/{self.expected} ok, {self.failed} failed"
        return f"{shown}, {self.interrupted} interrupted" if self.interrupted else shown

    @property
    def left(self) -> int:
        """Rollouts without an outcome yet (interrupted ones run again)."""
        return max((self.expected or 0) - self.successful - self.failed - self.omitted, 0)


INTERRUPTION_CLASS = "kill_shaped"


def counts_of(coverage: Coverage | None, record: live.LiveProgress | None, running: bool) -> Counts:
    """The newest of the coverage file and the live progress record; a rate only while a link runs (pure).

    Interruptions are taken out of ``failed`` (the coverage file's ``kill_shaped`` class, the live
    record's ``interrupted`` count).
    """
    counts = Counts()
    if coverage is not None:
        by_class = dict(coverage.failed_by_class)
        interrupted = int(by_class.pop(INTERRUPTION_CLASS, 0))
        counts = Counts(
            coverage.expected,
            coverage.successful,
            coverage.failed - interrupted,
            coverage.intentionally_omitted,
            failed_by_class=by_class,
            interrupted=interrupted,
        )
    if record is not None and (coverage is None or record.epoch >= epoch_of(coverage.written_at)):
        counts = Counts(
            record.expected,
            record.successful,
            record.failed - record.interrupted,
            record.intentionally_omitted,
            record.in_flight if running else 0,
            record.rate_per_s if running and not record.ended else None,
            live=running and not record.ended,
            failed_by_class=counts.failed_by_class,
            interrupted=record.interrupted,
        )
    return counts


def epoch_of(iso: object) -> float:
    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except ValueError:
        return 0.0


def eta_s(counts: Counts, running: bool) -> float | None:
    """Seconds left at the running collector's rate, or None when nothing runs or no rate is known."""
    if not running or not counts.rate_per_s:
        return None
    return counts.left / counts.rate_per_s


def walltime_text(total_s: float, budget_s: float, cap_s: float | None, epochs: int) -> str:
    """``1h02m/24h00m``; after a resubmit, total and budget: ``3h10m (1h02m/24h00m since resubmit)``."""
    cap = "none" if cap_s is None else human_duration(cap_s)
    if epochs > 1 and round(total_s) != round(budget_s):
        return f"{human_duration(total_s)} ({human_duration(budget_s)}/{cap} since resubmit)"
    return f"{human_duration(budget_s)}/{cap}"
