"""What a run holds per rollout (issue 17): a fresh collection never holds its tasks, the store's
rollout index holds no string and no dict entry per rollout, and rollouts with nothing saved share
one state. Memory is counted with tracemalloc (allocations, not timing): the same on every machine.
"""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymslurm.errors import InvalidRolloutIdError, ManifestError
from gymslurm.selection import BudgetPolicy, select_rollouts
from gymslurm.store.inputs import read_index, write_inputs
from gymslurm.tasks import IdenticalRows, MaterializeOptions, iter_tasks, scan_tasks
from tests.unit.test_prepare_resume import URL, prepared

NONE_IDENTICAL = IdenticalRows(frozenset())

N = 20_000


def _peak(work: Callable[[], Any]) -> tuple[int, Any]:
    """Peak bytes traced while ``work`` runs, and what it returned (kept alive until measured)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        value = work()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before, value


def _rows(count: int, prompt: int = 300) -> Iterator[dict[str, Any]]:
    for number in range(count):
        task_input = {"question": f"{number:06d} " + "x" * prompt, "a": number, "b": 1}
        yield {"task_id": {"taskset": "arith", "task_id": str(number)}, "task_input": task_input}


def _fresh_peak(folder: Path, count: int) -> int:
    """Peak bytes traced while ``prepare`` makes a fresh run of ``count`` tasks (~370-byte rows)."""
    dataset = folder / f"d{count}.jsonl"
    dataset.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in _rows(count)))

    def fresh() -> None:
        prepared(dataset, folder / f"run{count}" / "out.jsonl", URL, stderr=io.StringIO()).store.close()

    peak, _ = _peak(fresh)
    return peak


def test_a_fresh_collection_never_holds_its_materialized_tasks(tmp_path: Path) -> None:
    """prepare of a fresh run streams tasks from the dataset into the store: memory hardly grows per task."""
    _fresh_peak(tmp_path, 100)  # once for the imports and caches, which are not the run's
    small, large = _fresh_peak(tmp_path, N // 2), _fresh_peak(tmp_path, N)
    per_task = (large - small) / (N - N // 2)
    assert per_task < 200, f"{per_task:.0f} bytes more per task"  # the tasks as dicts: ~1,500 each


def test_the_rollout_index_holds_no_string_and_no_dict_entry_per_rollout(tmp_path: Path) -> None:
    """The store's index of 20,000 rollouts: their ids' bytes and a few machine words each, no more."""
    peaks = []
    for count in (N // 2, N):
        path = tmp_path / f"inputs{count}.jsonl"
        write_inputs(path, iter_tasks(_rows(count, prompt=10), MaterializeOptions("arith"), NONE_IDENTICAL))
        peak, index = _peak(lambda path=path: read_index(path))  # type: ignore[misc]
        peaks.append(peak)
        assert len(index) == count
    per_rollout = (peaks[1] - peaks[0]) / (N - N // 2)  # ids of 7-11 bytes here
    assert per_rollout < 64, f"{per_rollout:.0f} bytes per rollout"  # str + dict entry + list slot: ~150


def test_the_index_finds_every_id_and_nothing_else(tmp_path: Path) -> None:
    """id -> index and index -> id agree for every rollout; an unknown or non-string id is not found."""
    path = tmp_path / "inputs.jsonl"
    write_inputs(path, iter_tasks(_rows(500, prompt=1), MaterializeOptions("arith"), NONE_IDENTICAL))
    index = read_index(path)
    assert index.index_of.get("arith-4") == 4 and index.index_of.get("rith-4") is None  # by a scan
    assert index.index_of.get("arith-49") == 49 and index.index_of.get("arith-4999") is None
    ids = [f"arith-{number}" for number in range(500)]
    assert list(index.ids) == ids and index.ids == ids
    assert [index.index_of.get(rollout_id) for rollout_id in ids] == list(range(500))
    assert all(index.is_at(number, rollout_id) for number, rollout_id in enumerate(ids))
    assert not index.is_at(1, "arith-0") and not index.is_at(500, "arith-0")
    assert index.index_of.get("arith-500") is None and index.index_of.get(None) is None
    assert "arith-7" in index.index_of and index.index_of["arith-7"] == 7
    assert index.row(3)["task_id"] == {"taskset": "arith", "task_id": "3"}


def test_a_stream_with_a_repeated_id_publishes_nothing(tmp_path: Path) -> None:
    """The store refuses a streamed repeat before publishing: no inputs file, no temporary file left."""
    rows = [*_rows(3, prompt=1), next(_rows(1, prompt=1))]
    path = tmp_path / "inputs.jsonl"
    with pytest.raises(ManifestError, match="appears twice"):
        write_inputs(path, iter_tasks(iter(rows), MaterializeOptions("arith"), NONE_IDENTICAL))
    assert list(tmp_path.iterdir()) == []


def test_a_streamed_materialization_refuses_a_repeated_id_naming_both_rows() -> None:
    """scan_tasks keeps 8 bytes per id, yet names the two dataset rows that share one."""
    rows = [*_rows(5, prompt=1), next(_rows(3, prompt=1))]
    rows[-1] = {**rows[-1], "task_id": {"taskset": "arith", "task_id": "2"}}
    with pytest.raises(InvalidRolloutIdError, match="used by dataset rows 2 and 5"):
        scan_tasks(lambda: iter_tasks(iter(rows), MaterializeOptions("arith"), NONE_IDENTICAL))
    scan = scan_tasks(lambda: iter_tasks(iter(rows[:5]), MaterializeOptions("arith"), NONE_IDENTICAL))
    assert scan.count == 5 and scan.digest.startswith("sha256:")


def test_rollouts_with_nothing_saved_share_one_state() -> None:
    """A fresh run's million pending rollouts are one state object per reservation count, not a million."""
    states, _ = select_rollouts([0, 0, 1, 1], [None] * 4, BudgetPolicy(3), lambda i, p: AssertionError(p))
    assert states[0] is states[1] and states[2] is states[3] and states[0] is not states[2]
    assert states[0].pending and states[2].pending


def _finished_run(folder: Path, count: int) -> Path:
    """A finished run of ``count`` rollouts, each with one result of reward 0.0 or 1.0 (a verifier's)."""
    from gymslurm.store import RunPaths, RunSpec, RunStore

    (folder / f"finished{count}").mkdir()
    paths = RunPaths.for_output(folder / f"finished{count}" / "out.jsonl")
    rows = [
        {
            "_ng_rollout_id": f"r{i}",
            "_ng_task_index": i,
            "_ng_rollout_index": 0,
            "task_id": {"taskset": "arith", "task_id": str(i)},
            "task_input": {"q": i},
        }
        for i in range(count)
    ]
    digest = "sha256:" + "3" * 64
    spec = RunSpec(
        source_path="d",
        source_digest=digest,
        inputs=rows,
        identity={},
        config_digest=digest,
        max_rollout_attempts=3,
    )
    with RunStore.create_fresh(paths, spec) as store:
        for index in range(count):
            store.append_result(index, store.reserve(index), {"reward": float(index % 2)})
    return paths.output


def test_a_reconciled_run_holds_few_bytes_per_rollout(tmp_path: Path) -> None:
    """Reconciling a finished run keeps one small outcome and one small state per rollout: a plain result
    stores no detail fields, its state none either, and equal rewards share one float (a resume of a
    1,000,000-rollout run holds this per rollout; before: ~310 bytes)."""
    from gymslurm.store import RunPaths, RunStore

    peaks = []
    for count in (N // 2, N):
        output = _finished_run(tmp_path, count)
        with RunStore.open(RunPaths.for_output(output), writable=False) as store:
            store.rollout_index  # noqa: B018  (the index is measured on its own above)
            peak, reconciled = _peak(store.reconcile)
            assert len(reconciled.states) == count
        peaks.append(peak)
    per_rollout = (peaks[1] - peaks[0]) / (N - N // 2)
    assert per_rollout < 190, f"{per_rollout:.0f} bytes per rollout"
