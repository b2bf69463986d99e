"""A suite link's shares of the model server, kept to each benchmark's model work left while they run.

The rule is pure (:func:`gymslurm.launcher.suite_rules.load_shares`: weight over work left); this is
its I/O. Every :data:`EVERY_S` the link reads the live progress record of each collector still
running (each writes it every :data:`RECORD_S` in a suite link: rollouts left, and its requests'
time in flight), computes the shares over them, and writes a ``share`` event into the supervision
channel of each collector whose share moved by more than :data:`MOVE` of itself (the channel it
already reads the servers' state from: no file, no process more). A collector that ended leaves the
split (the last one running has the whole server again); before a collector's first record, the
previous link's record of its benchmark stands for it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from gymslurm.errors import StoreError
from gymslurm.job.heartbeat import log
from gymslurm.launcher.suite_rules import Work, load_shares
from gymslurm.store import live
from gymslurm.supervision import ServerEvent

EVERY_S = 1.0  # how often the shares are computed again
RECORD_S = 1  # a suite collector's live progress interval: the shares follow its work within seconds
MOVE = 0.1  # a share that moved by less than this part of itself is not sent again


def work_of(output: Path) -> Work | None:
    """A benchmark's work left from its collector's live progress record (this link's or the last
    one's), or None when it has none (or one that cannot be read: it counts as a typical one)."""
    try:
        record = live.read_progress(live.progress_path(output))
    except StoreError:
        return None
    if record is None:
        return None
    return Work.measured(record.expected - record.finished, record.in_flight_s, record.requests)


class Collector(Protocol):
    """What the keeper needs of a running collector (job/collectors.CollectorJob)."""

    name: str
    channel: int | None  # the write end of its supervision channel


class ShareKeeper:
    """The shares of one suite link's concurrent collectors, told to them as their work changes."""

    def __init__(self, weights: Mapping[str, float], outputs: Mapping[str, Path]) -> None:
        self.weights, self.outputs = dict(weights), dict(outputs)
        self.told: dict[str, float] = {}
        self._next = 0.0

    def initial(self) -> dict[str, float]:
        """Every benchmark's share at its collector's start, from the last records of its benchmark."""
        self.told = load_shares(self.weights, False, self._work(self.weights))
        return dict(self.told)

    def round(self, running: Iterable[Collector]) -> None:
        """Every :data:`EVERY_S`: the shares of the collectors still running, sent where they moved."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + EVERY_S
        jobs = {job.name: job for job in running if job.channel is not None and job.name in self.weights}
        if not jobs:
            return
        shares = load_shares({name: self.weights[name] for name in jobs}, False, self._work(jobs))
        for name, share in shares.items():
            if abs(share - self.told.get(name, 1.0)) <= MOVE * self.told.get(name, 1.0):
                continue
            self.told[name] = share
            channel = jobs[name].channel
            assert channel is not None
            with contextlib.suppress(OSError):  # it just ended: the link reaps it
                os.write(channel, ServerEvent("share", now, share=share).encode())
            log(f"{name}: its share of the model server now {share:.3f}")

    def _work(self, names: Iterable[str]) -> dict[str, Work]:
        found = {name: work_of(self.outputs[name]) for name in names}
        return {name: work for name, work in found.items() if work is not None}
