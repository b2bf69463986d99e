"""The link's watch over its servers while the collector runs (events: :mod:`gymslurm.supervision`).

Run from the link's main thread between waits for the collector (``Supervisor.round``), so every
server is started by the one thread that lives as long as the link (``PR_SET_PDEATHSIG`` is tied
to the thread that forked). Each round probes every started server; a server whose process exited,
or that failed ``probe_failures`` probes in a row, is *down*: the collector is told at once
(``down``, with the start of the last round that found it healthy), it pauses dispatch and charges
no rollout for what was in flight. The server is then restarted in place (same port, same log)
up to ``restart_limit`` times and the collector is told ``up``; past the limit, ``gave_up``: the
collector stops and the link exits 1 (retryable: the chain goes on in a new link). While the job
is being stopped nothing is restarted. Every start, restart and give-up is reported to
``on_change`` (the link writes it to the ledger and the job log).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gymslurm.launcher.job import servers as server_mod
from gymslurm.supervision import ServerEvent


@dataclass
class _Watch:
    server: server_mod.RunningServer
    last_ok: float
    failed_probes: int = 0


@dataclass
class Supervisor:
    """Probes servers, restarts them, and writes the events to the collector's channel."""

    servers: list[server_mod.RunningServer]
    write_fd: int | None
    on_change: Callable[[str, server_mod.RunningServer, str], None]
    gave_up: str | None = None
    stopping: bool = False
    _watches: list[_Watch] = field(default_factory=list)

    def __post_init__(self) -> None:
        now = time.monotonic()
        self._watches = [_Watch(s, now) for s in self.servers if s.process is not None]

    @property
    def interval_s(self) -> float:
        """How often a round runs: the shortest probe interval of the watched servers."""
        return min((w.server.settings.probe_interval_s for w in self._watches), default=5.0)

    def emit(self, event: ServerEvent) -> None:
        """Send one event to the collector (a collector that already exited is not an error)."""
        if self.write_fd is None:
            return
        with contextlib.suppress(OSError):
            os.write(self.write_fd, event.encode())

    def begin(self) -> None:
        """Tell the collector supervision started, and how often it probes."""
        self.emit(ServerEvent("watching", time.monotonic(), interval_s=self.interval_s))

    def stop_requested(self) -> None:
        """The job is being stopped: tell the collector; nothing is restarted from now on."""
        if not self.stopping:
            self.stopping = True
            self.emit(ServerEvent("stopping", time.monotonic()))

    def round(self) -> None:
        """Probe every watched server once; handle the ones that are down."""
        if self.gave_up is not None:
            return
        started, healthy = time.monotonic(), True
        for watch in list(self._watches):
            cause = self._check(watch)
            if cause is None:
                watch.last_ok, watch.failed_probes = started, 0
                continue
            healthy = False
            if cause != "":
                self._down(watch, cause)
        if healthy:
            self.emit(ServerEvent("healthy", started))

    def _check(self, watch: _Watch) -> str | None:
        """None when healthy, '' when not yet down (a failed probe below the limit), else the cause."""
        server = watch.server
        assert server.process is not None
        code = server.process.poll()
        if code is not None:
            return f"process exited with {code}" if code >= 0 else f"process killed by signal {-code}"
        if server_mod.probe(server.settings.host, server.port, server.settings):
            return None
        watch.failed_probes += 1
        limit = server.settings.probe_failures
        if watch.failed_probes < limit:
            return ""
        timeout = server.settings.probe_timeout_s
        return f"{limit} probe(s) in a row failed (timeout {timeout}s): hung or broken"

    def _down(self, watch: _Watch, cause: str) -> None:
        server = watch.server
        name = server.settings.name
        self.emit(ServerEvent("down", time.monotonic(), server=name, since=watch.last_ok, cause=cause))
        self.on_change("down", server, cause)
        if self.stopping:
            server_mod.kill_now(server)
            self._watches.remove(watch)
            return
        while server.restarts < server.settings.restart_limit:
            try:
                server = server_mod.restart(server)
            except server_mod.ServerStartError as error:
                server.restarts += 1
                self.on_change("restart_failed", server, str(error))
                continue
            watch.server, watch.last_ok, watch.failed_probes = server, time.monotonic(), 0
            self._replace(server)
            self.on_change("restarted", server, cause)
            self.emit(ServerEvent("up", time.monotonic(), server=name, restarts=server.restarts))
            return
        server_mod.kill_now(server)
        self._replace(server)
        self.gave_up = name
        self.on_change("gave_up", server, cause)
        self.emit(ServerEvent("gave_up", time.monotonic(), server=name, cause=cause))

    def _replace(self, server: server_mod.RunningServer) -> None:
        for index, known in enumerate(self.servers):
            if known.settings.name == server.settings.name:
                self.servers[index] = server
