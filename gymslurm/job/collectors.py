"""A suite link's collectors: one per benchmark with work, against one shared stack.

Concurrent by default (every collector starts at once), or one after another (``order:
sequential``). Each collector is started as a benchmark link starts its own (collector_process.py:
its overrides in its environment, never argv; its own secrets only; never outliving the link), gets
its own supervision channel (the one :class:`Supervisor` of the link's servers writes every event
to all of them: a model server's death interrupts every benchmark's requests), and its own
progress watch. A collector that ends costs nothing more while the others go on; a signal the link
receives goes to every collector still running (heartbeat.Signals), so each saves and exits 75.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from gymslurm.job import servers as server_mod
from gymslurm.job.collector_process import (
    ProgressWatch,
    child_environment,
    split_command,
    stop_unresponsive,
)
from gymslurm.job.heartbeat import Heartbeat, Signals, log
from gymslurm.job.server_watch import Supervisor
from gymslurm.job.shares import ShareKeeper
from gymslurm.job.stack_load import StackLoad
from gymslurm.process_env import SECRET_OVERRIDES_ENV
from gymslurm.redaction import redact_value
from gymslurm.supervision import SUPERVISION_FD_ENV, ServerEvent

POLL_S = 0.5  # how often the link looks at its collectors between supervision rounds


@dataclass
class CollectorJob:
    """One benchmark's collector in a suite link, and how it ended."""

    name: str
    argv: list[str]
    first_override: int
    env: dict[str, str]
    withheld: frozenset[str]
    watch: ProgressWatch | None
    child: subprocess.Popen[bytes] | None = None
    channel: int | None = None  # the write end of its supervision channel
    code: int | None = None
    killer: int | None = None
    ended: bool = False
    started_at: float = field(default=0.0)
    stack_failed: bool = False  # stopped (or never started) because the shared stack did not start

    def start(self, supervised: bool, first: Sequence[ServerEvent] = ()) -> int | None:
        """Start the collector; the write end of its supervision channel (None: unsupervised), in
        which ``first`` is written before the collector exists (it reads them before any request)."""
        public, overrides = split_command(self.argv, self.first_override)
        shown = f"; its overrides, in {SECRET_OVERRIDES_ENV}: {redact_value(overrides)}" if overrides else ""
        log(f"collector of {self.name}: " + " ".join(public) + shown)
        env = child_environment(self.env, self.withheld)
        if overrides:
            env[SECRET_OVERRIDES_ENV] = json.dumps(overrides)
        read_fd = None
        if supervised:
            read_fd, self.channel = os.pipe()
            env[SUPERVISION_FD_ENV] = str(read_fd)
            for event in first:
                os.write(self.channel, event.encode())
        self.child = subprocess.Popen(
            public,
            stdin=subprocess.DEVNULL,
            env=env,
            pass_fds=() if read_fd is None else (read_fd,),
            preexec_fn=server_mod.stop_with_parent,  # noqa: PLW1509  a collector never outlives its link
        )
        if read_fd is not None:
            os.close(read_fd)
        self.started_at = time.time()
        if self.watch is not None:
            self.watch.started = self.started_at
        return self.channel

    def finish(self, code: int, signals: Signals) -> None:
        """Record how it ended and close its channel."""
        self.ended = True
        if code >= 0:
            self.code = code
        else:
            self.killer = None if signals.received else -code
        if self.channel is not None:
            with contextlib.suppress(OSError):
                os.close(self.channel)
            self.channel = None


def run_collectors(
    jobs: list[CollectorJob],
    signals: Signals,
    supervisor: Supervisor | None,
    *,
    heartbeat: Heartbeat | None,
    sequential: bool,
    stack: StackLoad | None = None,
    shares: ShareKeeper | None = None,
) -> None:
    """Run every collector (all at once, or one after another) until each ended; each job's ``code``
    and ``killer`` say how. Nothing new starts once the link was signalled.

    ``stack``: the shared stack still starting (job/stack_load.py). A collector started meanwhile is
    told its servers are down first (it dispatches nothing yet); once the stack is healthy every
    running collector is told ``up`` and its servers are supervised too; when it fails, every
    collector is stopped (``stack_failed``) and none more starts.

    ``shares``: the concurrent collectors' shares of the model server, told to them as their work
    left changes (job/shares.py).
    """
    waiting, running = list(jobs), list[CollectorJob]()
    next_round = time.monotonic() + (supervisor.interval_s if supervisor is not None else 0.0)
    if supervisor is not None:
        supervisor.write_fd = None
    try:
        while waiting or running:
            if stack is not None and not stack.announced and stack.done.is_set():
                waiting = _stack_ended(stack, running, waiting, supervisor)
            if waiting and not signals.received and (not sequential or not running):
                for job in waiting[:1] if sequential else list(waiting):
                    _start(job, signals, supervisor, heartbeat, stack)
                    waiting.remove(job)
                    running.append(job)
            elif waiting and signals.received:
                for job in waiting:
                    log(f"received {signals.names} before {job.name}'s collector started; not starting it")
                    job.ended = True
                waiting = []
            running = _reap(running, signals, supervisor)
            if shares is not None:
                shares.round(running)
            if supervisor is not None and time.monotonic() >= next_round and running:
                next_round = time.monotonic() + supervisor.interval_s
                supervisor.round()
                if supervisor.gave_up is not None and not supervisor.stopping:
                    supervisor.stop_requested()  # every collector stops itself; TERM in case one hangs
                    _stop_all(running, signals, grace_s=30.0)
                    waiting = []
            time.sleep(POLL_S if running or waiting else 0)
    finally:
        for job in jobs:
            if job.child is not None and job.child.poll() is None:  # an exception: none outlives the link
                job.child.kill()
                job.finish(job.child.wait(), signals)
        signals.children = []


def _stack_ended(
    stack: StackLoad, running: list[CollectorJob], waiting: list[CollectorJob], supervisor: Supervisor | None
) -> list[CollectorJob]:
    """The stack is healthy: the collectors are told, its servers supervised; or it failed: every
    collector is stopped (it sent nothing: it waited for the stack). The collectors still to start."""
    stack.announced = True
    if (error := stack.failure()) is not None:
        log(f"the shared stack did not start ({error}); stopping the collectors")
        for job in running:
            job.stack_failed = True
            assert job.child is not None
            with contextlib.suppress(ProcessLookupError):
                job.child.terminate()
        for job in waiting:
            job.stack_failed, job.ended = True, True
        return []
    if supervisor is not None:
        supervisor.watch(stack.started)
        for event in stack.up_events():
            supervisor.emit(event)
    log(f"the shared stack is up after {time.monotonic() - stack.since:.1f}s; the collectors dispatch")
    return waiting


def _start(
    job: CollectorJob,
    signals: Signals,
    supervisor: Supervisor | None,
    heartbeat: Heartbeat | None,
    stack: StackLoad | None,
) -> None:
    first = stack.down_events() if stack is not None else []
    channel = job.start(supervisor is not None, first)
    assert job.child is not None
    signals.children.append(job.child)
    if supervisor is not None and channel is not None:
        supervisor.more_fds.append(channel)
        supervisor.begin() if len(supervisor.more_fds) == 1 else _tell_watching(supervisor, channel)
    if heartbeat is not None:  # inject's collector faults go to every collector started
        pids = [child.pid for child in signals.children]
        if len(pids) == 1:
            stall = None if job.watch is None else job.watch.window_s
            heartbeat.publish(
                collector_pid=job.child.pid, collector_started=time.time(), stall_window_s=stall
            )
        heartbeat.publish(collector_pids=pids)


def _tell_watching(supervisor: Supervisor, channel: int) -> None:
    """A collector started after the others: it is told supervision is on, as the first one was."""
    with contextlib.suppress(OSError):
        os.write(
            channel, ServerEvent("watching", time.monotonic(), interval_s=supervisor.interval_s).encode()
        )


def _reap(running: list[CollectorJob], signals: Signals, supervisor: Supervisor | None) -> list[CollectorJob]:
    """The collectors still running; an ended one is recorded and leaves the supervisor's channels."""
    still = []
    for job in running:
        assert job.child is not None
        code = job.child.poll()
        watch = job.watch if job.watch is not None and job.watch.reason is None else None
        if code is None and watch is not None and watch.check(job.child.pid) is not None:
            log(f"unresponsive: the collector of {job.name}: {watch.reason}; stopping it")
            code = stop_unresponsive(job.child)
        if code is None:
            still.append(job)
            continue
        if supervisor is not None and job.channel in supervisor.more_fds:
            supervisor.more_fds.remove(job.channel)
        job.finish(code, signals)
        log(f"the collector of {job.name} exited {code}")
    return still


def _stop_all(running: list[CollectorJob], signals: Signals, grace_s: float) -> None:
    """Give every running collector ``grace_s`` to stop by itself, then TERM the rest."""
    deadline = time.monotonic() + grace_s
    for job in running:
        assert job.child is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            job.child.wait(timeout=max(deadline - time.monotonic(), 0.1))
        if job.child.poll() is None:
            job.child.terminate()
    del signals
