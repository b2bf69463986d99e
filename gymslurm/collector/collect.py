"""The collection: lock → prepare → reconcile → reserve → dispatch → save → coverage → exit → seal.

This module ties the pieces together and owns no format of its own (docs/architecture.md):
settings.py (typed configuration), tasks.py (materialization), identity.py (what a run measured),
store/ (every file of the run), selection.py/coverage.py (pure decisions), dispatch/ (HTTP).

Order matters and is the point of this module (spec 000):

1. The run lock is taken on the *resolved* output path before anything is read or written.
2. collector/prepare.py validates or creates the run: a resume validates identity before touching a byte (a
   semantic change is refused naming the keys; an operational change goes on with a warning and a
   drift line); a run with no manifest is refused unless ``allow_unsafe_resume``; a partial initial
   cache prints ``Skipping resume_from_cache`` and starts fresh. Only then are torn tails repaired.
3. Every dispatch is preceded by a durable reservation of its execution number; an interruption
   leaves the reservation without an outcome, so the rollout is *missing* (unfinished), not failed.
4. Retryable failures that spent budget are dispatched again in the same invocation (README
   reading 7) as new reservations, until their budget is spent.
5. SIGTERM / SIGINT / SIGUSR1 stop dispatch at once and cancel in-flight requests; coverage is
   written and the lock released; the exit code comes from ``completion_exit_code``.
6. A collection that ends finished seals the run last (collector/seal.py): the same command's resume
   is then answered from the seal, without this module.

Hot-path trade-offs: the loop keeps per-rollout state in plain lists (no pydantic per rollout);
progress is a handful of integer counters sampled by a ticker; outcomes are saved synchronously
between two awaits, so a cancellation can only land while a request is in flight.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import urlsplit

from gymslurm.clock import utc_now
from gymslurm.collector.end import (
    export_metrics,
    final_exit,
    not_asked_after_a_stall,
    publish_reports,
    resume_answer,
    run_health_hook,
)
from gymslurm.collector.live import STALL, LiveWatch
from gymslurm.collector.prepare import Prepared, environment_config, prepare, refuse_before_writing
from gymslurm.collector.routing import Routing, resolve_routing
from gymslurm.collector.seal import Invocation, ServerConfigs, Tee, Transcript, seal
from gymslurm.collector.view import (
    LoopResult,
    OriginStamps,
    RunView,
    TaskUrls,
    Urls,
    initial_counters,
    pending_order,
    shown_as,
)
from gymslurm.collector.watch import Breaker, Supervised
from gymslurm.concurrency import AdaptiveLimit
from gymslurm.coverage import Coverage, compute_coverage
from gymslurm.dispatch import (
    Completed,
    EnvironmentClient,
    Failed,
    ModelLoad,
    Outcome,
    fetch_environment_config,
    watch_model_queue,
)
from gymslurm.errors import IncompleteRunError, StoreError
from gymslurm.exitcodes import ExitCode
from gymslurm.progress import Counters, make_reporter, say
from gymslurm.records import EpisodeId
from gymslurm.selection import (
    Disposition,
    SavedOutcome,
    counts_against_budget,
    establishes_progress,
)
from gymslurm.settings import CollectSettings
from gymslurm.store import RunLock, RunPaths, RunStore
from gymslurm.store.paths import others_writable_warning
from gymslurm.store.seal import write_seal

construct_episode = EpisodeId.model_construct  # ids were validated at materialization: no re-validation
SIGNAL_NAMES = ("SIGTERM", "SIGINT", "SIGUSR1")


# --- the collection itself ------------------------------------------------------------------------


class RolloutClient(Protocol):
    """What the loop needs of a client (``dispatch.EnvironmentClient``): one episode attempt."""

    async def run(
        self, url: str, episode: EpisodeId, task: Mapping[str, Any], *, indices: tuple[int, int] = (0, 0)
    ) -> Outcome: ...


@dataclass
class DispatchLoop:
    """Dispatches pending rollouts with bounded concurrency until done, drained, or stopped."""

    view: RunView
    client: RolloutClient
    reserve: Callable[[int], int]
    save: Callable[[int, int, Outcome], SavedOutcome]
    urls: Urls  # rollout index → its Environment Server
    counters: Counters
    concurrency: int
    retry_in_invocation: bool = True
    deadline: float | None = None
    supervised: Supervised | None = None  # the link's view of the job's servers, if any
    breaker: Breaker | None = None  # the outside view when nobody supervises the servers
    limit: AdaptiveLimit | None = None  # an adaptive in-flight limit under the cap (gymslurm/concurrency.py)
    stop_grace_s: float = 0.5  # how long a lost connection waits for our own stop signal (see _work)
    tick_s: float = 0.25  # how often run_dispatch calls its ticks (live counters, the live progress file)
    result: LoopResult = field(default_factory=LoopResult)
    _queue: collections.deque[int] = field(default_factory=collections.deque)
    _shown: list[tuple[Disposition, bool]] = field(default_factory=list)  # what the counters show per rollout
    _workers: list[asyncio.Task[None]] = field(default_factory=list)
    _stopping: bool = False
    in_flight_since: dict[int, float] = field(default_factory=dict)
    _below_limit: asyncio.Event = field(default_factory=asyncio.Event)
    last_outcome_at: float = field(default_factory=time.monotonic)
    busy_s: float = 0.0  # time with at least one request in flight (the rest is idle: launcher/links.py)
    _busy_since: float | None = None
    request_s: float = 0.0  # summed over the requests completed: each one's time in flight

    async def run(self, order: list[int]) -> LoopResult:
        """Dispatch ``order`` (and in-invocation retries); returns when every worker has finished."""
        self._queue.extend(order)
        self._shown = [shown_as(state) for state in self.view.states]
        self.last_outcome_at = time.monotonic()
        count = min(self.concurrency, max(len(order), 1))
        self._workers = [asyncio.create_task(self._worker()) for _ in range(count)]
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self.deadline is not None and self._queue and not self._stopping:
            self.result.budget_drained = len(self._queue)
        return self.result

    @property
    def stopping(self) -> bool:
        """Whether the loop was asked to stop (no new dispatch)."""
        return self._stopping

    def stop(self, reason: str) -> None:
        """Stop dispatching now and cancel the requests in flight (their reservations stay: missing)."""
        if self.result.stopped_by is None:
            self.result.stopped_by = reason
        self._stopping = True
        self._below_limit.set()
        for worker in self._workers:
            worker.cancel()

    async def _worker(self) -> None:
        """One of ``concurrency`` workers; any error (protocol, store) stops every worker and is kept."""
        try:
            await self._work()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self.result.error is None:
                self.result.error = error
            self.stop("error")

    async def _work(self) -> None:
        queue, view, counters = self._queue, self.view, self.counters
        supervised, breaker = self.supervised, self.breaker
        watch = supervised or breaker  # the link's view of the job's servers, or the breaker's
        while queue and not self._stopping:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return
            if watch is not None:
                await watch.wait_dispatchable()  # a server is down: pause
                if not queue or self._stopping:
                    return
            if self.limit is not None:
                await self._wait_below_limit()
                if not queue or self._stopping:
                    return
            index = queue.popleft()
            attempt = self.reserve(index)
            view.mark_reserved(index, attempt)
            episode = construct_episode(rollout_id=view.ids[index], attempt=attempt)
            counters.in_flight += 1
            sent_at = time.monotonic()
            if self._busy_since is None:
                self._busy_since = sent_at
            self.in_flight_since[index] = sent_at
            try:
                outcome = await self.client.run(
                    self.urls[index], episode, view.wire_task(index), indices=view.indices(index)
                )
            finally:
                counters.in_flight -= 1
                self.request_s += time.monotonic() - self.in_flight_since.pop(index, sent_at)
                if counters.in_flight == 0 and self._busy_since is not None:
                    self.busy_s += time.monotonic() - self._busy_since
                    self._busy_since = None
            if self.limit is not None:
                self.limit.completed(time.monotonic() - sent_at, counters.in_flight)
                self._below_limit.set()
            self.result.dispatched += 1
            if supervised is not None and isinstance(outcome, Failed):
                # Whose failure is it? A supervised server's death or the job's stop: an interruption.
                outcome, interrupted = await supervised.review(outcome, sent_at)
                self._record(index, self.save(index, attempt, outcome), interrupted=interrupted)
                continue
            if breaker is not None:
                if not isinstance(outcome, Failed):
                    breaker.answered()
                else:  # a transport failure waits for the breaker's verdict: the server's or the rollout's
                    outcome, interrupted = await breaker.review(outcome, self.urls[index], sent_at)
                    self._record(index, self.save(index, attempt, outcome), interrupted=interrupted)
                    continue
            if lost_connection(outcome):
                # Slurm signals every process of a job at once (scancel, requeue, preemption, node
                # failure): the Environment Server may drop our connection a moment before our own
                # signal arrives. Wait for it briefly: a stop now makes this an interruption
                # (missing, no budget spent), not a counted failure. Healthy runs never pay this.
                await asyncio.sleep(self.stop_grace_s)
            self._record(index, self.save(index, attempt, outcome))

    async def _wait_below_limit(self) -> None:
        """Wait until fewer requests are in flight than the adaptive limit allows."""
        assert self.limit is not None
        while self.counters.in_flight >= self.limit.current and not self._stopping:
            self._below_limit.clear()
            await self._below_limit.wait()

    def server_queue(self, load: ModelLoad) -> None:
        """The model server's load (its replicas' together, from their metrics): the limit weighs it."""
        if self.limit is not None:
            self.limit.server_queue(load.waiting, load.kv_usage, load.running, self.counters.in_flight)
            self._below_limit.set()

    def _record(self, index: int, saved: SavedOutcome, *, interrupted: bool = False) -> None:
        view, policy = self.view, self.view.policy
        self.last_outcome_at = time.monotonic()
        if establishes_progress(saved, policy):
            self.result.progress_outcomes += 1
        if saved.kind == "failure":
            self.result.new_failures += 1
        if interrupted:
            self.result.interruptions += 1
        state = view.advance(index, saved)
        self._move(index, shown_as(state))
        retry = interrupted or counts_against_budget(saved, policy)  # an interruption runs again free
        if state.pending and self.retry_in_invocation and retry:
            self._queue.append(index)

    def busy_seconds(self, now: float) -> float:
        """Seconds so far with at least one request in flight (``now``: the monotonic clock)."""
        return self.busy_s + (now - self._busy_since if self._busy_since is not None else 0.0)

    def in_flight_seconds(self, now: float) -> tuple[float, int]:
        """Each request's time in flight so far, summed (those out: until ``now``), and how many were sent."""
        out = sum(now - since for since in self.in_flight_since.values())
        return self.request_s + max(out, 0.0), self.result.dispatched + len(self.in_flight_since)

    def oldest_in_flight_s(self, now: float) -> float | None:
        """Age of the oldest request still in flight, or None when none is."""
        return max(now - min(self.in_flight_since.values()), 0.0) if self.in_flight_since else None

    def _move(self, index: int, new: tuple[Disposition, bool]) -> None:
        old = self._shown[index]
        if old == new:
            return
        self.counters.tally(old[0], -1, old[1])
        self.counters.tally(new[0], 1, new[1])
        self._shown[index] = new


def build_coverage(view: RunView, loop: LoopResult) -> Coverage:
    """The coverage inventory after this invocation."""
    return compute_coverage(
        view.states,
        run_id=view.run_id,
        attempts=sum(view.reserved),
        policy=view.policy,
        identity_verified=view.identity_verified,
        historical_failed_attempts=view.historical_failed_attempts + loop.new_failures,
        progress_outcomes_recorded=loop.progress_outcomes,
        written_at=utc_now(),
    )


LOST_CONNECTION_KINDS = frozenset({"transport_peer_drop", "transport_unreachable"})


def lost_connection(outcome: Outcome) -> bool:
    """Whether the collector saw the connection drop or fail (not an answer from the server)."""
    record = getattr(outcome, "record", None)  # only a Failed has one
    return (
        record is not None
        and record.source == "collector"
        and record.failure.failure_kind in LOST_CONNECTION_KINDS
    )


class SignalStop:
    """Routes SIGTERM/SIGINT/SIGUSR1 to ``loop.stop`` while installed (the loop's own event loop)."""

    def __init__(self, on_signal: Callable[[str], None]) -> None:
        self.on_signal = on_signal
        self.installed: list[int] = []

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Route the stop signals to ``on_signal``."""
        for name in SIGNAL_NAMES:
            number = getattr(signal, name, None)
            if number is not None:
                loop.add_signal_handler(number, self.on_signal, name)
                self.installed.append(number)

    def remove(self, loop: asyncio.AbstractEventLoop) -> None:
        """Restore the default handlers."""
        for number in self.installed:
            loop.remove_signal_handler(number)
        self.installed.clear()


async def run_dispatch(loop_: DispatchLoop, order: list[int], *ticks: Callable[[float], None]) -> LoopResult:
    """Run the dispatch loop with signal handling and a ticker calling each of ``ticks`` every
    ``loop_.tick_s`` seconds (a knob: tests turn it)."""
    aio = asyncio.get_running_loop()
    stopper = SignalStop(loop_.stop)
    stopper.install(aio)
    ticker = asyncio.create_task(_tick(loop_.tick_s, *ticks))
    try:
        return await loop_.run(order)
    finally:
        ticker.cancel()
        stopper.remove(aio)


async def _tick(every_s: float, *ticks: Callable[[float], None]) -> None:
    while True:
        await asyncio.sleep(every_s)
        now = time.monotonic()
        for tick in ticks:
            tick(now)


# --- the command ---------------------------------------------------------------------------------


def collect(
    settings: CollectSettings,
    raw: dict[str, Any],
    *,
    stderr: IO[str] = sys.stderr,
    stdout: IO[str] = sys.stdout,
    fetch: Callable[[str], dict[str, Any]] | None = None,
) -> ExitCode:
    """Run one collection from Python (the public ``gymslurm.collect``); return its exit code.

    Under ``require_complete`` an incomplete run raises :class:`~gymslurm.errors.IncompleteRunError`
    (001's ``RuntimeError``) carrying the status the command line exits with (75 / 1 / 76); the saved
    partial results stay valid. Otherwise the exit code is returned (0, or 1 after a stall or a dead
    server). ``fetch`` reads an Environment Server's configuration (the HTTP seam).
    """
    code = run_collect(settings, raw, stderr=stderr, stdout=stdout, fetch=fetch)
    if settings.require_complete and code in INCOMPLETE:
        raise IncompleteRunError(code, f"the run at {settings.output_jsonl_fpath} is incomplete; resume it")
    return code


INCOMPLETE = frozenset({ExitCode.CONTINUE, ExitCode.RETRY, ExitCode.STOP})


def run_collect(
    settings: CollectSettings,
    raw: dict[str, Any],
    *,
    stderr: IO[str] = sys.stderr,
    stdout: IO[str] = sys.stdout,
    fetch: Callable[[str], dict[str, Any]] | None = None,
    command: Invocation | None = None,
) -> ExitCode:
    """Run one collection invocation; return the exit code ``gymslurm collect`` exits with (0/1/75/76).

    ``fetch`` reads an Environment Server's configuration (the HTTP seam; default
    :func:`gymslurm.dispatch.fetch_environment_config`). ``command``: the command line this runs, so
    that a collection ending finished can seal the run for its resume (collector/seal.py).
    """
    paths = RunPaths.for_output(settings.output_jsonl_fpath)
    refuse_before_writing(settings, paths)
    fetch_config = ServerConfigs(fetch or fetch_environment_config)  # each read once, kept for the seal
    # Which server runs each taskset and how it speaks, read from NeMo Gym's configuration: a name or
    # a server type gymslurm cannot resolve is refused here, before the output folder exists.
    routing = resolve_routing(settings, environment_config(settings, fetch_config))
    paths.folder.mkdir(parents=True, exist_ok=True)
    if warning := others_writable_warning(paths.folder, paths.folder.stat().st_mode):
        say(stderr, f"warning: {warning}")
    with RunLock(paths.lock):
        prepared = prepare(settings, raw, paths, stderr, fetch_config, routing=routing)
        try:
            code, answer = _collect_prepared(settings, prepared, paths, stderr, stdout, routing)
        finally:
            prepared.store.close()  # its last write (the outcome index) comes before the seal
        if command is not None and answer is not None:
            _seal(command, raw, settings, paths, answer, servers=fetch_config.asked)
        return code


def _collect_prepared(  # noqa: PLR0917
    settings: CollectSettings,
    prepared: Prepared,
    paths: RunPaths,
    stderr: IO[str],
    stdout: IO[str],
    routing: Routing,
) -> tuple[ExitCode, Callable[[Transcript], int] | None]:
    """The collection of a prepared run: its exit code, and how a resume of it would answer when it
    ends finished (nothing left to dispatch, every report written, nothing for a resume to change)."""
    store, rec = prepared.store, prepared.reconciliation
    view = RunView(
        tasks=store.rollout_index,  # rows read back when dispatched: never all in memory
        ids=store.rollout_index.ids,
        reserved=list(store.table.counts()),
        states=list(rec.states),
        policy=rec.policy,
        run_id=store.run_id,
        identity_verified=store.manifest.identity_verified,
        historical_failed_attempts=rec.historical_failed_attempts,
    )
    order = pending_order(view, view.states, settings.dispatch_longest_first)
    result = LoopResult()
    if order:
        typed = frozenset(url for url, protocol in routing.protocols().items() if protocol == "episode")
        store.stamp_origins(OriginStamps(routing.url_for, routing.origins(), typed))
        counters = initial_counters(view.states)
        store.write_coverage(build_coverage(view, result))
        say(
            stderr,
            f"{len(order)} of {len(view.states)} rollouts to dispatch "
            f"({counters.finished} already have an outcome); output {paths.output}",
        )
        result = asyncio.run(_dispatch(settings, store, view, order, counters, routing))
        del order  # its ints (one per rollout dispatched) are not held through the reports
    coverage = build_coverage(view, result)
    post = not_asked_after_a_stall if result.stopped_by == STALL else None
    health = Tee(stderr)
    check = [] if settings.disable_health_check else [lambda: run_health_hook(paths, view, health)]
    written = publish_reports(
        [
            lambda: store.write_coverage(coverage),
            lambda: export_metrics(settings, store, view, coverage, routing, stderr, post),
            *check,
        ],
        result,
        stderr,
    )
    finished = written and prepared.repeats_quietly and result.error is None and not settings.resubmit
    answer = None
    if finished and not any(state.pending for state in view.states):
        answer = resume_answer(settings, store, view, coverage, routing, health.said)
    return final_exit(settings, coverage, result, paths, stderr, stdout), answer


def _seal(
    command: Invocation,
    raw: dict[str, Any],
    settings: CollectSettings,
    paths: RunPaths,
    answer: Callable[[Transcript], int],
    *,
    servers: Mapping[str, str | None],
) -> None:
    """Seal a finished run for the resume of ``command``, last of all its writes (store/seal.py).

    A seal that cannot be written is no loss: the next resume takes the full path. ``servers``: the
    servers the identity read, and their answers' digests (asked again before the seal answers).
    """
    sealed = seal(command, raw, paths, Path(settings.input_jsonl_fpath), answer, servers=servers)
    if sealed is not None:
        with contextlib.suppress(StoreError, OSError):
            write_seal(paths, sealed)


async def _dispatch(  # noqa: PLR0917
    settings: CollectSettings,
    store: RunStore,
    view: RunView,
    order: list[int],
    counters: Counters,
    routing: Routing,
) -> LoopResult:
    urls = TaskUrls(view, routing.url_for)
    reporter = make_reporter(settings.progress, counters, settings.progress_interval_s)
    deadline = None if settings.dispatch_budget_s is None else time.monotonic() + settings.dispatch_budget_s
    client = EnvironmentClient(
        concurrency=settings.concurrency,
        run_id=view.run_id,
        route_failures=settings.route_failures_to_sidecar,
        read_timeout=settings.request_timeout_s,
        max_reply_bytes=settings.max_reply_bytes,
        max_inflight_reply_bytes=settings.max_inflight_reply_bytes,
        protocol=routing.protocols(),
    )

    def tell(message: str) -> None:
        say(sys.stderr, message)

    supervised = Supervised.from_environment(lambda why: loop_.stop(why), tell)  # noqa: PLW0108
    breaker = None
    if supervised is None and settings.dispatch_breaker_failures:
        breaker = Breaker(
            settings.dispatch_breaker_failures,
            settings.dispatch_breaker_wait_s,
            lambda why: loop_.stop(why),  # noqa: PLW0108 (loop_ is bound below)
            tell,
        )
    loop_ = DispatchLoop(
        view=view,
        client=client,
        reserve=store.reserve,
        save=saver(store),
        urls=urls,
        counters=counters,
        concurrency=settings.concurrency,
        retry_in_invocation=settings.retry_in_invocation,
        deadline=deadline,
        supervised=supervised,
        breaker=breaker,
        limit=None
        if settings.dispatch_adaptive == "off"
        else AdaptiveLimit.shared(settings.concurrency, settings.dispatch_load_share),
    )
    if supervised is not None and loop_.limit is not None:
        supervised.on_share = loop_.limit.set_share
    watch = LiveWatch(
        loop_, store.paths.progress, settings.live_progress_interval_s, settings.stall_window_s, sys.stderr
    )
    watch.write(time.monotonic())
    if supervised is not None:
        await supervised.start()
    poller, metrics_urls = None, settings.model_metrics_urls
    if settings.dispatch_adaptive == "metrics" and metrics_urls:
        where = ", ".join(urlsplit(url).netloc.rpartition("@")[2] for url in metrics_urls)
        print(f"gymslurm collect: adaptive load reads the model server's queue at {where}", file=sys.stderr)
        poller = asyncio.create_task(watch_model_queue(metrics_urls, loop_.server_queue))
    try:
        result = await run_dispatch(loop_, order, reporter.tick, watch.tick)
    finally:
        if poller is not None:
            poller.cancel()
        reporter.close(time.monotonic())
        watch.write(time.monotonic(), ended=True)
        await client.aclose()
        if supervised is not None:
            await supervised.close()
    if breaker is not None and breaker.dead is not None:
        result.server_dead = breaker.dead
    return result


def saver(store: RunStore) -> Callable[[int, int, Outcome], SavedOutcome]:
    """Save a dispatch outcome (Completed / Failed / Omitted) through the store; returns its summary."""
    append_result, append_failure, append_omission = (
        store.append_result,
        store.append_failure,
        store.append_omission,
    )

    def save(index: int, attempt: int, outcome: Outcome) -> SavedOutcome:
        if type(outcome) is Completed:
            return append_result(index, attempt, outcome.result)
        if type(outcome) is Failed:
            return append_failure(
                index,
                attempt,
                outcome.record,
                legacy_class=outcome.legacy_class,
                response=outcome.response,
                diagnostics=outcome.diagnostics,
            )
        return append_omission(index, attempt, getattr(outcome, "payload", None))

    return save
