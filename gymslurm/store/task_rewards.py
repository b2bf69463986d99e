"""One run's saved outcomes per task, for ``gymslurm compare``: what each rollout became, by task.

Two kinds of input, read as the rest of gymslurm reads them:

- a **collector run** (its manifest beside it): opened read-only and reconciled by the store, so each
  rollout counts as its selected outcome (``latest_allocated``: an older attempt never counts), with
  its task from the materialized inputs; failed, omitted and unfinished rollouts are counted too;
- a **merged output** (``gymslurm aggregate``'s projection, a launcher run's ``output/merged``) or any
  file without a manifest: its rows as saved, the failure sidecar beside it if any. A file holding two
  outcomes of one rollout is a run's raw history, not a selection: refused, saying what to compare.

A rollout is *measured* when it is a completed, unmasked result whose metric (``reward`` by default,
or another field of the result row) is a real, finite number; masked and unscored results are counted
apart and never scored (docs/outcomes.md). The task of a row is its ``task_id`` (``taskset``,
``task_id``), else its ``_ng_task_index`` (NeMo Gym's rows), with an empty taskset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gymslurm.comparison import BenchmarkRewards, Category, TaskKey
from gymslurm.errors import ConfigError
from gymslurm.records import DEFAULT_MAX_ROLLOUT_ATTEMPTS
from gymslurm.selection import Disposition, RolloutState, SavedOutcome, is_numeric_reward
from gymslurm.store.existing import refuse_retired_journal
from gymslurm.store.history import row_outcome
from gymslurm.store.jsonl import iter_records, malformed
from gymslurm.store.paths import RunPaths

_BY_DISPOSITION: dict[Disposition, Category] = {
    Disposition.MASKED: "masked",
    Disposition.FAILED: "failed",
    Disposition.OMITTED: "omitted",
    Disposition.MISSING: "unfinished",
    Disposition.NOT_STARTED: "unfinished",
}


def read_task_rewards(
    output: Path, name: str, metric: str = "reward", *, adopt_attempts: int = DEFAULT_MAX_ROLLOUT_ATTEMPTS
) -> BenchmarkRewards:
    """A run's (or a merged file's) rollouts per task; ``name`` is its benchmark's name.

    ``adopt_attempts`` is the attempt limit a manifest without one adopts (the setting in force)."""
    paths = RunPaths.for_output(output)
    if not paths.results.is_file():
        raise ConfigError(
            f"{output} does not exist or is not a file: give a collector output (.jsonl), a merged "
            "output, or a launcher run (its folder or its name)"
        )
    refuse_retired_journal(paths.attempts_journal)
    side = BenchmarkRewards(name=name, source=str(paths.results), metric=metric)
    if paths.manifest.exists():
        _read_run(paths, side, adopt_attempts)
    else:
        _read_file(paths, side)
    return side


def _read_run(paths: RunPaths, side: BenchmarkRewards, adopt_attempts: int) -> None:
    from gymslurm.store.store import RunStore

    store = RunStore.open(paths, writable=False, adopt_attempts=adopt_attempts)
    try:
        states = store.reconcile().states
        rows: dict[int, Any] = {}
        if side.metric != "reward":  # the history keeps the reward only: read the selected rows' field
            rows = {index: row.get(side.metric) for index, row in store.selected_results(states)}
    finally:
        store.close()
    keys = _task_keys(paths.materialized_inputs)
    for index, state in enumerate(states):
        value = state.selected.reward if side.metric == "reward" and state.selected else rows.get(index)
        category, number = _state_category(state, value)
        side.add(keys[index], category, number)


def _state_category(state: RolloutState, value: Any) -> tuple[Category, float | None]:
    """A selected rollout as the comparison counts it (``value``: its metric, if a result)."""
    if state.disposition in (Disposition.MEASURED, Disposition.UNSCORED):
        return _measured(value)
    return _BY_DISPOSITION[state.disposition], None


def _measured(value: Any) -> tuple[Category, float | None]:
    """A completed, unmasked result: measured when its metric is a real, finite number, else unscored."""
    return ("measured", float(value)) if is_numeric_reward(value) else ("unscored", None)


def _task_keys(inputs: Path) -> list[TaskKey]:
    """The task of each rollout index, from the materialized inputs (one shared key per task)."""
    shared: dict[TaskKey, TaskKey] = {}
    keys = []
    for line, row in iter_records(inputs):
        key = task_key(row, inputs, line)
        keys.append(shared.setdefault(key, key))
    return keys


def task_key(row: dict[str, Any], path: Path, line: int) -> TaskKey:
    """A row's task: ``task_id`` (taskset, id), else NeMo Gym's ``_ng_task_index``; else refused."""
    task = row.get("task_id")
    if isinstance(task, dict) and task.get("task_id") is not None:
        return (str(task.get("taskset") or ""), str(task["task_id"]))
    index = row.get("_ng_task_index")
    if type(index) is int:
        return ("", str(index))
    raise malformed(path, line, "has neither task_id nor _ng_task_index: its task cannot be paired")


def _read_file(paths: RunPaths, side: BenchmarkRewards) -> None:
    """Rows as saved: one outcome per rollout, results first, then failures of rollouts without one."""
    seen: set[tuple[Any, ...]] = set()
    for line, row in iter_records(paths.results):
        rollout = _rollout_of(row)
        if rollout is not None:
            if rollout in seen:
                raise _superseded(paths.results, line, rollout)
            seen.add(rollout)
        side.add(task_key(row, paths.results, line), *_row_category(row_outcome(row, 0, line), row, side))
    failed: set[tuple[Any, ...]] = set()
    for line, row in iter_records(paths.failures):
        rollout = _rollout_of(row)
        if rollout is not None and (rollout in seen or rollout in failed):
            continue  # a rollout with a result, or a failure already counted: one outcome each
        if rollout is not None:
            failed.add(rollout)
        side.add(task_key(row, paths.failures, line), *_row_category(row_outcome(row, 0, line), row, side))


def _row_category(
    outcome: SavedOutcome, row: dict[str, Any], side: BenchmarkRewards
) -> tuple[Category, float | None]:
    if outcome.kind == "failure":
        return "failed", None
    if outcome.kind == "omission":
        return "omitted", None
    if outcome.masked:
        return "masked", None
    return _measured(outcome.reward if side.metric == "reward" else row.get(side.metric))


def _rollout_of(row: dict[str, Any]) -> tuple[Any, ...] | None:
    """A row's rollout: its run and rollout id, else (legacy rows) its run, task and repeat index."""
    if isinstance(row.get("_ng_rollout_id"), str):
        return (row.get("_ng_run_id"), row["_ng_rollout_id"])
    if type(row.get("_ng_task_index")) is int and type(row.get("_ng_rollout_index")) is int:
        return (row.get("_ng_run_id"), row["_ng_task_index"], row["_ng_rollout_index"])
    return None


def _superseded(path: Path, line: int, rollout: tuple[Any, ...]) -> ConfigError:
    return ConfigError(
        f"{path}, line {line + 1}: a second outcome of rollout {rollout[1:]!r}: this file is a run's raw "
        "history, not a selection (one outcome per rollout). Compare the run itself (its manifest beside "
        f"it), or a merged projection: gymslurm aggregate {path} +output_jsonl_fpath=<new>.jsonl"
    )
