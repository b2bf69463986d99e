"""A suite link's shared stack, started in a thread of its own while the benchmarks' servers and
collectors start against it.

Why: a model server loads its weights for minutes (15 s in ``bench/suite.py``), and a suite's
benchmarks' Environment Servers and collectors took 20-24 s more on two cores, one after the
other. Their start needs only the model server's *address*, known as soon as its process is
launched, not its readiness: so the stack starts here (:func:`start_stack`, every probe of a start
alone), the link starts each benchmark's own servers as soon as every stack server's address is
known (their ``startup_timeout_s`` counting from the stack's readiness: one may wait on the model),
then the collectors, each told first through its supervision channel that the stack's servers are
``down`` (its dispatch waits before its first request, collector/watch.py), then ``up`` once every
one of them answered its probe. A stack that does not start stops them all, as it did before any
of them started; nothing of a check is skipped, only the waiting is overlapped.

The thread that starts the stack lives until :meth:`StackLoad.release`: the kernel kills a server
when the *thread* that started it ends (``PR_SET_PDEATHSIG`` follows the parent thread).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gymslurm.errors import ServerStartError
from gymslurm.job import servers as server_mod
from gymslurm.job.stack import Note, StartHooks, start_stack
from gymslurm.launcher.settings import ServerSettings
from gymslurm.supervision import ServerEvent

LOADING = "starting: not healthy yet (the link started this collector while it loads)"


class StackLoad:
    """The stack's start in its own thread; healthy instances go to ``started`` (the link stops them)."""

    def __init__(
        self,
        servers: list[ServerSettings],
        logs: Path,
        chain: int,
        started: list[server_mod.RunningServer],
        *,
        note: Note,
        withheld: frozenset[str],
    ) -> None:
        self.servers, self.logs, self.chain, self.started = servers, logs, chain, started
        self.note, self.withheld = note, withheld
        self.launched: dict[str, server_mod.RunningServer] = {}  # by name, from launch on
        self.error: ServerStartError | None = None
        self.unexpected: BaseException | None = None
        self.done = threading.Event()  # healthy, or failed
        self.announced = False  # the link told its collectors the stack is up (its main thread only)
        self.since = time.monotonic()
        self._addressed = threading.Event()
        self._cancel: str | None = None
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack", daemon=True)

    def start(self) -> None:
        """Launch the stack now; returns at once."""
        self._thread.start()

    def _run(self) -> None:
        hooks = StartHooks(launched=self._launched, cancelled=lambda: self._cancel)
        try:
            start_stack(
                self.servers,
                self.logs,
                self.chain,
                self.started,
                note=self.note,
                withheld=self.withheld,
                hooks=hooks,
            )
        except ServerStartError as error:
            self.error = error
        except BaseException as error:  # raised in the link's thread by addresses() or failure()
            self.unexpected = error
        finally:
            self.done.set()
            self._addressed.set()
        self._release.wait()

    def _launched(self, server: server_mod.RunningServer) -> None:
        self.launched[server.name] = server
        if all(s.name in self.launched for s in self.servers):
            self._addressed.set()

    def addresses(self) -> list[server_mod.RunningServer]:
        """Every stack instance once each stack server's address is known (``{servers.NAME.url}``
        of the benchmarks' servers); raises the stack's start failure when it came first."""
        self._addressed.wait()
        self.failure()
        return list(self.launched.values())

    def failure(self) -> ServerStartError | None:
        """The stack's start failure once known (an unexpected error is raised)."""
        if self.unexpected is not None:
            raise self.unexpected
        return self.error if self.done.is_set() else None

    @property
    def loading(self) -> bool:
        """The stack is still starting."""
        return not self.done.is_set()

    def cancelled_by_failure(self) -> str | None:
        """Why a benchmark's server waiting beside the stack stops waiting: the stack failed."""
        return "the shared stack did not start" if self.done.is_set() and self.error is not None else None

    def down_events(self) -> list[ServerEvent]:
        """What a collector starting now is told first: each stack server down until announced up."""
        if self.announced:
            return []
        now = time.monotonic()
        return [ServerEvent("down", now, server=s.name, since=self.since, cause=LOADING) for s in self.own()]

    def up_events(self) -> list[ServerEvent]:
        """What every collector started before the stack was healthy is told once it is."""
        now = time.monotonic()
        return [ServerEvent("up", now, server=s.name) for s in self.own()]

    def own(self) -> list[ServerSettings]:
        """The stack servers this link starts (a ``url`` server is not waited for)."""
        return [s for s in self.servers if s.command is not None]

    def stop(self) -> None:
        """Stop waiting for a stack still starting (its instance being probed is killed); the link
        then stops what is in ``started``."""
        self._cancel = "the link is stopping"
        if self._thread.ident is not None:
            self.done.wait()

    def release(self) -> None:
        """Let the starting thread end (after the link stopped every server it started)."""
        self._release.set()
        self._thread.join(timeout=5.0)
