"""What says a chain is alive, or about to be, when the queue shows no job of it running (pure rules and
the two looks they need): a link that outlived its job, and first links a submit is still queuing.

``status`` (views/status.py) must never say STALLED, and advise ``resubmit``, while someone is about to
move the chain: a link whose job left the queue but which still beats and holds the shard's link lock
writes its decision itself; a shard whose first link a killed submit's queuing has not reached yet is
queued by whoever completes it (the run's first job, the next ``status`` or ``submit``).
"""

from __future__ import annotations

import socket

from gymslurm.launcher.ledger import ChainState
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.views.diagnosis import STALE_BEATS
from gymslurm.site.backend import LIVE_STATES
from gymslurm.site.slurm import QueueRow
from gymslurm.store import live
from gymslurm.store.flock import held_here


def outlived_link(
    state: ChainState, heartbeat: live.Heartbeat | None, lock_held: bool | None, now: float
) -> str | None:
    """The job of a started run whose link still runs, the queue showing no job of the chain running:
    the heartbeat is that run's and fresh (within :data:`STALE_BEATS` intervals) and the shard's link
    lock is held (``lock_held`` None: not visible from this host, the heartbeat alone); else None (pure).
    A link killed with its job stops beating: within two intervals the chain reads STALLED again."""
    if heartbeat is None or lock_held is False or now - heartbeat.epoch > STALE_BEATS * heartbeat.interval_s:
        return None
    run = (heartbeat.job_id, heartbeat.restart_count)
    return heartbeat.job_id if any((r.job_id, r.restart_count) == run for r in state.open_runs) else None


def link_lock_held(run: RunDir, shard: int, heartbeat: live.Heartbeat | None) -> bool | None:
    """Whether the shard's link lock is held, as far as this host can see without taking it: the holder
    is looked for only on its heartbeat's host (a lock on another node of a shared filesystem is not
    listed here: None)."""
    if heartbeat is None or heartbeat.host != socket.gethostname():
        return None
    return held_here(run.link_lock(shard))


def queuing_reason(run: RunDir, queue: dict[str, QueueRow], states: list[ChainState]) -> str | None:
    """Why a shard with no job yet gets one: the run's queuing mark is there (submit has not queued
    every first link) and someone is queuing them: a submit of this host holds ``submit.lock``, or a
    job of the run is live (its first act completes the queuing). None when nobody will."""
    if not run.queuing_mark.exists():
        return None
    if held_here(run.submit_lock) or any(_live_jobs(state, queue) for state in states):
        return (
            "its first link is not queued yet: submit's queuing is under way (a killed submit's is "
            "completed by the run's first job, or by the next 'gymslurm status' or 'submit')"
        )
    return None


def _live_jobs(state: ChainState, queue: dict[str, QueueRow]) -> list[QueueRow]:
    return [queue[j] for j in state.epoch_jobs if j in queue and queue[j].state in LIVE_STATES]
