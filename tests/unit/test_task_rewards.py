"""The store's per-task reader for ``gymslurm compare`` (gymslurm/store/task_rewards.py), on files
without a manifest (merged outputs, legacy files); runs with a manifest are read in
tests/e2e/test_compare_e2e.py, from real collections."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gymslurm.errors import ConfigError, CorruptRecordError
from gymslurm.store.task_rewards import read_task_rewards


def row(task: int, **fields: Any) -> dict[str, Any]:
    """A merged result row of task ``task`` (its rollout id, run id and task id stamped)."""
    stamps = {
        "_ng_run_id": "run-1",
        "_ng_rollout_id": f"arith-{task}",
        "_ng_attempt": 0,
        "task_id": {"taskset": "arith", "task_id": str(task)},
    }
    return {**stamps, **fields}


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_each_row_is_counted_as_what_it_is_and_only_numeric_unmasked_rewards_are_measured(
    tmp_path: Path,
) -> None:
    """Measured, masked (even with a reward), unscored (no or a non-numeric reward), failure, omission."""
    merged = write(
        tmp_path / "merged.jsonl",
        [
            row(0, reward=1.0),
            row(1, reward=0),
            row(2, reward=1.0, mask_sample=True),
            row(3),
            row(4, reward="1.0"),
            row(5, _ng_failure_class="agent_timeout"),
            row(6, _ng_omitted=True),
        ],
    )
    side = read_task_rewards(merged, name="arith")
    tallies = {task[1]: tally for task, tally in side.tasks.items()}
    assert tallies["0"].values == [1.0] and tallies["1"].values == [0.0]
    assert (tallies["2"].masked, tallies["2"].values) == (1, [])
    assert tallies["3"].unscored == tallies["4"].unscored == 1
    assert (tallies["5"].failed, tallies["6"].omitted) == (1, 1)
    assert side.rollouts() == {
        "measured": 2,
        "masked": 1,
        "unscored": 2,
        "failed": 1,
        "omitted": 1,
        "unfinished": 0,
    }
    assert (side.name, side.source) == ("arith", str(merged))


def test_a_file_with_two_outcomes_of_one_rollout_is_refused_as_raw_history(tmp_path: Path) -> None:
    """Two results of one rollout: a run's history, not a selection; the message says what to compare."""
    raw = write(tmp_path / "raw.jsonl", [row(0, reward=0.0), row(1, reward=1.0), row(0, reward=1.0)])
    with pytest.raises(ConfigError, match=r"raw\.jsonl, line 3: a second outcome of rollout") as caught:
        read_task_rewards(raw, name="raw")
    assert "gymslurm aggregate" in str(caught.value)


def test_the_failure_sidecar_counts_the_rollouts_that_have_no_result(tmp_path: Path) -> None:
    """A legacy file's sidecar: a rollout's failures count once, and not at all beside a result."""
    output = write(tmp_path / "out.jsonl", [row(0, reward=1.0)])
    failure = {"_ng_failure_class": "transport_timeout"}
    write(tmp_path / "out_failures.jsonl", [row(0, **failure), row(1, **failure), row(1, **failure)])
    side = read_task_rewards(output, name="out")
    assert side.rollouts()["failed"] == 1 and side.rollouts()["measured"] == 1


def test_nemo_gym_rows_pair_by_task_index(tmp_path: Path) -> None:
    """Rows without task_id (NeMo Gym's own collector) are keyed by _ng_task_index."""
    rows = [{"_ng_task_index": 7, "_ng_rollout_index": r, "reward": float(r)} for r in range(2)]
    side = read_task_rewards(write(tmp_path / "gym.jsonl", rows), name="gym")
    assert {key: tally.values for key, tally in side.tasks.items()} == {("", "7"): [0.0, 1.0]}


def test_a_row_with_no_task_identity_is_refused_naming_its_line(tmp_path: Path) -> None:
    """Neither task_id nor _ng_task_index: the task cannot be paired, the line is named."""
    bad = write(tmp_path / "bad.jsonl", [row(0, reward=1.0), {"reward": 1.0}])
    with pytest.raises(
        CorruptRecordError, match=r"bad\.jsonl, line 2: has neither task_id nor _ng_task_index"
    ):
        read_task_rewards(bad, name="bad")


def test_another_metric_is_read_from_each_result_row(tmp_path: Path) -> None:
    """``--metric accuracy``: that field when it is a number, else the row is unscored for it."""
    merged = write(tmp_path / "m.jsonl", [row(0, reward=1.0, accuracy=0.25), row(1, reward=1.0)])
    side = read_task_rewards(merged, name="m", metric="accuracy")
    assert side.rollouts()["measured"] == 1 and side.rollouts()["unscored"] == 1
    assert side.tasks[("arith", "0")].values == [0.25]


def test_a_missing_file_is_refused_saying_what_compare_accepts(tmp_path: Path) -> None:
    """Not a file: a ConfigError naming the forms a side may take."""
    with pytest.raises(ConfigError, match="give a collector output"):
        read_task_rewards(tmp_path / "none.jsonl", name="none")
