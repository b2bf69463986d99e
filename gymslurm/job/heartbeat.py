"""A job's signals and its heartbeat file, and the job's one log line format.

Installed first thing by a link and by the aggregation: USR1/TERM/INT are remembered and
forwarded once each to the current child; the heartbeat (``store/live.py``) says which job runs
the shard, so ``status`` can tell a RUNNING link whose beats stopped (UNRESPONSIVE).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from gymslurm.clock import utc_now_ms
from gymslurm.errors import StoreError
from gymslurm.job import early_signals
from gymslurm.redaction import redact_text  # not identity's re-export: that imports omegaconf
from gymslurm.store import live

if TYPE_CHECKING:
    from gymslurm.job.server_watch import Supervisor

HEARTBEAT_S = live.HEARTBEAT_S


FORWARDED = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
EARLY_SIGNALS_ENV = "GYMSLURM_EARLY_SIGNALS"  # set by the batch shell: signals before the step ran


def log(message: str) -> None:
    """One timestamped line on the job's output (a log on a full disk loses the line, not the job)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"[gymslurm chain-step {utc_now_ms()}] {redact_text(message)}", file=sys.stderr, flush=True)


@dataclass
class Signals:
    """Signals this step received, forwarded once each to the current child."""

    received: list[int] = field(default_factory=list)
    child: subprocess.Popen[bytes] | None = None
    supervisor: Supervisor | None = None
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)  # a suite link's collectors

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        """Remember the signal and forward it to the child the first time it arrives."""
        first = signum not in self.received
        self.received.append(signum)
        if self.supervisor is not None:
            self.supervisor.stop_requested()
        for child in [self.child, *self.children] if first else []:
            if child is not None and child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signum)

    def install(self) -> None:
        """Handle USR1, TERM and INT; take as received those the batch shell got before we ran.

        The shell names them in ``GYMSLURM_EARLY_SIGNALS`` (``" USR1"``): a USR1 that came before
        the chain step started is the same warning as one that comes after. So are those caught
        while the step was importing (:mod:`~gymslurm.job.early_signals`).
        """
        for signum in FORWARDED:
            signal.signal(signum, self.handle)
        for name in os.environ.get(EARLY_SIGNALS_ENV, "").split():
            with contextlib.suppress(KeyError):
                self.received.append(signal.Signals[f"SIG{name}"])
        self.received.extend(early_signals.caught())

    @property
    def names(self) -> str:
        """The received signals' names."""
        return ",".join(dict.fromkeys(signal.Signals(s).name for s in self.received))


class Heartbeat:
    """Replaces the shard's heartbeat file every :data:`HEARTBEAT_S` seconds while a link runs.

    The file (``store/live.py``, version 1) names the job, the run's start, this process and its
    host, and the interval, so ``status`` can call a RUNNING link whose beats stopped UNRESPONSIVE.
    """

    def __init__(
        self, path: Path, job_id: str, restart: int, start: str, interval_s: float = HEARTBEAT_S
    ) -> None:
        self.path, self.stop_event, self.interval_s = path, threading.Event(), interval_s
        self.payload = {"job_id": job_id, "restart_count": restart, "start": start}
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def publish(self, **pids: object) -> None:
        """Add the pid of the link's collector (``collector_pid``) and beat now.

        ``gymslurm inject`` reads it to send a fault to the collector of this link (servers' pids
        are in the ledger's ``server`` records).
        """
        self.payload.update(pids)
        self.beat()

    def beat(self) -> None:
        """Write one heartbeat now."""
        record = live.Heartbeat(
            **self.payload,  # type: ignore[arg-type]
            at=utc_now_ms(),
            epoch=time.time(),
            interval_s=self.interval_s,
            pid=os.getpid(),
            host=socket.gethostname(),
        )
        with contextlib.suppress(StoreError):
            live.write_heartbeat(self.path, record)

    def _loop(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            self.beat()

    def __enter__(self) -> Heartbeat:
        self.beat()
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop_event.set()
        self.beat()


def job_started_at() -> float:
    """When this job started: the batch shell (our parent) was created then; else this process."""
    import psutil  # here: status imports this module for log() and needs no psutil

    for pid in (os.getppid(), os.getpid()):
        with contextlib.suppress(psutil.Error):
            return float(psutil.Process(pid).create_time())
    return time.time()
