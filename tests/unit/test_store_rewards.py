"""The merged run's reward distribution per taskset (store/rewards.py), written once, read typed."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gymslurm.store.paths import RunPaths
from gymslurm.store.rewards import (
    read_reward_histogram,
    reward_histogram,
    rewards_by_taskset,
    write_reward_histogram,
)


def _merged(tmp_path: Path) -> RunPaths:
    paths = RunPaths.for_output(tmp_path / "merged" / "rollouts.jsonl")
    paths.folder.mkdir(parents=True)
    return paths


def test_rewards_by_taskset_and_their_histogram() -> None:
    """Rows group by task_id.taskset; rewards in [0, 1] fall in ten bins; rows with no reward are skipped."""
    rows = [
        orjson.dumps({"reward": r, "task_id": {"taskset": t}})
        for r, t in [(0.0, "a"), (1.0, "a"), (1.0, "a"), (0.55, "b")]
    ] + [b'{"reward": null}', b"", b'{"reward": 1.0']
    by_taskset = rewards_by_taskset(rows)
    assert by_taskset == {"a": [0.0, 1.0, 1.0], "b": [0.55]}
    (a, b) = reward_histogram(by_taskset)
    assert a.bins == [1, 0, 0, 0, 0, 0, 0, 0, 0, 2] and a.mean == pytest.approx(2 / 3)
    assert b.bins[5] == 1 and b.count == 1


def test_the_reward_histogram_round_trips(tmp_path: Path) -> None:
    """Written once from the merged rows, read back equal (version 1)."""
    paths = _merged(tmp_path)
    paths.results.write_bytes(b'{"reward": 1.0, "task_id": {"taskset": "arith"}}\n')
    written = write_reward_histogram(paths)
    assert read_reward_histogram(paths) == written and written[0].taskset == "arith"
