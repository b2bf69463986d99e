"""The automatic check from the collector's states in memory gives the report a read from disk gives."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymslurm.health import HealthReport, SelectedRun, after_collection, check_selected, run_health_check
from gymslurm.store import RunPaths, RunStore
from tests.unit.test_aggregate_fixtures import ShardBuilder, companion


def reconciled(output: Path) -> SelectedRun:
    """The run's selected states as the collector holds them after reconciling."""
    store = RunStore.open(RunPaths.for_output(output), writable=False)
    try:
        return SelectedRun(store.reconcile().states, store.run_id)
    finally:
        store.close()


def mixed(run: ShardBuilder) -> None:
    """Completed, retried, terminal, exhausted, pending, omitted and unfinished rollouts."""
    run.failure("arith-0").result("arith-0").result("arith-1", None).result("arith-2", masked=True)
    run.failure("arith-3", "agent_command_not_allowed", terminal=True).omit("arith-4").interrupt("arith-5")
    for _ in range(3):
        run.failure("arith-6", "session_lost")
    run.failure("arith-7", "session_lost")


def superseded(run: ShardBuilder) -> None:
    """A retry-masked result superseded by a later one, next to failures and an omission."""
    mixed(run)
    run.result("arith-8", None, masked=True, failure_kind="provider_unavailable").result("arith-8")


def fully_completed(run: ShardBuilder) -> None:
    """Every rollout completed, no sidecar."""
    for rid in run.ids:
        run.result(rid)


CASES: list[tuple[Callable[[ShardBuilder], None], str]] = [
    (mixed, "fail"),
    (superseded, "skipped"),
    (fully_completed, "pass"),
]


def without_time(path: Path) -> dict[str, Any]:
    """A written report without its ``written_at``."""
    report = orjson.loads(path.read_bytes())
    report.pop("written_at")
    return report


@pytest.mark.parametrize(("build", "status"), CASES)
def test_automatic_report_equals_the_report_read_from_disk(
    tmp_path: Path, build: Callable[[ShardBuilder], None], status: str
) -> None:
    """after_collection with the reconciled states returns and writes what re-reading the run gives."""
    run = ShardBuilder(tmp_path / "out.jsonl", 9)
    build(run)
    out, paths = run.finish(), RunPaths.for_output(tmp_path / "out.jsonl")
    from_disk = after_collection(paths, stderr=io.StringIO())
    written = without_time(paths.health) if paths.health.exists() else None
    from_memory = after_collection(paths, stderr=io.StringIO(), selected=reconciled(out))
    assert from_memory == from_disk == run_health_check(out, standalone=False)
    assert from_memory.status == status
    assert (without_time(paths.health) if paths.health.exists() else None) == written


@pytest.mark.parametrize(("build", "status"), [case for case in CASES if case[1] != "skipped"])
def test_automatic_report_equals_gymslurm_health(
    tmp_path: Path, build: Callable[[ShardBuilder], None], status: str
) -> None:
    """Counts, checks and failure examples equal the standalone `gymslurm health` report's."""
    run = ShardBuilder(tmp_path / "out.jsonl", 9)
    build(run)
    out = run.finish()
    report: HealthReport = check_selected(RunPaths.for_output(out), reconciled(out))
    assert report == run_health_check(out)
    assert report.status == status


def test_selected_check_counts_the_selected_states(tmp_path: Path) -> None:
    """The in-memory check counts final failures, pending ones, omissions and gaps from the states;
    a gap is not started or missing (000: the health report's missing matches coverage's)."""
    run = ShardBuilder(tmp_path / "out.jsonl", 9)
    mixed(run)
    out = run.finish()
    report = check_selected(RunPaths.for_output(out), reconciled(out))
    assert report.counts == {
        "expected": 9,
        "completed": 3,
        "final_failures": 2,
        "retryable_failures": 1,
        "exhausted": 1,
        "omitted": 1,
        "not_started": 1,
        "missing": 1,
        "unfinished": 2,
    }
    assert set(report.failure_examples) == {"agent_command_not_allowed", "session_lost"}


def test_selected_check_without_results_file_is_an_error(tmp_path: Path) -> None:
    """With no results file the in-memory check raises as the standalone check does."""
    run = ShardBuilder(tmp_path / "out.jsonl", 1).failure("arith-0", terminal=True)
    out = run.finish()
    selected = reconciled(out)
    out.unlink(missing_ok=True)
    err = io.StringIO()
    report = after_collection(RunPaths.for_output(out), stderr=err, selected=selected)
    assert report.status == "skipped"
    assert "does not exist" in err.getvalue()
    assert not companion(out, "_health.json").exists()
