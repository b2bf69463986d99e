"""Aggregation, health and reverification end to end over shards the collector wrote against the demo server.

Three shards with failures (retried and terminal), omissions, masked and unscored results, a resumed
shard and a torn tail; then ``gymslurm aggregate``, ``gymslurm health`` and their refusals, each a
real subprocess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import collect, companion, gymslurm, load, read_jsonl, write_tasks

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, shared_demo_server: Any) -> list[Path]:
    """Three collected shards: mixed outcomes; one resumed after a first run; one with a torn tail."""
    root = tmp_path_factory.mktemp("shards")
    url = shared_demo_server.url
    retry_once = {"_demo_fault": "retryable", "_demo_fault_attempts": 1}
    specs = [
        [{}, retry_once, {"_demo_fault": "masked"}, {"_demo_fault": "omit"}],
        [{}, {"_demo_fault": "unscored"}, {"_demo_fault": "terminal"}],
        [{}, {}, {"_demo_fault": "retryable"}],
    ]
    outputs = []
    for number, spec in enumerate(specs):
        dataset = write_tasks(root / f"tasks{number}.jsonl", spec)
        output = root / f"shard{number}" / "out.jsonl"
        first = collect(dataset, output, url)
        assert first.returncode == 0, first.stderr
        assert load(companion(output, "_coverage.json"))["expected"] == len(spec)
        if number == 2:  # resume: the persistent retryable failure uses more of its budget
            again = collect(dataset, output, url, "+resume_from_cache=true")
            assert again.returncode == 0, again.stderr
            with output.open("ab") as handle:  # a collector killed mid-write leaves a torn tail
                handle.write(b'{"_ng_run_id": "run-')
        outputs.append(output)
    return outputs


def test_merge_matches_the_collectors_coverage(
    tmp_path: Path, shards: list[Path], shared_demo_server: Any
) -> None:
    """The merged projection holds each shard's completed results once; metrics sum the shards' coverage."""
    merged = tmp_path / "merged.jsonl"
    done = gymslurm(
        "aggregate",
        *map(str, shards),
        f"+output_jsonl_fpath={merged}",
        f"+environment_server_url={shared_demo_server.url}",
    )
    assert done.returncode == 0, done.stderr
    coverages = [load(companion(s, "_coverage.json")) for s in shards]
    metrics = load(companion(merged, "_gymslurm_metrics.json"))
    m = metrics["metrics"]
    assert len(read_jsonl(merged)) == sum(c["successful"] for c in coverages) == 7
    pairs = [("measured", "measured"), ("masked", "masked"), ("unscored", "unscored"), ("failed", "failed")]
    pairs += [("omitted", "intentionally_omitted"), ("missing", "missing")]
    for key, field in pairs:
        assert m[f"coverage/{key}"] == sum(c[field] for c in coverages), key
    assert m["retries/attempts"] == sum(c["historical_failed_attempts"] for c in coverages)
    assert metrics["metrics_source"].startswith("environment_server")
    ids = [(r["_ng_run_id"], r["_ng_rollout_id"]) for r in read_jsonl(merged)]
    assert len(ids) == len(set(ids))
    assert "incomplete final line" in done.stderr


def test_merge_refuses_a_shard_output_and_changes_nothing(tmp_path: Path, shards: list[Path]) -> None:
    """Review case: merging into an established run's output is refused before a byte is written."""
    before = {p: p.read_bytes() for p in shards[1].parent.iterdir()}
    done = gymslurm("aggregate", str(shards[0]), f"+output_jsonl_fpath={shards[1]}")
    assert done.returncode == 2
    assert "established run" in done.stderr
    assert {p: p.read_bytes() for p in shards[1].parent.iterdir()} == before


def test_metrics_only_keeps_the_collector_coverage(shards: list[Path]) -> None:
    """+merge_shards=false beside a collector run writes aggregate coverage, never its coverage."""
    coverage = companion(shards[0], "_coverage.json")
    before, output_before = coverage.read_bytes(), shards[0].read_bytes()
    done = gymslurm("aggregate", *map(str, shards), f"+output_jsonl_fpath={shards[0]}", "+merge_shards=false")
    assert done.returncode == 0, done.stderr
    assert (coverage.read_bytes(), shards[0].read_bytes()) == (before, output_before)
    assert load(companion(shards[0], "_aggregate_coverage.json"))["expected"] == 10


def test_collection_wrote_a_health_report(shards: list[Path]) -> None:
    """The automatic health check ran at the end of collection and wrote <stem>_health.json."""
    report = load(companion(shards[1], "_health.json"))
    assert report["status"] in {"pass", "fail"}
    assert report["counts"]["final_failures"] == 1


def test_standalone_health_skips_superseded_then_checks_the_merge(tmp_path: Path, shards: list[Path]) -> None:
    """A shard whose masked infrastructure result was retried holds superseded rows: health skips it
    (exit 3) and says how to export a projection; the exported projection is checked (exit 0)."""
    done = gymslurm("health", str(shards[0]), "+write_report=false")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "gymslurm aggregate" in done.stderr
    merged = tmp_path / "m.jsonl"
    assert gymslurm("aggregate", str(shards[0]), f"+output_jsonl_fpath={merged}").returncode == 0
    checked = gymslurm("health", str(merged), "+min_completeness=0.0")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_exhausted_failure_counts_as_final(shards: list[Path]) -> None:
    """Shard 2's persistent retryable failure, out of budget, is a final failure in the health check."""
    done = gymslurm(
        "health", str(shards[2]), "+max_failure_rate=0.5", "+min_completeness=0.0", "+write_report=false"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 final failures of 3 finished" in done.stdout
