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

Replicas (a server with ``replicas: K``, each instance named ``NAME-rI``, behind the router that goes
by ``NAME``) are watched one by one and never pause the others: a replica that is down leaves the
router's rotation at once (``/remove_worker``), the collector is told ``down`` with ``carried`` (only
the requests sent by then can have met it; dispatch goes on), and it is relaunched in place without
blocking the rounds: each round probes the relaunched replica until it is healthy (``/add_worker``,
``up``) or fails, up to ``restart_limit``. A replica past its limit is retired; only when no replica
of the server is left does the supervisor give up (the link exits 1). While none is in rotation the
collector is told the server itself is ``down`` (dispatch pauses), and ``up`` when one is back.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gymslurm.dispatch import router_worker
from gymslurm.dispatch.calls import completed_total
from gymslurm.job import servers as server_mod
from gymslurm.supervision import ServerEvent


@dataclass
class _Watch:
    server: server_mod.RunningServer
    last_ok: float
    failed_probes: int = 0
    pending: server_mod.RunningServer | None = None  # a replica relaunched, not yet healthy
    deadline: float = 0.0
    retired: bool = False
    completed: float | None = None  # the server's finished-requests counter at its last probe

    @property
    def replica(self) -> bool:
        """Whether it is one replica of several (named NAME-rI; its router goes by NAME)."""
        return bool(self.server.label)

    @property
    def in_rotation(self) -> bool:
        """Whether it serves now (not retired, not being relaunched)."""
        return not self.retired and self.pending is None


@dataclass
class Supervisor:
    """Probes servers, restarts them, and writes the events to the collector's channel."""

    servers: list[server_mod.RunningServer]
    write_fd: int | None
    on_change: Callable[[str, server_mod.RunningServer, str], None]
    gave_up: str | None = None
    stopping: bool = False
    _watches: list[_Watch] = field(default_factory=list)
    say: Callable[[str], None] = lambda _message: None  # a line for the job log (the link's log)
    _paused: set[str] = field(default_factory=set)  # servers whose replicas are all out of rotation
    more_fds: list[int] = field(default_factory=list)  # a suite link's other collectors' channels

    def __post_init__(self) -> None:
        now = time.monotonic()
        self._watches = [_Watch(s, now) for s in self.servers if s.process is not None]

    def watch(self, servers: list[server_mod.RunningServer]) -> None:
        """Watch these too from now on (a suite's stack, healthy after the collectors started)."""
        now, known = time.monotonic(), {id(w.server) for w in self._watches}
        for server in servers:
            if server.process is not None and id(server) not in known:
                self._watches.append(_Watch(server, now))
                if all(known_server is not server for known_server in self.servers):
                    self.servers.append(server)

    @property
    def interval_s(self) -> float:
        """How often a round runs: the shortest probe interval of the watched servers."""
        return min((w.server.settings.probe_interval_s for w in self._watches), default=5.0)

    def emit(self, event: ServerEvent) -> None:
        """Send one event to the collector, and to every other collector of a suite link sharing these
        servers (``more_fds``); a collector that already exited is not an error."""
        for fd in [self.write_fd, *self.more_fds]:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.write(fd, event.encode())

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
            if watch.retired:
                continue
            if watch.pending is not None:
                self._starting(watch)
                continue
            cause = self._check(watch)
            if cause is None:
                watch.last_ok, watch.failed_probes = started, 0
                continue
            healthy = False
            if cause != "" and watch.replica:
                self._replica_down(watch, cause)
            elif cause != "":
                self._down(watch, cause)
        if healthy and self.gave_up is None:
            self.emit(ServerEvent("healthy", started))

    def _check(self, watch: _Watch) -> str | None:
        """None when healthy, '' when not yet down (a failed probe below the limit), else the cause."""
        server = watch.server
        assert server.process is not None
        code = server.exited()
        if code is not None:
            return f"process exited with {code}" if code >= 0 else f"process killed by signal {-code}"
        if server_mod.probe(server.host, server.port, server.settings):
            watch.completed = None
            return None
        if self._busy(watch):
            return None
        watch.failed_probes += 1
        limit = server.settings.probe_failures
        if watch.failed_probes < limit:
            return ""
        timeout = server.settings.probe_timeout_s
        return f"{limit} probe(s) in a row failed (timeout {timeout}s): hung or broken"

    def _busy(self, watch: _Watch) -> bool:
        """A probe that failed while the server finished requests since the last one: busy, not hung.

        A generate probe waits in a saturated model server's queue behind the collector's own
        requests; past ``probe_timeout_s`` it fails, though the server is working (seen: every
        replica of ``bench/replicas.py`` taken for hung and retired). The server's own counter of
        finished requests (vLLM's ``request_success_total``) moving is the evidence; a server that
        names none, or whose counter stands still, is judged by its probes as before.
        """
        server = watch.server
        now = completed_total(f"http://{server.host}:{server.port}", server.settings.probe_timeout_s)
        before, watch.completed = watch.completed, now
        return now is not None and before is not None and now > before

    def _down(self, watch: _Watch, cause: str) -> None:
        server = watch.server
        name = server.name
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
            self._reroute(name)
            self.emit(ServerEvent("up", time.monotonic(), server=name, restarts=server.restarts))
            return
        server_mod.kill_now(server)
        self._replace(server)
        self.gave_up = name
        self.on_change("gave_up", server, cause)
        self.emit(ServerEvent("gave_up", time.monotonic(), server=name, cause=cause))

    def _replace(self, server: server_mod.RunningServer) -> None:
        for index, known in enumerate(self.servers):
            if known.name == server.name:
                self.servers[index] = server

    # Replicas: out of the rotation and back without pausing the others.

    def _group(self, name: str) -> list[_Watch]:
        return [w for w in self._watches if w.replica and w.server.settings.name == name]

    def _router(self, name: str) -> server_mod.RunningServer | None:
        return next((w.server for w in self._watches if not w.replica and w.server.name == name), None)

    def _rotate(self, watch: _Watch, action: str, url: str) -> None:
        router = self._router(watch.server.settings.name)
        if router is None:
            return
        timeout = watch.server.settings.probe_timeout_s
        problem = router_worker(router.url, "add" if action == "add" else "remove", url, timeout)
        if problem is not None:
            self.say(f"server {watch.server.name!r}: the router refused ({problem}); its health check rules")

    def _reroute(self, name: str) -> None:
        """A router restarted with every replica listed: take out again the ones not in rotation."""
        for watch in self._group(name):
            if not watch.in_rotation:
                self._rotate(watch, "remove", watch.server.url)

    def _replica_down(self, watch: _Watch, cause: str) -> None:
        server, group = watch.server, watch.server.settings.name
        self._rotate(watch, "remove", server.url)
        now = time.monotonic()
        carried = any(w.in_rotation for w in self._group(group) if w is not watch)
        since = watch.last_ok
        self.emit(ServerEvent("down", now, server=server.name, since=since, cause=cause, carried=True))
        if not carried and group not in self._paused:
            self._paused.add(group)
            lost = f"no replica of {group!r} is in rotation ({server.name}: {cause})"
            self.emit(ServerEvent("down", now, server=group, since=watch.last_ok, cause=lost))
        self.on_change("down", server, cause)
        if self.stopping:
            server_mod.kill_now(server)
            watch.retired = True
            return
        self._relaunch(watch, cause)

    def _relaunch(self, watch: _Watch, cause: str) -> None:
        server = watch.server
        while server.restarts < server.settings.restart_limit:
            try:
                watch.pending = server_mod.relaunch(server)
            except server_mod.ServerStartError as error:
                server.restarts += 1
                self.on_change("restart_failed", server, str(error))
                continue
            watch.deadline = time.monotonic() + server.settings.startup_timeout_s
            self._replace(watch.pending)  # the link stops what is being relaunched too, on any exit
            return
        self._retire(watch, cause)

    def _starting(self, watch: _Watch) -> None:
        pending = watch.pending
        assert pending is not None
        try:
            healthy = server_mod.started_yet(pending, watch.deadline)
        except server_mod.ServerStartError as error:
            watch.server, watch.pending = pending, None
            self.on_change("restart_failed", pending, str(error))
            self._relaunch(watch, str(error))
            return
        if not healthy:
            return
        watch.server, watch.pending = pending, None
        watch.last_ok, watch.failed_probes = time.monotonic(), 0
        self._replace(pending)
        self._rotate(watch, "add", pending.url)
        self.on_change("restarted", pending, f"healthy at {pending.url} after {pending.startup_s:.1f}s")
        now = time.monotonic()
        self.emit(ServerEvent("up", now, server=pending.name, restarts=pending.restarts))
        group = pending.settings.name
        if group in self._paused:
            self._paused.discard(group)
            self.emit(ServerEvent("up", now, server=group))

    def _retire(self, watch: _Watch, cause: str) -> None:
        server_mod.kill_now(watch.server)
        watch.retired = True
        group = watch.server.settings.name
        left = [w for w in self._group(group) if not w.retired]
        limit = watch.server.settings.restart_limit
        said = f"{cause}; past restart_limit={limit}, retired ({len(left)} replica(s) left)"
        self.on_change("gave_up", watch.server, said)
        if not left:
            self.gave_up = group
            said = f"every replica died: {cause}"
            self.emit(ServerEvent("gave_up", time.monotonic(), server=group, cause=said))
