"""The collector's end of the supervision channel (rule and format: :mod:`gymslurm.supervision`).

When ``GYMSLURM_SUPERVISION_FD`` names an inherited pipe (a link started the collector and watches
the job's servers), the collector reads its events into a :class:`~gymslurm.supervision.Timeline`
and, through :class:`Supervised`:

- pauses dispatch while a server is down (requests in flight finish or time out);
- holds each failure until the timeline says whose it is, and records an interruption (a
  collector-side ``kill_shaped`` failure with the evidence) instead of the attempt's own failure
  when a supervised server died while it was in flight or the job is being stopped;
- stops dispatch when the link gave up on a server (past its ``restart_limit``);
- hands a suite link's new share of the model server to the adaptive limit (``on_share``).

Without the variable, nothing changes: the collector's own circuit breaker is the outside view.
If the channel closes (the link died, taking its servers with it), that is the job stopping: a
failure from then on (or up to one probe interval before) is an interruption; the collector
itself gets SIGTERM from the kernel when its link dies (``PR_SET_PDEATHSIG``) and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import replace

from gymslurm.dispatch import Failed, probe_answers
from gymslurm.identity import redact_text
from gymslurm.supervision import (
    SUPERVISION_FD_ENV,
    Judgement,
    ServerEvent,
    Streak,
    SupervisionError,
    Timeline,
    evidence_wait_s,
    interruption_diagnostics,
    interruption_record,
    is_transport_failure,
    judge_failure,
    parse_event,
)


class Supervised:
    """Reads the channel on the collector's event loop and answers the dispatch loop's questions."""

    def __init__(self, fd: int, on_gave_up: Callable[[str], None], say: Callable[[str], None]) -> None:
        self.fd, self.on_gave_up, self.say = fd, on_gave_up, say
        self.on_share: Callable[[float], None] | None = None  # the adaptive limit's, when it adapts
        self.timeline = Timeline()
        self.closed = False
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._pending = b""  # a part line read by start(), before the reader took over

    @classmethod
    def from_environment(
        cls, on_gave_up: Callable[[str], None], say: Callable[[str], None]
    ) -> Supervised | None:
        """The channel named by ``GYMSLURM_SUPERVISION_FD``, or None when there is none."""
        raw = os.environ.get(SUPERVISION_FD_ENV)
        if not raw:
            return None
        try:
            fd = int(raw)
            os.fstat(fd)
        except (ValueError, OSError) as error:
            raise SupervisionError(
                f"{SUPERVISION_FD_ENV}={raw!r} does not name an open pipe ({error}); it is set by "
                "`gymslurm chain-step` for its collector: unset it to collect by hand"
            ) from None
        return cls(fd, on_gave_up, say)

    async def start(self) -> None:
        """Apply the events already in the channel, then read the rest as they come.

        What the link wrote before this collector reached dispatch (a suite link starts its
        collectors while the shared model server still loads, and says so with ``down``) holds
        the first request: read later by the task, it could let requests go to a server not up yet.
        """
        self._pending = self._drain()
        self._task = asyncio.create_task(self._read())

    def _drain(self) -> bytes:
        """Apply every whole event waiting in the pipe now (never blocks); the part line left."""
        buffered = b""
        blocking = os.get_blocking(self.fd)
        os.set_blocking(self.fd, False)
        try:
            while chunk := os.read(self.fd, 65536):
                buffered += chunk
        except BlockingIOError:
            pass
        finally:
            os.set_blocking(self.fd, blocking)
        *lines, rest = buffered.split(b"\n")
        for line in lines:
            if line.strip():
                self._apply(parse_event(line + b"\n"))
        return rest

    async def close(self) -> None:
        """Stop reading."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        if self._pending:
            reader.feed_data(self._pending)
        pipe = os.fdopen(self.fd, "rb", buffering=0, closefd=True)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        try:
            while line := await reader.readline():
                self._apply(parse_event(line))
                async with self._changed:
                    self._changed.notify_all()
        finally:
            self.closed = True
            transport.close()
            gone = "the link supervising the job's servers ended (its servers die with it)"
            self.timeline.apply(ServerEvent("stopping", time.monotonic(), cause=gone))
            async with self._changed:
                self._changed.notify_all()

    def _apply(self, event: ServerEvent) -> None:
        """Fold one event in and say what changes dispatch."""
        was_down = self.timeline.down
        self.timeline.apply(event)
        if event.kind in ("down", "up", "gave_up"):
            self.say(f"supervision: {event.kind} {event.server or ''} {event.cause or ''}".rstrip())
        if not was_down and self.timeline.down:
            self.say("dispatch paused until the server is back")
        if event.kind == "gave_up":
            self.on_gave_up(f"supervision: the link gave up on server {event.server!r}")
        if event.kind == "share" and event.share is not None and self.on_share is not None:
            self.on_share(event.share)

    async def wait_dispatchable(self) -> None:
        """Return once no supervised server is down (at once when none is); never once the job stops.

        A stopping job (the link got TERM/USR1/INT, or the link ended) dispatches nothing more: the
        link forwards the signal to us, and our own stop cancels this wait. Without this, a request
        that failed because its server got the signal first freed the slot, and the next row was
        reserved and sent to a dying server: a second attempt to re-send per link at every pause.
        """

        def held() -> bool:
            return self.timeline.down or self.timeline.stopping_at is not None

        if not held():
            return
        async with self._changed:
            await self._changed.wait_for(lambda: not held())

    async def judge(self, sent_at: float, failed_at: float) -> Judgement:
        """Whose a failure is, waiting (bounded) for the supervisor's next round when unknown yet."""
        verdict = judge_failure(sent_at, failed_at, self.timeline)
        if verdict.verdict != "wait" or self.closed:
            return verdict if verdict.verdict != "wait" else Judgement("rollout")

        def known() -> bool:
            return self.closed or judge_failure(sent_at, failed_at, self.timeline).verdict != "wait"

        with contextlib.suppress(TimeoutError):
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(known), evidence_wait_s(self.timeline))
        verdict = judge_failure(sent_at, failed_at, self.timeline)
        return verdict if verdict.verdict != "wait" else Judgement("rollout")

    async def review(self, outcome: Failed, sent_at: float) -> tuple[Failed, bool]:
        """The outcome to save for a failed request, and whether it is an interruption."""
        failed_at = time.monotonic()
        judgement = await self.judge(sent_at, failed_at)
        if judgement.verdict != "interruption" or judgement.evidence is None:
            return outcome, False
        record = outcome.record
        diagnostics = {
            **(outcome.diagnostics or {}),
            **interruption_diagnostics(record, judgement.evidence, sent_at, failed_at),
        }
        new = interruption_record(record, judgement.evidence)
        return replace(outcome, record=new, legacy_class=None, diagnostics=diagnostics), True


HOLD_S = 5.0  # a held transport failure waits at most this long for the streak to decide


class Breaker:
    """The collector's circuit breaker for servers nobody supervises (docs/servers.md).

    ``dispatch_breaker_failures`` transport failures in a row across different rollouts (held,
    unsaved, meanwhile) trigger one probe of the server (``dispatch.probe_answers``: any HTTP
    answer). A server that answers: the held failures are the rollouts' own. One that does not:
    they are interruptions (``cause: server_unreachable``), dispatch pauses, and the server is
    probed every ``interval_s`` for ``wait_s``; back: dispatch resumes; still down: ``on_dead``
    stops the invocation (exit 1, retryable) having charged nobody. A held failure waits at most
    :data:`HOLD_S` for the streak (with one request in flight there is no streak): then it is
    probed on its own.
    """

    def __init__(
        self,
        threshold: int,
        wait_s: float,
        on_dead: Callable[[str], None],
        say: Callable[[str], None],
        *,
        interval_s: float = 1.0,
        probe: Callable[[str], bool] | None = None,
    ) -> None:
        self.streak, self.wait_s, self.interval_s = Streak(threshold), wait_s, interval_s
        self.on_dead, self.say = on_dead, say
        self.probe = probe or _probe_answers
        self.held: list[asyncio.Future[bool]] = []
        self.down_url: str | None = None
        self.dead: str | None = None
        self._back = asyncio.Event()
        self._back.set()
        self._probing: asyncio.Task[None] | None = None

    async def wait_dispatchable(self) -> None:
        """Return once the breaker is closed."""
        await self._back.wait()

    def answered(self) -> None:
        """A server answered a request: the streak breaks and held failures are the rollouts' own."""
        self.streak.broken()
        self._release(False)

    def _release(self, server_fault: bool) -> None:
        for future in self.held:
            if not future.done():
                future.set_result(server_fault)
        self.held.clear()

    async def review(self, outcome: Failed, url: str, sent_at: float) -> tuple[Failed, bool]:
        """The outcome to save for a failed request, and whether it is an interruption."""
        record = outcome.record
        if not is_transport_failure(record):
            self.answered()
            return outcome, False
        if self.down_url is None:
            future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self.held.append(future)
            if self.streak.add(record.episode_id.rollout_id) == "probe":
                self._start_probe(url)
            try:
                server_fault = await asyncio.wait_for(asyncio.shield(future), HOLD_S)
            except TimeoutError:
                self._start_probe(url)
                server_fault = await future
            if not server_fault:
                return outcome, False
        shown = redact_text(url)  # evidence is saved in the sidecar: never a URL's password
        evidence = {
            "cause": "server_unreachable",
            "server": shown,
            "how": f"transport failures in a row across {self.streak.threshold} rollouts and {shown} "
            "did not answer a probe",
        }
        failed_at = time.monotonic()
        diagnostics = {
            **(outcome.diagnostics or {}),
            **interruption_diagnostics(record, evidence, sent_at, failed_at),
        }
        return replace(outcome, record=interruption_record(record, evidence), diagnostics=diagnostics), True

    def _start_probe(self, url: str) -> None:
        if self._probing is None or self._probing.done():
            self._probing = asyncio.create_task(self._probe(url))

    async def _probe(self, url: str) -> None:
        if await asyncio.to_thread(self.probe, url):
            self.answered()
            return
        self.down_url = url
        self._back.clear()
        self._release(True)
        self.say(f"circuit breaker open: {url} does not answer; dispatch paused for up to {self.wait_s:g}s")
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            await asyncio.sleep(self.interval_s)
            if await asyncio.to_thread(self.probe, url):
                self.say(f"circuit breaker closed: {url} answers again; dispatch resumes")
                self.down_url = None
                self.streak.broken()
                self._back.set()
                return
        self.dead = url
        self.on_dead(f"circuit breaker: {url} did not answer for {self.wait_s:g}s")
        self._back.set()


def _probe_answers(url: str) -> bool:
    return probe_answers(url, timeout_s=5.0)
