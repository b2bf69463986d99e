"""Aggregation: the selected-result projection, metrics, aggregate coverage and the safety rules."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymslurm.aggregate import AggregateOptions, AggregateResult, aggregate
from gymslurm.errors import (
    ConfigError,
    CorruptRecordError,
    InconsistentHistoryError,
    MetricsUnavailableError,
    StoreError,
)
from gymslurm.metrics import ScoringPolicy
from tests.unit.test_aggregate_fixtures import ShardBuilder, companion, read_jsonl, write_legacy

NOW = "2026-01-01T00:00:00Z"


def run(tmp_path: Path, *inputs: Path | str, output: str = "merged.jsonl", **options: Any) -> AggregateResult:
    """Aggregate ``inputs`` into ``tmp_path/output``."""
    opts = AggregateOptions(inputs=tuple(str(i) for i in inputs), output=tmp_path / output, **options)
    return aggregate(opts, written_at=NOW)


def two_shards(tmp_path: Path) -> tuple[Path, Path]:
    """Shard a: a retried failure, a masked and an unscored result; b: an omission, an interruption."""
    a = ShardBuilder(tmp_path / "a" / "out.jsonl", 3)
    a.failure("arith-0").result("arith-0", 1.0).result("arith-1", 0.0, masked=True).result("arith-2", None)
    b = ShardBuilder(tmp_path / "b" / "out.jsonl", ["b-0", "b-1", "b-2"])
    b.result("b-0", 0.0).omit("b-1").result("b-2", 1.0).interrupt("b-2")
    return a.finish(), b.finish()


def merged_ids(tmp_path: Path, name: str = "merged.jsonl") -> list[tuple[str, int]]:
    """(rollout id, attempt) of every merged row."""
    return [(r["_ng_rollout_id"], r["_ng_attempt"]) for r in read_jsonl(tmp_path / name)]


def test_projection_holds_selected_completed_results_once(tmp_path: Path) -> None:
    """The merge holds each rollout's selected completed result once, and no failure or omission."""
    a, b = two_shards(tmp_path)
    result = run(tmp_path, a, b)
    assert merged_ids(tmp_path) == [("arith-0", 1), ("arith-1", 0), ("arith-2", 0), ("b-0", 0)]
    assert result.merged_rows == 4


@pytest.mark.parametrize("merge_shards", [True, False])
def test_output_folder_is_created(tmp_path: Path, merge_shards: bool) -> None:
    """An output in a folder that does not exist yet is written there, merged or metrics-only."""
    a, b = two_shards(tmp_path)
    run(tmp_path, a, b, output="new/folder/merged.jsonl", merge_shards=merge_shards)
    assert (tmp_path / "new/folder/merged_aggregate_coverage.json").exists()
    assert (tmp_path / "new/folder/merged.jsonl").exists() is merge_shards


def test_older_result_under_newer_reservation_is_left_out(tmp_path: Path) -> None:
    """A result superseded by a newer reservation without outcome is not merged (latest_allocated)."""
    _, b = two_shards(tmp_path)
    run(tmp_path, b)
    assert ("b-2", 0) not in merged_ids(tmp_path)


def test_merged_rows_are_byte_identical(tmp_path: Path) -> None:
    """Merged rows are the shard's saved bytes, not a re-serialization."""
    a, _ = two_shards(tmp_path)
    run(tmp_path, a)
    saved = set(a.read_bytes().splitlines(keepends=True))
    assert set((tmp_path / "merged.jsonl").read_bytes().splitlines(keepends=True)) <= saved


def test_metrics_are_own_computation_without_server(tmp_path: Path) -> None:
    """Without an Environment Server, metrics are gymslurm's own and say so."""
    a, b = two_shards(tmp_path)
    result = run(tmp_path, a, b)
    metrics = orjson.loads(companion(tmp_path / "merged.jsonl", "_gymslurm_metrics.json").read_bytes())
    assert metrics["metrics_source"] == "gymslurm"
    m = metrics["metrics"]
    assert (m["coverage/measured"], m["coverage/masked"], m["coverage/unscored"]) == (2, 1, 1)
    assert (m["coverage/omitted"], m["coverage/missing"], m["retries/attempts"]) == (1, 1, 1)
    assert m["mean/reward"] == 0.5
    assert result.metrics == m


def test_aggregate_coverage_sums_shards_and_keeps_retryable_per_shard(tmp_path: Path) -> None:
    """The aggregate coverage totals the shards and keeps each shard's inventory, retryable included."""
    a, b = two_shards(tmp_path)
    coverage = run(tmp_path, a, b).coverage
    assert (coverage["expected"], coverage["successful"], coverage["complete"]) == (6, 4, False)
    assert [s["coverage"]["retryable"] for s in coverage["shards"]] == [0, 1]
    assert coverage["retryable"] == 1
    assert coverage["identity_verified"] is True


def test_scoring_policy_reaches_metrics(tmp_path: Path) -> None:
    """count_missing_rollouts_as_zero imputes the interrupted rollout in metrics, not in the merge."""
    _, b = two_shards(tmp_path)
    result = run(tmp_path, b, scoring=ScoringPolicy(count_missing_rollouts_as_zero=True))
    assert result.metrics["scoring/imputed"] == 1
    assert merged_ids(tmp_path) == [("b-0", 0)]


def test_symlink_alias_and_target_count_once(tmp_path: Path) -> None:
    """Two spellings of one rollout file are one input."""
    a, _ = two_shards(tmp_path)
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(a)
    result = run(tmp_path, a, alias)
    assert result.coverage["expected"] == 3
    assert any("counted once" in w for w in result.warnings)


def test_symlinked_input_reads_companions_beside_its_target(tmp_path: Path) -> None:
    """A symlinked input resolves to its run: manifest and sidecar beside the target are used."""
    a, _ = two_shards(tmp_path)
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "shard.jsonl"
    link.symlink_to(a)
    result = run(tmp_path, link)
    assert result.coverage["shards"][0]["run_id"] is not None
    assert result.metrics["retries/attempts"] == 1


def test_copy_of_manifest_run_is_rejected(tmp_path: Path) -> None:
    """A copy of a manifest-backed run at another path is rejected by its run id."""
    a, _ = two_shards(tmp_path)
    shutil.copytree(a.parent, tmp_path / "copy")
    with pytest.raises(ConfigError, match="same run"):
        run(tmp_path, a, tmp_path / "copy" / "out.jsonl")
    assert not (tmp_path / "merged.jsonl").exists()


def test_legacy_shard_read_line_by_line(tmp_path: Path) -> None:
    """A legacy shard is merged line by line, repeated ids included, with no completion claimed."""
    rows = [{"_ng_rollout_id": "x", "reward": 1.0}, {"_ng_rollout_id": "x", "reward": 0.0}]
    legacy = write_legacy(tmp_path / "legacy.jsonl", rows)
    result = run(tmp_path, legacy)
    assert len(read_jsonl(tmp_path / "merged.jsonl")) == 2
    assert (result.coverage["complete"], result.coverage["identity_verified"]) == (None, False)
    assert "coverage/missing" not in result.metrics
    assert result.metrics["coverage/measured"] == 2


def test_legacy_per_row_caps_are_exported_as_retries_at_cap(tmp_path: Path) -> None:
    """000: legacy runs keep their per-row ``_ng_failure_max_attempts``: offline aggregation exports
    how many rollouts spent theirs (``retries/at_cap``), one that later succeeded not among them."""
    capped = {"_ng_failure_class": "agent_run_error", "_ng_failure_max_attempts": 1}
    failures = [
        {"_ng_rollout_id": "a", **capped},  # spent its one attempt
        {"_ng_rollout_id": "b", **capped},  # then succeeded
        {"_ng_rollout_id": "c", "_ng_failure_class": "agent_run_error", "_ng_failure_max_attempts": 3},
    ]
    rows = [{"_ng_rollout_id": "b", "reward": 1.0}]
    result = run(tmp_path, write_legacy(tmp_path / "legacy.jsonl", rows, failures))
    assert result.metrics["retries/at_cap"] == 1
    assert "coverage/missing" not in result.metrics  # the inventory is still not claimed


def test_legacy_coverage_keeps_observed_counts_and_leaves_the_inventory_unknown(tmp_path: Path) -> None:
    """000: for a legacy shard "observed measured/masked counts remain available" in the coverage file
    too (as in the metrics), while the inventory categories cannot be determined (null, not 0)."""
    rows = [{"reward": 1.0}, {"reward": 0.0}, {"reward": 0.0, "mask_sample": True}]
    result = run(tmp_path, write_legacy(tmp_path / "legacy.jsonl", rows))
    cov, m = result.coverage, result.metrics
    assert (cov["measured"], cov["masked"], cov["successful"]) == (2, 1, 3)
    assert (m["coverage/measured"], m["coverage/masked"]) == (2, 1)
    assert (cov["expected"], cov["not_started"], cov["missing"], cov["retryable"]) == (None, None, None, None)
    assert cov["complete"] is None


def test_coverage_scored_counts_failures_counted_as_zero(tmp_path: Path) -> None:
    """000: scored counts numeric rewards "plus failures explicitly counted as zero when aggregating":
    the coverage file's scored equals the metrics' coverage/scored."""
    shard = ShardBuilder(tmp_path / "a" / "out.jsonl", 3)
    shard.result("arith-0", 1.0).failure("arith-1", "judge_failed", terminal=True)
    shard.failure("arith-2", "judge_failed", terminal=True)
    scoring = ScoringPolicy(count_failure_classes_as_zero=frozenset({"judge_failed"}))
    result = run(tmp_path, shard.finish(), scoring=scoring)
    assert result.metrics["coverage/scored"] == 3
    assert result.coverage["scored"] == 3
    assert (result.coverage["failed"], result.coverage["measured"]) == (2, 1)


def test_legacy_companions_beside_alias_are_used(tmp_path: Path) -> None:
    """A legacy run whose sidecar sits only beside the alias is read with that sidecar."""
    target = write_legacy(tmp_path / "data" / "run.jsonl", [{"reward": 1.0}])
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(target)
    write_legacy(tmp_path / "unused.jsonl", [], [{"_ng_failure_class": "judge_failed"}])
    os.replace(companion(tmp_path / "unused.jsonl", "_failures.jsonl"), companion(alias, "_failures.jsonl"))
    result = run(tmp_path, alias)
    assert result.metrics["coverage/failed/judge_failed"] == 1


def test_competing_companion_sets_are_an_error(tmp_path: Path) -> None:
    """Two aliases of one legacy file, each with its own sidecar, compete: an error, nothing written."""
    legacy_target = write_legacy(tmp_path / "l" / "run.jsonl", [{"reward": 1.0}])
    for name in ("l1.jsonl", "l2.jsonl"):
        (tmp_path / name).symlink_to(legacy_target)
        companion(tmp_path / name, "_failures.jsonl").write_bytes(b"")
    with pytest.raises(StoreError, match="competing companion sets"):
        run(tmp_path, tmp_path / "l1.jsonl", tmp_path / "l2.jsonl")


def test_sidecars_beside_alias_and_target_compete(tmp_path: Path) -> None:
    """A legacy file with one sidecar beside its symlink and another beside its target: an error (000),
    not a silent choice of the target's sidecar that drops the alias's failure."""
    target = write_legacy(tmp_path / "l" / "run.jsonl", [{"reward": 1.0}], [{"_ng_failure_class": "x"}])
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(target)
    write_legacy(tmp_path / "unused.jsonl", [], [{"_ng_failure_class": "judge_failed"}])
    os.replace(companion(tmp_path / "unused.jsonl", "_failures.jsonl"), companion(alias, "_failures.jsonl"))
    with pytest.raises(StoreError, match="competing companion sets"):
        run(tmp_path, alias)
    assert not (tmp_path / "merged.jsonl").exists()


def test_companions_linked_to_the_targets_do_not_compete(tmp_path: Path) -> None:
    """A sidecar beside the alias that is a link to the target's own sidecar is the same set."""
    target = write_legacy(tmp_path / "l" / "run.jsonl", [{"reward": 1.0}], [{"_ng_failure_class": "x"}])
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(target)
    companion(alias, "_failures.jsonl").symlink_to(companion(target, "_failures.jsonl"))
    assert run(tmp_path, alias).metrics["coverage/failed/x"] == 1


@pytest.mark.parametrize("manifest", [True, False])
def test_retired_attempt_journal_is_reported_not_ignored(tmp_path: Path, manifest: bool) -> None:
    """000: a shard with the retired draft <stem>_attempts.jsonl is a format mismatch; nothing written."""
    if manifest:
        shard, _ = two_shards(tmp_path)
    else:
        shard = write_legacy(tmp_path / "l" / "run.jsonl", [{"reward": 1.0}])
    companion(shard, "_attempts.jsonl").write_bytes(b'{"attempt": 0}\n')
    with pytest.raises(StoreError, match=r"_attempts\.jsonl is the attempt journal of an earlier"):
        run(tmp_path, shard)
    assert not (tmp_path / "merged.jsonl").exists()


def test_manifest_beside_alias_only_is_an_error(tmp_path: Path) -> None:
    """A manifest beside a symlink rather than its target is refused: companions belong with the target."""
    target = write_legacy(tmp_path / "l" / "run.jsonl", [{"reward": 1.0}])
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(target)
    companion(alias, "_manifest.json").write_bytes(b"{}")
    with pytest.raises(StoreError, match="beside the symlink"):
        run(tmp_path, alias)


@pytest.mark.parametrize("spelling", ["input", "alias of input", "input's sidecar"])
def test_output_that_is_an_input_is_refused_before_writing(tmp_path: Path, spelling: str) -> None:
    """An output that is an input (or a file of one), through any spelling, is refused; no byte changes."""
    a, _ = two_shards(tmp_path)
    before = {p: p.read_bytes() for p in a.parent.iterdir()}
    output = {
        "input": a,
        "alias of input": tmp_path / "alias.jsonl",
        "input's sidecar": companion(a, "_failures.jsonl"),
    }[spelling]
    if spelling == "alias of input":
        output.symlink_to(a)
    with pytest.raises(ConfigError, match="destroy that run's output"):
        aggregate(AggregateOptions(inputs=(str(a),), output=output), written_at=NOW)
    assert {p: p.read_bytes() for p in a.parent.iterdir()} == before


def test_output_with_recovery_companions_is_refused(tmp_path: Path) -> None:
    """Review case: merging into an established run's output path is refused before a byte is written."""
    a, b = two_shards(tmp_path)
    established = ShardBuilder(tmp_path / "combined.jsonl", 2).result("arith-0").result("arith-1").finish()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(ConfigError, match="established run"):
        run(tmp_path, a, b, output="combined.jsonl")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert established.exists()


@pytest.mark.parametrize(
    "suffix", ["_manifest.json", "_materialized_inputs.jsonl", "_failures.jsonl", "_attempts.jsonl"]
)
def test_any_recovery_companion_blocks_the_merge(tmp_path: Path, suffix: str) -> None:
    """A manifest, materialized inputs, a failure sidecar or a retired attempt journal alone makes the
    output an established run (000: a merge into a target that has only the journal refuses)."""
    a, _ = two_shards(tmp_path)
    companion(tmp_path / "merged.jsonl", suffix).write_bytes(b"")
    with pytest.raises(ConfigError, match="established run"):
        run(tmp_path, a)
    assert not (tmp_path / "merged.jsonl").exists()


def test_recovery_companion_beside_output_symlink_blocks_the_merge(tmp_path: Path) -> None:
    """An output symlink whose alias spelling has a manifest beside it is refused too."""
    a, _ = two_shards(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "merged.jsonl").symlink_to(tmp_path / "real" / "merged.jsonl")
    companion(tmp_path / "merged.jsonl", "_manifest.json").write_bytes(b"{}")
    with pytest.raises(ConfigError, match="established run"):
        run(tmp_path, a)


def test_merge_is_repeatable_into_its_own_output(tmp_path: Path) -> None:
    """A merged output is not a run: aggregating again into it replaces it."""
    a, b = two_shards(tmp_path)
    run(tmp_path, a)
    run(tmp_path, a, b)
    assert len(read_jsonl(tmp_path / "merged.jsonl")) == 4


def test_merged_output_symlink_is_preserved(tmp_path: Path) -> None:
    """The merged file is replaced through a symlink: the target gets the rows, the link survives."""
    a, _ = two_shards(tmp_path)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "merged.jsonl"
    target.write_bytes(b"old\n")
    os.chmod(target, 0o640)
    (tmp_path / "merged.jsonl").symlink_to(target)
    run(tmp_path, a)
    assert (tmp_path / "merged.jsonl").is_symlink()
    assert len(read_jsonl(target)) == 3
    assert (target.stat().st_mode & 0o777) == 0o640
    assert companion(target, "_aggregate_coverage.json").exists()


def test_metrics_only_writes_aggregate_coverage_not_collector_coverage(tmp_path: Path) -> None:
    """+merge_shards=false writes metrics and <output>_aggregate_coverage.json only, beside a run."""
    a, b = two_shards(tmp_path)
    collector_coverage = companion(a, "_coverage.json")
    collector_coverage.write_bytes(b'{"collector": true}')
    servers_metrics = companion(a, "_aggregate_metrics.json")  # what the shard's server answered collect
    servers_metrics.write_bytes(b'[{"server": true}]')
    before = a.read_bytes()
    aggregate(AggregateOptions(inputs=(str(a), str(b)), output=a, merge_shards=False), written_at=NOW)
    assert collector_coverage.read_bytes() == b'{"collector": true}'
    assert servers_metrics.read_bytes() == b'[{"server": true}]'
    assert a.read_bytes() == before
    assert companion(a, "_aggregate_coverage.json").exists()
    assert companion(a, "_gymslurm_metrics.json").exists()


def test_a_merge_no_server_answered_writes_no_file_under_nemo_gyms_name(tmp_path: Path) -> None:
    """<stem>_aggregate_metrics.json promises the servers' metrics: without an answer it is not written
    (a stale one removed), gymslurm's own are in <stem>_gymslurm_metrics.json, and a warning says so."""
    a, b = two_shards(tmp_path)
    output = tmp_path / "merged.jsonl"
    companion(output, "_aggregate_metrics.json").write_bytes(b"[]")
    result = aggregate(AggregateOptions(inputs=(str(a), str(b)), output=output), written_at=NOW)
    assert not companion(output, "_aggregate_metrics.json").exists()
    assert companion(output, "_gymslurm_metrics.json").exists()
    assert any("gymslurm's own" in warning for warning in result.warnings)


def test_metrics_only_writes_no_projection(tmp_path: Path) -> None:
    """+merge_shards=false never creates the merged file."""
    a, _ = two_shards(tmp_path)
    run(tmp_path, a, merge_shards=False)
    assert not (tmp_path / "merged.jsonl").exists()


def test_torn_tail_is_ignored_and_shard_untouched(tmp_path: Path) -> None:
    """An incomplete final line is ignored with a warning, and the shard keeps its bytes."""
    shard = ShardBuilder(tmp_path / "s" / "out.jsonl", 2).result("arith-0").interrupt("arith-1")
    path = shard.finish(torn_tail=b'{"_ng_rollout_id": "arith-1", "rew')
    before = path.read_bytes()
    result = run(tmp_path, path)
    assert path.read_bytes() == before
    assert result.coverage["shards"][0]["torn_tail_bytes"] > 0
    assert merged_ids(tmp_path) == [("arith-0", 0)]


def test_malformed_complete_line_is_an_error(tmp_path: Path) -> None:
    """A malformed complete line is never skipped: an error naming file and line."""
    path = ShardBuilder(tmp_path / "s" / "out.jsonl", 1).result("arith-0").finish(torn_tail=b"{oops\n")
    with pytest.raises(CorruptRecordError, match="line 2"):
        run(tmp_path, path)


def test_foreign_row_is_an_error(tmp_path: Path) -> None:
    """A row stamped with another run id in a manifest-backed shard is an error."""
    shard = ShardBuilder(tmp_path / "s" / "out.jsonl", 1).result("arith-0")
    path = shard.finish()
    path.write_bytes(path.read_bytes().replace(shard.run_id.encode(), b"run-" + b"0" * 32))
    with pytest.raises(CorruptRecordError, match="not to"):
        run(tmp_path, path)


def test_interrupted_replacement_is_refused(tmp_path: Path) -> None:
    """A shard whose manifest says 'replacing' is inconsistent history and is refused."""
    path = ShardBuilder(tmp_path / "s" / "out.jsonl", 1).result("arith-0").finish()
    manifest = companion(path, "_manifest.json")
    manifest.write_bytes(manifest.read_bytes().replace(b'"ready"', b'"replacing"'))
    with pytest.raises(InconsistentHistoryError, match="replacing"):
        run(tmp_path, path)


def test_glob_skips_companion_files(tmp_path: Path) -> None:
    """A glob over shard folders picks the rollout files, not their JSONL companions."""
    two_shards(tmp_path)
    result = run(tmp_path, str(tmp_path / "*" / "*.jsonl"))
    assert len(result.coverage["shards"]) == 2


def test_glob_matching_nothing_is_an_error(tmp_path: Path) -> None:
    """A glob that matches no file says so."""
    with pytest.raises(ConfigError, match="matches no rollout file"):
        run(tmp_path, str(tmp_path / "nope-*.jsonl"))


def test_server_metrics_are_used_and_named(tmp_path: Path) -> None:
    """When the Environment Server answers, its metrics are added and the source names it."""
    a, _ = two_shards(tmp_path)
    seen: list[int] = []

    def server(url: str, rows: Iterable[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        seen.append(len(list(rows)))  # the rows are a stream, read during the call
        return {"agent_metrics": {"arith/accuracy": 0.5}, "key_metrics": {}}

    opts = AggregateOptions(inputs=(str(a),), output=tmp_path / "m.jsonl", environment_server_url="http://x")
    result = aggregate(opts, written_at=NOW, server_metrics=server)
    assert seen == [3]
    assert result.metrics["arith/accuracy"] == 0.5
    assert result.metrics_source.startswith("environment_server")


def test_unreachable_server_falls_back_with_a_warning(tmp_path: Path) -> None:
    """An unreachable Environment Server leaves gymslurm's own metrics, with a warning saying so."""
    a, _ = two_shards(tmp_path)

    def down(url: str, rows: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        raise MetricsUnavailableError("connection refused")

    opts = AggregateOptions(inputs=(str(a),), output=tmp_path / "m.jsonl", environment_server_url="http://x")
    result = aggregate(opts, written_at=NOW, server_metrics=down)
    assert result.metrics_source == "gymslurm"
    assert any("own computation" in w for w in result.warnings)


def test_real_fetch_against_closed_port_raises_unavailable() -> None:
    """The HTTP seam turns a refused connection into MetricsUnavailableError."""
    from gymslurm.dispatch import fetch_aggregate_metrics

    with pytest.raises(MetricsUnavailableError):
        fetch_aggregate_metrics("http://127.0.0.1:9", [], 2.0)


def test_parallel_and_serial_reads_agree(tmp_path: Path) -> None:
    """Reading shards in worker processes gives the same files as reading them in this process."""
    a, b = two_shards(tmp_path)
    outputs = {}
    for workers in (1, 2):
        output = tmp_path / f"merged{workers}.jsonl"
        result = aggregate(
            AggregateOptions(inputs=(str(a), str(b)), output=output, workers=workers), written_at=NOW
        )
        outputs[workers] = (output.read_bytes(), result.metrics, result.coverage["shards"])
    assert outputs[1] == outputs[2]


def test_worker_errors_reach_the_caller(tmp_path: Path) -> None:
    """A corrupt shard read in a worker process raises the same error, and nothing is written."""
    a, _ = two_shards(tmp_path)
    bad = ShardBuilder(tmp_path / "bad" / "out.jsonl", 1).result("arith-0").finish(torn_tail=b"{oops\n")
    with pytest.raises(CorruptRecordError):
        aggregate(
            AggregateOptions(inputs=(str(a), str(bad)), output=tmp_path / "m.jsonl", workers=2),
            written_at=NOW,
        )
    assert not (tmp_path / "m.jsonl").exists()


@pytest.mark.parametrize("seed", range(6))
def test_fast_path_equals_store_reconciliation(tmp_path: Path, seed: int) -> None:
    """The fast summary of a manifest-backed shard equals the one built from the store's reconcile()."""
    import random

    from gymslurm.aggregate import ShardSource, _fast_manifest_summary, _summary_of, load_shard

    rng = random.Random(seed)
    builder = ShardBuilder(tmp_path / "s" / "out.jsonl", 30, max_attempts=2)
    steps = [
        lambda rid: builder.result(rid, rng.choice([0.0, 1.0, None])),
        lambda rid: builder.result(rid, 1.0, masked=True),
        lambda rid: builder.result(
            rid, None, masked=True, failure_kind="provider_unavailable", response=None
        ),
        lambda rid: builder.failure(rid, rng.choice(["judge_failed", "session_lost", None])),
        lambda rid: builder.failure(rid, "agent_command_not_allowed", terminal=True),
        lambda rid: builder.failure(rid, "kill_shaped", delivery="possibly_delivered"),
        builder.omit,
        builder.interrupt,
    ]
    for rid in builder.ids[1:]:
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            rng.choice(steps)(rid)
    path = builder.finish(torn_tail=b'{"partial')
    source = ShardSource(path, (path,), path)
    policy = ScoringPolicy(frozenset({"judge_failed"}), count_missing_rollouts_as_zero=True)
    fast = _fast_manifest_summary(source, policy, NOW)
    slow = _summary_of(load_shard(source), policy, NOW)
    assert fast is not None
    assert fast.coverage == slow.coverage
    assert fast.accumulator.metrics() == pytest.approx(slow.accumulator.metrics())
    assert list(fast.selected_lines) == list(slow.selected_lines)
    assert fast.torn_bytes == slow.torn_bytes
