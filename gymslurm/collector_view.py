"""What a collection holds in memory while it runs, and what its dispatch loop reports.

``RunView`` is the run's per-rollout state (plain lists: no model per rollout), advanced with the
store's selection rules as outcomes are saved; ``LoopResult`` is what the loop did, which the end
of the collection (``collector_end.py``) turns into reports and an exit code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gymslurm.prepare import Task
from gymslurm.selection import BudgetPolicy, Disposition, RolloutState, SavedOutcome, advance_state


@dataclass
class RunView:
    """A run's per-rollout state held in memory during a collection (plain lists, no models).

    ``states`` starts as the store's reconciliation and is advanced as outcomes are saved, with the
    same selection rules (:func:`gymslurm.selection.advance_state`), so the loop never re-reads the
    run's files.
    """

    tasks: list[Task]
    reserved: list[int]
    states: list[RolloutState]
    policy: BudgetPolicy
    run_id: str
    identity_verified: bool
    historical_failed_attempts: int

    def __post_init__(self) -> None:
        self.ids = [task["_ng_rollout_id"] for task in self.tasks]

    def wire_task(self, index: int) -> dict[str, Any]:
        """The ``task`` of a ``POST /run`` body: only ``task_id`` and ``task_input`` (servers reject more)."""
        task = self.tasks[index]
        return {"task_id": task["task_id"], "task_input": task["task_input"]}

    def indices(self, index: int) -> tuple[int, int]:
        """(task index, repeat index) of rollout ``index``: what a flat legacy row is stamped with."""
        task = self.tasks[index]
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
        return state


def pending_order(view: RunView, states: list[RolloutState], longest_first: bool) -> list[int]:
    """The rollouts to dispatch, in rollout order, or by expected duration (longest first) when asked."""
    pending = [index for index, state in enumerate(states) if state.pending]
    if longest_first:
        tasks = view.tasks
        pending.sort(key=lambda index: -float(tasks[index].get("_ng_expected_duration_s") or 0.0))
    return pending


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
