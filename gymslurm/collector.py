"""The collection loop: lock → validate/prepare → reconcile → reserve → dispatch → save → coverage → exit.

This module ties the pieces together and owns no format of its own (docs/architecture.md):
settings.py (typed configuration), tasks.py (materialization), identity.py (what a run measured),
store/ (every file of the run), selection.py/coverage.py (pure decisions), dispatch.py (HTTP).

Order matters and is the point of this module (spec 000):

1. The run lock is taken on the *resolved* output path before anything is read or written.
2. A resume validates identity before touching a byte: a semantic change is refused naming the keys;
   an operational change goes on with a warning and a drift line. A run with no manifest is refused
   unless ``allow_unsafe_resume`` (then imported, ``identity_verified=false`` forever); a partial
   initial cache (no manifest, empty outcome files) prints ``Skipping resume_from_cache`` and starts
   fresh. Only then are torn tails repaired.
3. Every dispatch is preceded by a durable reservation of its execution number; an interruption
   leaves the reservation without an outcome, so the rollout is *missing* (unfinished), not failed.
4. Retryable failures that spent budget are dispatched again in the same invocation (README
   reading 7) as new reservations, until their budget is spent.
5. SIGTERM / SIGINT / SIGUSR1 stop dispatch at once and cancel in-flight requests; coverage is
   written and the lock released; the exit code comes from ``completion_exit_code``.

Hot-path trade-offs: the loop keeps per-rollout state in plain lists (no pydantic per rollout);
progress is a handful of integer counters sampled by a ticker; outcomes are saved synchronously
between two awaits, so a cancellation can only land while a request is in flight.

Deviation from docs/architecture.md: fetching the Environment Server's resolved configuration
(``GET /global_config_dict_yaml``) is a one-off synchronous GET done here rather than in dispatch.py,
whose client is asynchronous and per-episode.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from gymslurm.errors import ConfigError
from gymslurm.progress import Counters
from gymslurm.selection import (
    SUCCESSFUL,
    BudgetPolicy,
    Disposition,
    RolloutState,
    SavedOutcome,
    counts_against_budget,
    establishes_progress,
    select_rollout,
)

if TYPE_CHECKING:
    from gymslurm.coverage import Completion, Coverage
    from gymslurm.settings import CollectSettings

SIGNAL_NAMES = ("SIGTERM", "SIGINT", "SIGUSR1")
TICK_S = 0.25
CONFIG_ENDPOINT = "/global_config_dict_yaml"


# --- the Environment Server's resolved configuration (part of the identity) ------------------------


def fetch_environment_config(url: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The resolved configuration a running (NeMo Gym) head server reports at its config endpoint."""
    import httpx
    import yaml

    where = url + CONFIG_ENDPOINT
    advice = (
        "Start the Environment Server first, point +head_server_url= at the NeMo Gym head server, "
        "or give the configuration explicitly with +environment_config={...}"
    )
    try:
        response = httpx.get(where, timeout=timeout_s)
    except httpx.HTTPError as error:
        raise ConfigError(
            f"cannot read the Environment Server's configuration from {where}: {error}. {advice}"
        ) from None
    if response.status_code != 200:
        raise ConfigError(
            f"the Environment Server's configuration is required for the run's identity, but {where} "
            f"answered HTTP {response.status_code}. {advice}"
        )
    try:
        parsed = yaml.safe_load(response.text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{where} did not return YAML ({error}). {advice}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(f"{where} returned an empty or non-mapping configuration. {advice}")
    return parsed


def environment_config(settings: CollectSettings, fetch: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The Environment Server configuration for identity: given in settings, else fetched from the server(s).

    With several servers and no head server, each distinct server is asked and the answers are
    keyed by the tasksets it serves (addresses are operational; what they serve is not).
    """
    if settings.environment_config:
        return settings.environment_config
    source = settings.config_source_url()
    if source is not None:
        return fetch(source)
    by_url: dict[str, list[str]] = collections.defaultdict(list)
    for taskset, url in sorted(settings.environment_server_urls.items()):
        by_url[url].append(taskset)
    return {",".join(tasksets): fetch(url) for url, tasksets in sorted(by_url.items(), key=lambda kv: kv[1])}


def identity_config(raw: dict[str, Any], env_config: dict[str, Any]) -> dict[str, Any]:
    """The unresolved collect configuration with the Environment Server's configuration filled in."""
    return {**raw, "environment_config": raw.get("environment_config") or env_config}


# --- preparing the run --------------------------------------------------------------------------


@dataclass
class Inputs:
    """The source dataset as read and the tasks it materializes to."""

    source_path: Path
    source_digest: str
    tasks: list[dict[str, Any]]


def load_inputs(settings: CollectSettings) -> Inputs:
    """Read and materialize the dataset (ConfigError when it cannot be read)."""
    from gymslurm.tasks import MaterializeOptions, materialize, parse_rows, source_digest

    path = settings.input_jsonl_fpath
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(
            f"cannot read the input dataset {path}: {error.strerror}. Check +input_jsonl_fpath="
        ) from None
    options = MaterializeOptions(
        dataset_name=settings.taskset or path.stem,
        num_repeats=settings.num_repeats,
        limit=settings.limit,
        prompt_template=settings.prompt_template,
        prompt_field=settings.prompt_field,
    )
    rows = parse_rows(data, str(path), settings.limit)
    if not rows:
        raise ConfigError(
            f"the input dataset {path} has no tasks (after limit={settings.limit}): nothing to collect"
        )
    return Inputs(path, source_digest(data), materialize(rows, options))


# --- the collection itself ------------------------------------------------------------------------


@dataclass
class RunView:
    """A run's per-rollout state held in memory during a collection (plain lists, no models)."""

    tasks: list[dict[str, Any]]
    reserved: list[int]
    outcomes: list[list[SavedOutcome]]
    policy: BudgetPolicy
    run_id: str
    identity_verified: bool
    historical_failed_attempts: int

    def state(self, index: int) -> RolloutState:
        """The selected state of one rollout now."""
        return select_rollout(self.reserved[index], self.outcomes[index], self.policy)

    def states(self) -> list[RolloutState]:
        """The selected state of every rollout."""
        return [select_rollout(r, o, self.policy) for r, o in zip(self.reserved, self.outcomes, strict=True)]


def pending_order(view: RunView, states: list[RolloutState], longest_first: bool) -> list[int]:
    """The rollouts to dispatch, in rollout order, or by expected duration (longest first) when asked."""
    pending = [index for index, state in enumerate(states) if state.pending]
    if longest_first:
        tasks = view.tasks
        pending.sort(key=lambda index: -float(tasks[index].get("_ng_expected_duration_s") or 0.0))
    return pending


_CATEGORY = {Disposition.FAILED: 2, Disposition.OMITTED: 3}


def _category(state: RolloutState) -> int:
    if state.disposition in SUCCESSFUL:
        return 1
    return _CATEGORY.get(state.disposition, 0)


@dataclass
class LoopResult:
    """What one dispatch loop did."""

    progress_outcomes: int = 0
    new_failures: int = 0
    stopped_by: str | None = None
    budget_drained: int = 0
    error: BaseException | None = None
    dispatched: int = 0


@dataclass
class DispatchLoop:
    """Dispatches pending rollouts with bounded concurrency until done, drained, or stopped."""

    view: RunView
    client: Any  # dispatch.EnvironmentClient: ``await run(url, episode, task)``
    reserve: Callable[[int], int]
    save: Callable[[int, int, Any], SavedOutcome]
    urls: list[str]
    counters: Counters
    concurrency: int
    retry_in_invocation: bool = True
    deadline: float | None = None
    result: LoopResult = field(default_factory=LoopResult)
    _queue: collections.deque[int] = field(default_factory=collections.deque)
    _category: list[int] = field(default_factory=list)
    _workers: list[asyncio.Task[None]] = field(default_factory=list)
    _stopping: bool = False

    async def run(self, order: list[int], states: list[RolloutState]) -> LoopResult:
        """Dispatch ``order`` (and in-invocation retries); returns when every worker has finished."""
        self._queue.extend(order)
        self._category = [_category(state) for state in states]
        count = min(self.concurrency, max(len(order), 1))
        self._workers = [asyncio.create_task(self._worker()) for _ in range(count)]
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self.deadline is not None and self._queue and not self._stopping:
            self.result.budget_drained = len(self._queue)
        return self.result

    def stop(self, reason: str) -> None:
        """Stop dispatching now and cancel the requests in flight (their reservations stay: missing)."""
        if self.result.stopped_by is None:
            self.result.stopped_by = reason
        self._stopping = True
        for worker in self._workers:
            worker.cancel()

    async def _worker(self) -> None:
        queue, view, counters = self._queue, self.view, self.counters
        while queue and not self._stopping:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return
            index = queue.popleft()
            attempt = self.reserve(index)
            view.reserved[index] = attempt + 1
            task = view.tasks[index]
            episode = {"rollout_id": task["_ng_rollout_id"], "attempt": attempt}
            counters.in_flight += 1
            try:
                outcome = await self.client.run(self.urls[index], episode, task)
            except asyncio.CancelledError:
                raise
            except BaseException as error:
                self.result.error = error
                self.stop("error")
                raise
            finally:
                counters.in_flight -= 1
            self.result.dispatched += 1
            self._record(index, self.save(index, attempt, outcome))

    def _record(self, index: int, saved: SavedOutcome) -> None:
        view, policy = self.view, self.view.policy
        view.outcomes[index].append(saved)
        if establishes_progress(saved, policy):
            self.result.progress_outcomes += 1
        if saved.kind == "failure":
            self.result.new_failures += 1
        state = view.state(index)
        self._move(index, _category(state))
        if state.pending and self.retry_in_invocation and counts_against_budget(saved, policy):
            self._queue.append(index)

    def _move(self, index: int, new: int) -> None:
        old = self._category[index]
        if old == new:
            return
        counters = self.counters
        for category, delta in ((old, -1), (new, 1)):
            if category == 1:
                counters.done += delta
            elif category == 2:
                counters.failed += delta
            elif category == 3:
                counters.omitted += delta
        self._category[index] = new


def initial_counters(states: list[RolloutState]) -> Counters:
    """Counters showing what was already saved before this invocation."""
    counters = Counters(total=len(states))
    for state in states:
        category = _category(state)
        if category == 1:
            counters.done += 1
        elif category == 2:
            counters.failed += 1
        elif category == 3:
            counters.omitted += 1
    counters.done_before, counters.failed_before = counters.done, counters.failed
    counters.omitted_before = counters.omitted
    return counters


def build_coverage(view: RunView, states: list[RolloutState], loop: LoopResult) -> Coverage:
    """The coverage inventory after this invocation."""
    from gymslurm.coverage import compute_coverage

    return compute_coverage(
        states,
        run_id=view.run_id,
        attempts=sum(view.reserved),
        policy=view.policy,
        identity_verified=view.identity_verified,
        historical_failed_attempts=view.historical_failed_attempts + loop.new_failures,
        progress_outcomes_recorded=loop.progress_outcomes,
        written_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    )


def decide_exit(coverage: Coverage, require_complete: bool, made_progress: bool) -> Completion:
    """The completion: ``completion_exit_code`` with retryability read from coverage.

    Without ``require_complete`` a partial run exits 0; the only-omissions warning is still given.
    """
    from gymslurm.coverage import completion_exit_code

    completion = completion_exit_code(
        coverage,
        retryable=coverage.retryable > 0,
        made_progress=made_progress,
        require_complete=require_complete,
    )
    if not require_complete and completion.warning is None:
        strict = completion_exit_code(
            coverage, retryable=coverage.retryable > 0, made_progress=made_progress, require_complete=True
        )
        if strict.code == 0 and strict.warning:
            return type(completion)(completion.code, completion.reason, strict.warning)
    return completion


def exhausted_message(coverage: Coverage, failures_path: Path) -> str | None:
    """What to say when rollouts ran out of failure budget: how many, and where their failures are."""
    if not coverage.failure_budget_exhausted:
        return None
    return (
        f"{coverage.failure_budget_exhausted} rollout(s) used up their failure budget "
        f"(max_rollout_attempts={coverage.max_rollout_attempts}); their failures are in {failures_path}. "
        "Fix the cause, then `gymslurm resubmit` gives them a fresh budget"
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


async def run_dispatch(
    loop_: DispatchLoop, order: list[int], states: list[RolloutState], reporter_tick: Callable[[float], None]
) -> LoopResult:
    """Run the dispatch loop with signal handling and a progress ticker."""
    aio = asyncio.get_running_loop()
    stopper = SignalStop(loop_.stop)
    stopper.install(aio)
    ticker = asyncio.create_task(_tick(reporter_tick))
    try:
        return await loop_.run(order, states)
    finally:
        ticker.cancel()
        stopper.remove(aio)


async def _tick(reporter_tick: Callable[[float], None]) -> None:
    while True:
        await asyncio.sleep(TICK_S)
        reporter_tick(time.monotonic())


def now_iso() -> str:
    """The current UTC time, ISO-8601."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def say(stream: IO[str], message: str) -> None:
    """One line for the person running the collection."""
    print(f"gymslurm collect: {message}", file=stream, flush=True)
