"""suite_metrics.json: each benchmark's headline over tasks, its uncertainty and its counts."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gymslurm.store.suite_metrics import (
    BenchmarkScore,
    read_suite_metrics,
    score,
    task_values,
    weighted_mean,
    write_suite_metrics,
)


def _row(index: int, reward: object, taskset: str = "t") -> bytes:
    return orjson.dumps({"_ng_task_index": index, "task_id": {"taskset": taskset}, "reward": reward}) + b"\n"


def test_a_task_with_repeats_counts_once_in_the_headline() -> None:
    """Task 0 has rewards 1 and 0 (mean 0.5), task 1 has 1: the headline is 0.75 over two tasks."""
    per_task = task_values([_row(0, 1.0), _row(0, 0.0), _row(1, 1.0)], "reward")
    result = score("b", "reward", per_task, verdict="DONE")
    assert (result.value, result.tasks, result.rows) == (0.75, 2, 3)
    assert result.stderr == pytest.approx(0.25)


def test_rows_without_the_metric_and_torn_lines_are_not_counted() -> None:
    """A failure row (no reward), a boolean and a torn tail are skipped."""
    per_task = task_values([_row(0, 1.0), _row(1, None), _row(2, True), b'{"rew'], "reward")
    assert per_task == {"t/0": [1.0]}


def test_the_bootstrap_interval_holds_the_mean_and_is_the_same_each_time() -> None:
    """Seeded: the same rows give the same interval, which contains the headline."""
    per_task = task_values([_row(i, float(i % 3 == 0)) for i in range(30)], "reward")
    first, second = (
        score("b", "reward", per_task, verdict="DONE"),
        score("b", "reward", per_task, verdict="DONE"),
    )
    assert first.ci95 == second.ci95
    assert first.ci95 is not None and first.value is not None
    assert first.ci95[0] <= first.value <= first.ci95[1]


def test_a_benchmark_without_rows_has_no_headline() -> None:
    """A benchmark that merged nothing (EXHAUSTED) is listed, with no value and zero tasks."""
    empty = score("b", "reward", {}, verdict="EXHAUSTED")
    assert (empty.value, empty.tasks, empty.ci95) == (None, 0, None)


def test_the_suite_mean_is_weighted_and_leaves_out_benchmarks_without_a_headline() -> None:
    """Weights 1 and 0.5 on 0.9 and 0.3; a benchmark without a value is left out."""
    scores = [
        BenchmarkScore(
            name="a", metric="reward", value=0.9, stderr=0, ci95=None, tasks=1, rows=1, verdict="DONE"
        ),
        BenchmarkScore(
            name="b",
            metric="reward",
            value=0.3,
            stderr=0,
            ci95=None,
            tasks=1,
            rows=1,
            verdict="DONE",
            weight=0.5,
        ),
        BenchmarkScore(
            name="c", metric="reward", value=None, stderr=None, ci95=None, tasks=0, rows=0, verdict="FAILED"
        ),
    ]
    assert weighted_mean(scores) == pytest.approx(0.7)


def test_the_file_reads_back_as_written(tmp_path: Path) -> None:
    """Written whole, read back version-checked."""
    one = score("a", "reward", {"t/0": [1.0]}, verdict="DONE")
    written = write_suite_metrics(tmp_path, "s", [one])
    assert read_suite_metrics(tmp_path) == written
    assert read_suite_metrics(tmp_path / "none") is None
