"""A full disk is a verdict, not silence: a link that finds the run's filesystem full waits for space.

Before it starts anything (and before it writes a start record), a link checks the free space of
the run's filesystem. Below :data:`MIN_FREE_BYTES` it records ``disk_full`` in the shard's ledger
(which keeps reserved room for exactly this: ``store.atomic.reserve``), so ``status`` says
"disk full at PATH", then backs off (5 s, doubling up to 5 min) and goes on by itself once space
is back. A signal (the time limit, a preemption) ends the wait: the job exits with nothing
started and nothing spent, and its successor waits on. A collector that failed on a full disk is
decided "disk full" (decide.py: no retry spent, the next link waits).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from gymslurm.errors import StoreError
from gymslurm.job.heartbeat import Signals, log
from gymslurm.launcher.ledger import DiskFull, Ledger

MIN_FREE_BYTES = int(os.environ.get("GYMSLURM_MIN_FREE_BYTES", str(1 << 20)))
BACKOFF_FIRST_S, BACKOFF_MAX_S = 5.0, 300.0


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem (huge when unknown)."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return 1 << 62
    return stats.f_bavail * stats.f_frsize


def disk_full(path: Path) -> str | None:
    """``PATH (N bytes free)`` when the filesystem of ``path`` is below :data:`MIN_FREE_BYTES`."""
    free = free_bytes(path)
    return None if free >= MIN_FREE_BYTES else f"{path} ({free} bytes free)"


def wait_for_space(root: Path, ledger: Ledger, me: str, signals: Signals) -> bool:
    """True once the run's filesystem has room (at once when it has); False if a signal came first."""
    free = free_bytes(root)
    if free >= MIN_FREE_BYTES:
        return True
    with contextlib.suppress(OSError, StoreError):
        ledger.append(DiskFull(job_id=me, path=str(root), free_bytes=free))
    log(f"disk full at {root} ({free} bytes free): waiting for space before starting anything")
    delay = BACKOFF_FIRST_S
    while True:
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            if signals.received:
                log(f"received {signals.names} while waiting for space; nothing started, the next link waits")
                return False
            time.sleep(0.2)
        if free_bytes(root) >= MIN_FREE_BYTES:
            log(f"space is back at {root}: going on")
            return True
        delay = min(delay * 2, BACKOFF_MAX_S)
