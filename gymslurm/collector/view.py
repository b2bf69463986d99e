"""What a collection holds in memory while it runs, and what its dispatch loop reports.

``RunView`` is the run's per-rollout state (plain lists: no model per rollout), advanced with the
store's selection rules as outcomes are saved; ``LoopResult`` is what the loop did, which the end
of the collection (``collector/end.py``) turns into reports and an exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gymslurm.collector.prepare import Task
from gymslurm.nemogym import ServerOrigin
from gymslurm.progress import Counters
from gymslurm.selection import (
    BudgetPolicy,
    Disposition,
    RolloutState,
    SavedOutcome,
    advance_state,
    is_kill_shaped,
)


class TaskRows(Protocol):
    """The materialized tasks by rollout index (the store's ``RolloutIndex``, or a list in tests)."""

    def __getitem__(self, index: int, /) -> Task: ...

    def __len__(self) -> int: ...


@dataclass
class RunView:
    """A run's per-rollout state held in memory during a collection (plain lists, no models).

    ``states`` starts as the store's reconciliation and is advanced as outcomes are saved, with the
    same selection rules (:func:`gymslurm.selection.advance_state`), so the loop never re-reads the
    run's files.

    What is kept per rollout is compact: its id, its reservation count and its state. The tasks are
    not held: ``tasks`` is the store's index of the materialized inputs in a collection (a row is
    read back by offset when it is dispatched, and kept only while in flight); tests give a list.
    """

    tasks: TaskRows
    reserved: list[int]
    states: list[RolloutState]
    policy: BudgetPolicy
    run_id: str
    identity_verified: bool
    historical_failed_attempts: int
    ids: Sequence[str] = ()
    _open: dict[int, Task] = field(default_factory=dict, repr=False)  # the tasks in flight

    def __post_init__(self) -> None:
        if not self.ids:
            self.ids = [self.tasks[index]["_ng_rollout_id"] for index in range(len(self.tasks))]

    def task(self, index: int) -> Task:
        """Rollout ``index``'s materialized task, read once per dispatch."""
        task = self._open.get(index)
        if task is None:
            task = self._open[index] = self.tasks[index]
        return task

    def wire_task(self, index: int) -> dict[str, Any]:
        """The ``task`` of a ``POST /run`` body: only ``task_id`` and ``task_input`` (servers reject more)."""
        task = self.task(index)
        return {"task_id": task["task_id"], "task_input": task["task_input"]}

    def indices(self, index: int) -> tuple[int, int]:
        """(task index, repeat index) of rollout ``index``: what a flat legacy row is stamped with."""
        task = self.task(index)
        return task.get("_ng_task_index", 0), task.get("_ng_rollout_index", 0)

    def mark_reserved(self, index: int, attempt: int) -> None:
        """Execution ``attempt`` is reserved and has no outcome yet: the rollout is missing until saved."""
        self.reserved[index] = attempt + 1
        state = self.states[index]
        self.states[index] = RolloutState(
            Disposition.MISSING, None, state.counted_failures, True, False, limit=state.limit
        )

    def advance(self, index: int, saved: SavedOutcome) -> RolloutState:
        """Select rollout ``index`` again now that ``saved`` (its newest execution) has an outcome."""
        state = advance_state(self.states[index], saved, self.reserved[index], self.policy)
        self.states[index] = state
        self._open.pop(index, None)
        return state


class Urls(Protocol):
    """Rollout index → its Environment Server's URL (:class:`TaskUrls`, or a list in tests)."""

    def __getitem__(self, index: int, /) -> str: ...


class TaskUrls:
    """The Environment Server of each rollout, from its task's taskset (read when it is dispatched)."""

    def __init__(self, view: RunView, url_for: Callable[[str], str]) -> None:
        self._view, self._url_for = view, url_for

    def __getitem__(self, index: int) -> str:
        return self._url_for(self._view.task(index)["task_id"]["taskset"])

    def __len__(self) -> int:
        return len(self._view.ids)


def pending_order(view: RunView, states: list[RolloutState], longest_first: bool) -> list[int]:
    """The rollouts to dispatch, in rollout order, or by expected duration (longest first) when asked."""
    pending = [index for index, state in enumerate(states) if state.pending]
    if longest_first:
        tasks = view.tasks
        pending.sort(key=lambda index: -float(tasks[index].get("_ng_expected_duration_s") or 0.0))
    return pending


class OriginStamps(dict[str, dict[str, Any] | None]):
    """NeMo Gym's origin stamps of each taskset's server (``RunStore.stamp_origins``), found as met.

    The tasksets of a run are not listed up front (that would read every task): each is looked up
    the first time a record of it is saved.
    """

    def __init__(
        self,
        url_for: Callable[[str], str],
        origins: Mapping[str, ServerOrigin | None],
        episode_urls: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self._url_for, self._origins, self._episode_urls = url_for, origins, episode_urls

    def __missing__(self, taskset: str) -> dict[str, Any] | None:
        url = self._url_for(taskset)
        origin = self._origins.get(url)
        stamps = self[taskset] = origin.stamps(agent_ref=url not in self._episode_urls) if origin else None
        return stamps

    def get(self, taskset: str, default: object = None) -> dict[str, Any] | None:
        """The taskset's stamps, found as met (``default`` is never used: every taskset has an answer)."""
        return self[taskset]

    def __bool__(self) -> bool:
        return bool(self._origins)


@dataclass
class LoopResult:
    """What one dispatch loop did."""

    progress_outcomes: int = 0
    new_failures: int = 0
    stopped_by: str | None = None
    budget_drained: int = 0
    error: BaseException | None = None
    dispatched: int = 0
    interruptions: int = 0
    server_dead: str | None = None


_SHOWN: dict[tuple[Disposition, bool], tuple[Disposition, bool]] = {}  # each distinct pair, once


def shown_as(state: RolloutState) -> tuple[Disposition, bool]:
    """How the live counters show a rollout: its disposition, and whether its failure is an interruption.

    The loop keeps one per rollout: the pair is shared (a handful exist), not a new tuple each time.
    """
    failed = state.disposition is Disposition.FAILED and state.selected is not None
    shown = (state.disposition, failed and state.selected is not None and is_kill_shaped(state.selected))
    return _SHOWN.setdefault(shown, shown)


def initial_counters(states: list[RolloutState]) -> Counters:
    """Counters showing what was already saved before this invocation."""
    counters = Counters(total=len(states))
    for state in states:
        disposition, interrupted = shown_as(state)
        counters.tally(disposition, 1, interrupted)
    counters.done_before, counters.failed_before = counters.done, counters.failed
    counters.omitted_before = counters.omitted
    return counters
