"""Collection exports the same metrics as aggregation (coverage/*, retries/*, reward)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.helpers import collect, companion, gymslurm, load, write_tasks

pytestmark = pytest.mark.e2e


def test_collection_and_aggregation_export_the_same_metrics(tmp_path: Path, demo_server) -> None:
    """<stem>_gymslurm_metrics.json after collecting equals a metrics-only aggregation of the run."""
    faults = [{}, {"_demo_fault": "terminal"}, {"_demo_fault": "omit"}, {"_demo_fault": "unscored"}, {}]
    dataset = write_tasks(tmp_path / "tasks.jsonl", faults)
    output = tmp_path / "run" / "out.jsonl"
    assert collect(dataset, output, demo_server.url, "+route_failures_to_sidecar=true").returncode == 0
    collected = load(companion(output, "_gymslurm_metrics.json"))
    merged = tmp_path / "merged" / "all.jsonl"
    done = gymslurm("aggregate", str(output), f"+output_jsonl_fpath={merged}", "+merge_shards=false")
    assert done.returncode == 0, done.stderr
    aggregated = load(companion(merged, "_gymslurm_metrics.json"))
    assert collected["metrics"] == aggregated["metrics"]
    metrics = collected["metrics"]
    assert (metrics["coverage/measured"], metrics["coverage/failed"], metrics["coverage/omitted"]) == (
        2,
        1,
        1,
    )
    assert metrics["coverage/unscored"] == 1 and collected["metrics_source"] == aggregated["metrics_source"]


def test_collect_writes_nemo_gyms_metrics_file(tmp_path: Path, demo_server) -> None:
    """<stem>_aggregate_metrics.json is NeMo Gym's list: an entry from the server's /aggregate_metrics."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}, {}])
    output = tmp_path / "run" / "out.jsonl"
    assert collect(dataset, output, demo_server.url).returncode == 0
    (entry,) = load(companion(output, "_aggregate_metrics.json"))
    assert entry["_ng_environment_server"] == demo_server.url and "gymslurm_note" not in entry
    sections = {"agent_metrics", "key_metrics", "group_level_metrics", "repeat_level_metrics"}
    assert set(entry) >= {"agent_ref", *sections}
    assert entry["key_metrics"]["num_scored"] == 3


def test_collect_honours_count_failure_classes_as_zero(tmp_path: Path, demo_server) -> None:
    """000: live and offline selection both honour count_failure_classes_as_zero: collect accepts it,
    and its exported metrics score the listed failure as a zero, as aggregation does."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {"_demo_fault": "terminal"}])
    output = tmp_path / "run" / "out.jsonl"
    policy = "+count_failure_classes_as_zero=[agent_command_not_allowed]"
    run = collect(dataset, output, demo_server.url, policy)
    assert run.returncode == 0, run.stderr
    collected = load(companion(output, "_gymslurm_metrics.json"))["metrics"]
    merged = tmp_path / "merged" / "all.jsonl"
    done = gymslurm("aggregate", str(output), f"+output_jsonl_fpath={merged}", "+merge_shards=false", policy)
    assert done.returncode == 0, done.stderr
    assert collected == load(companion(merged, "_gymslurm_metrics.json"))["metrics"]
    assert (collected["coverage/scored"], collected["scoring/counted_failures_as_zero"]) == (2, 1)
    assert collected["coverage/failed"] == 1
