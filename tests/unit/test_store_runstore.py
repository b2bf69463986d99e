"""The RunStore facade: creation, validation on open, reconciliation, appends, replacement, import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gymslurm.errors import (
    ConfigError,
    CorruptRecordError,
    InconsistentHistoryError,
    ManifestError,
    StoreError,
)
from gymslurm.records import EpisodeFailure, EpisodeId, RolloutFailureRecord
from gymslurm.selection import Disposition
from gymslurm.store import ExistingRun, RunPaths, RunSpec, RunStore, existing_run, read_resubmit_offset
from gymslurm.store.manifest import read_manifest

DIGEST = "sha256:" + "1" * 64


def make_inputs(count: int) -> list[dict[str, Any]]:
    return [
        {
            "_ng_rollout_id": f"demo-t{i}",
            "_ng_task_index": i,
            "_ng_rollout_index": 0,
            "task_id": {"taskset": "demo", "task_id": f"t{i}"},
            "task_input": {"question": f"q{i}"},
        }
        for i in range(count)
    ]


def create(paths: RunPaths, count: int = 3, **changes: Any) -> RunStore:
    options: dict[str, Any] = {
        "source_path": "data.jsonl",
        "source_digest": DIGEST,
        "inputs": make_inputs(count),
        "identity": {"model": "m"},
        "config_digest": DIGEST,
        "max_rollout_attempts": 2,
    }
    return RunStore.create_fresh(paths, RunSpec(**{**options, **changes}))


def import_legacy(paths: RunPaths, count: int = 3) -> RunStore:
    """Import the legacy run at ``paths`` as ``count`` rollouts (attempt limit 3, no identity)."""
    spec = RunSpec(
        source_path="d",
        source_digest=DIGEST,
        inputs=make_inputs(count),
        identity={},
        config_digest=DIGEST,
        max_rollout_attempts=3,
    )
    return RunStore.import_legacy(paths, spec)


def failure(
    store: RunStore,
    index: int,
    attempt: int,
    *,
    terminal: bool = False,
    kind: str | None = None,
    delivery: str = "delivered",
) -> RolloutFailureRecord:
    return RolloutFailureRecord(
        episode_id=EpisodeId(rollout_id=store.rollout_ids()[index], attempt=attempt),
        run_id=store.run_id,
        source="environment" if delivery == "delivered" else "collector",  # the environment's are delivered
        delivery=delivery,  # type: ignore[arg-type]
        failure=EpisodeFailure(failure_reason="boom", terminal=terminal, failure_kind=kind),
    )


@pytest.fixture
def paths(tmp_path: Path) -> RunPaths:
    return RunPaths.for_output(tmp_path / "out.jsonl")


def rows(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_fresh_run_reconciles_to_not_started(paths: RunPaths) -> None:
    """A new run has every rollout not started, no attempts, a ready manifest and identity on disk."""
    store = create(paths)
    recon = RunStore.open(paths).reconcile()
    assert [s.disposition for s in recon.states] == [Disposition.NOT_STARTED] * 3
    assert recon.attempts == 0
    manifest = read_manifest(paths.manifest)
    assert manifest is not None and manifest.state == "ready" and manifest.run_id == store.run_id
    assert store.saved_identity() == {"model": "m"}
    assert store.inputs() == make_inputs(3)


def test_appended_outcomes_are_stamped_and_selected(paths: RunPaths) -> None:
    """Results, failures and omissions carry run/rollout/attempt/task stamps and reconcile per rollout."""
    store = create(paths)
    store.reconcile()
    saved = store.append_result(0, store.reserve(0), {"reward": 0.0, "response": {"output_text": "a"}})
    store.append_failure(1, store.reserve(1), failure(store, 1, 0, terminal=True))
    store.append_omission(2, store.reserve(2))
    assert (saved.kind, saved.reward, saved.line) == ("result", 0.0, 0)
    result_row = rows(paths.results)[0]
    assert {k: result_row[k] for k in ("_ng_run_id", "_ng_rollout_id", "_ng_attempt", "task_id")} == {
        "_ng_run_id": store.run_id,
        "_ng_rollout_id": "demo-t0",
        "_ng_attempt": 0,
        "task_id": {"taskset": "demo", "task_id": "t0"},
    }
    recon = RunStore.open(paths).reconcile()
    assert [s.disposition for s in recon.states] == [
        Disposition.MEASURED,
        Disposition.FAILED,
        Disposition.OMITTED,
    ]
    assert (recon.attempts, recon.historical_failed_attempts) == (3, 1)


def test_failure_row_keeps_missing_kind_missing(paths: RunPaths) -> None:
    """A failure without failure_kind is saved without one; the routing alias is the generic label."""
    store = create(paths)
    store.reconcile()
    store.append_failure(0, store.reserve(0), failure(store, 0, 0), legacy_class="oldname", response={"x": 1})
    row = rows(paths.failures)[0]
    assert "failure_kind" not in row["_ng_failure_record"]["failure"]
    assert row["_ng_failure_class"] == "environment_server_failed"
    assert (row["_ng_failure_legacy_class"], row["_ng_failure_response"]) == ("oldname", {"x": 1})


def test_newer_reservation_without_outcome_is_missing(paths: RunPaths) -> None:
    """A result for execution 0 and a bare reservation of 1: the rollout is missing, not measured."""
    store = create(paths)
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    store.reserve(0)
    assert RunStore.open(paths).reconcile().states[0].disposition == Disposition.MISSING


def test_open_changes_no_byte(paths: RunPaths) -> None:
    """Opening and reconciling a run with torn tails writes nothing."""
    store = create(paths)
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    with open(paths.results, "ab") as handle:
        handle.write(b'{"torn": ')
    before = snapshot(paths.folder)
    reopened = RunStore.open(paths)
    recon = reopened.reconcile()
    reopened.close()
    assert recon.torn_results_bytes == 9
    assert snapshot(paths.folder) == before


def test_torn_tail_is_repaired_only_when_asked(paths: RunPaths) -> None:
    """repair_torn_tails removes the partial line; appends then continue on clean lines."""
    store = create(paths)
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    store.close()
    with open(paths.failures, "ab") as handle:
        handle.write(b'{"_ng_run_id": "x')
    store = RunStore.open(paths)
    store.reconcile()
    with pytest.raises(StoreError, match="incomplete line"):
        store.append_omission(1, store.reserve(1))
    assert store.repair_torn_tails() == 17
    store.append_omission(1, store.reserve(1))
    assert [s.disposition for s in RunStore.open(paths).reconcile().states][:2] == [
        Disposition.MEASURED,
        Disposition.OMITTED,
    ]


def append_raw(path: Path, row: dict[str, Any]) -> None:
    with open(path, "ab") as handle:
        handle.write(orjson.dumps(row) + b"\n")


def test_foreign_run_id_is_an_error(paths: RunPaths) -> None:
    """A record stamped with another run's id fails reconciliation, naming the file and line."""
    create(paths)
    append_raw(
        paths.results, {"_ng_run_id": "run-" + "f" * 32, "_ng_rollout_id": "demo-t0", "_ng_attempt": 0}
    )
    with pytest.raises(CorruptRecordError, match=r"out\.jsonl, line 1: belongs to run"):
        RunStore.open(paths).reconcile()


def test_unstamped_record_of_no_rollout_in_a_verified_run_is_an_error(paths: RunPaths) -> None:
    """A record without _ng_run_id that names no rollout of the run is refused, never adopted."""
    create(paths)
    append_raw(paths.results, {"_ng_rollout_id": "nope", "_ng_task_index": 9, "reward": 1})
    with pytest.raises(CorruptRecordError, match="has no _ng_run_id and matches no materialized rollout"):
        RunStore.open(paths).reconcile()


def test_unknown_rollout_is_an_error(paths: RunPaths) -> None:
    """A record naming a rollout this run does not have is refused."""
    store = create(paths)
    append_raw(paths.results, {"_ng_run_id": store.run_id, "_ng_rollout_id": "nope", "_ng_attempt": 0})
    with pytest.raises(CorruptRecordError, match="'nope'"):
        RunStore.open(paths).reconcile()


@pytest.mark.parametrize("reserve_twice", [False, True])
def test_conflicting_outcomes_are_an_error(paths: RunPaths, reserve_twice: bool) -> None:
    """Two outcomes for one execution, or an outcome for an unreserved one, conflict with history."""
    store = create(paths)
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    if reserve_twice:
        store.reserve(0)
    stamp = {
        "_ng_run_id": store.run_id,
        "_ng_rollout_id": "demo-t0",
        "_ng_attempt": 0 if reserve_twice else 1,
    }
    append_raw(paths.results, {**stamp, "reward": 0.5})
    with pytest.raises(CorruptRecordError, match="demo-t0"):
        RunStore.open(paths).reconcile()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda row: row["_ng_failure_record"].update(schema_version=2), "schema_version"),
        (lambda row: row["_ng_failure_record"]["episode_id"].update(attempt=5), "episode_id"),
        (lambda row: row["_ng_failure_record"].update(run_id="run-" + "e" * 32), "run_id"),
        (lambda row: row.update(_ng_failure_terminal=True), "terminal"),
        (lambda row: row.update(_ng_failure_class="judge_failed"), "_ng_failure_class"),
        (lambda row: row["_ng_failure_record"].update(extra=1), "unknown fields"),
        (
            lambda row: row["_ng_failure_record"].update(delivery="possibly_delivered"),
            "line 1: .*contradicts",
        ),
        (lambda row: row["_ng_failure_record"].update(delivery="not_sent"), "line 1: .*contradicts"),
    ],
)
def test_inconsistent_failure_record_is_an_error(paths: RunPaths, change: Any, problem: str) -> None:
    """A failure row whose canonical record disagrees with its stamps or schema is refused."""
    store = create(paths)
    store.reconcile()
    store.append_failure(0, store.reserve(0), failure(store, 0, 0))
    row = rows(paths.failures)[0]
    change(row)
    paths.failures.write_bytes(orjson.dumps(row) + b"\n")
    with pytest.raises(CorruptRecordError, match=problem):
        RunStore.open(paths).reconcile()


@pytest.mark.parametrize("response", ["an answer", ["an", "answer"], 3, True])
def test_a_saved_result_whose_response_is_not_an_object_is_refused(paths: RunPaths, response: Any) -> None:
    """A result row whose ``response`` is a string, a list or a number is no measured result: the
    history is refused naming its line (never counted as a score)."""
    store = create(paths)
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    store.append_result(1, store.reserve(1), {"reward": 1.0})
    row = rows(paths.results)[1]
    paths.results.write_bytes(
        paths.results.read_bytes().splitlines(keepends=True)[0]
        + orjson.dumps({**row, "response": response})
        + b"\n"
    )
    with pytest.raises(CorruptRecordError, match=r"line 2: has a 'response' that is a .*invalid_response"):
        RunStore.open(paths).reconcile()


def test_result_with_collector_keys_is_refused(paths: RunPaths) -> None:
    """A result carrying _ng_* keys other than the legacy judge markers is not saved."""
    store = create(paths)
    store.reconcile()
    attempt = store.reserve(0)
    with pytest.raises(CorruptRecordError, match="_ng_attempt"):
        store.append_result(0, attempt, {"_ng_attempt": 9, "reward": 1})
    store.append_result(0, attempt, {"_ng_judge_failsafe": True, "reward": None})
    assert rows(paths.results)[0]["_ng_judge_failsafe"] is True


@pytest.mark.parametrize("reserved", [False, True])
def test_outcome_needs_a_reservation_and_only_one(paths: RunPaths, reserved: bool) -> None:
    """Saving for an unreserved execution, or twice for one, is refused before writing."""
    store = create(paths)
    store.reconcile()
    if reserved:
        store.append_result(0, store.reserve(0), {"reward": 1.0})
    with pytest.raises(StoreError, match="refusing an outcome"):
        store.append_result(0, 0, {"reward": 1.0})


def test_interrupted_fresh_replacement_is_refused(paths: RunPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh run killed while replacing an old one leaves state=replacing, which open refuses."""
    old = create(paths)
    old.reconcile()
    old.append_result(0, old.reserve(0), {"reward": 1.0})
    old.close()

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("gymslurm.store.run_files.write_inputs", crash)
    with pytest.raises(KeyboardInterrupt):
        create(paths)
    manifest = read_manifest(paths.manifest)
    assert manifest is not None and manifest.state == "replacing"
    with pytest.raises(InconsistentHistoryError, match="allow_unsafe_resume"):
        RunStore.open(paths)


def test_fresh_replacement_clears_every_companion(paths: RunPaths) -> None:
    """A fresh run removes the old run's outcomes, offset, coverage, metrics and health."""
    old = create(paths)
    old.reconcile()
    old.append_failure(0, old.reserve(0), failure(old, 0, 0))
    old.resubmit()
    old.write_coverage({"old": True})
    old.write_health({"old": True})
    old.write_aggregate_metrics([{"old": True}])
    old.write_gymslurm_metrics({"old": True})
    old.close()
    new = create(paths)
    assert new.run_id != old.run_id
    assert not paths.failures.exists() and paths.results.read_bytes() == b""
    assert not any(
        p.exists()
        for p in (
            paths.resubmit_offset,
            paths.coverage,
            paths.health,
            paths.aggregate_metrics,
            paths.gymslurm_metrics,
        )
    )
    assert RunStore.open(paths).reconcile().attempts == 0


def test_fresh_run_through_a_symlinked_output(tmp_path: Path) -> None:
    """A symlinked output keeps its link; the run's files live beside the target."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.jsonl"
    target.write_bytes(b"")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    store = create(RunPaths.for_output(link))
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    assert link.is_symlink() and len(rows(link)) == 1
    assert (tmp_path / "real" / "out_manifest.json").exists()


def test_mixed_inputs_are_inconsistent(paths: RunPaths) -> None:
    """Materialized inputs that do not match the manifest's digest are refused."""
    create(paths)
    paths.gymslurm_inputs.write_bytes(paths.gymslurm_inputs.read_bytes().replace(b"q1", b"q9"))
    with pytest.raises(InconsistentHistoryError, match="materialized inputs"):
        RunStore.open(paths)


@pytest.mark.parametrize(
    ("role", "message"),
    [("reservations", "reservation table"), ("results", "results file"), ("gymslurm_inputs", "inputs")],
)
def test_missing_companion_beside_a_manifest_is_an_error(paths: RunPaths, role: str, message: str) -> None:
    """A manifest without a required companion is an error, never a silent fresh start."""
    create(paths)
    paths.companions()[role].unlink()
    with pytest.raises(ManifestError, match=message):
        RunStore.open(paths)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({}, ExistingRun.NOTHING),
        ({"_materialized_inputs.jsonl": b"{}\n"}, ExistingRun.PARTIAL_INITIAL_CACHE),
        ({".jsonl": b"", "_failures.jsonl": b"", "_identity.json": b"{}"}, ExistingRun.PARTIAL_INITIAL_CACHE),
        ({".jsonl": b'{"reward": 1}\n'}, ExistingRun.LEGACY),
        ({"_failures.jsonl": b'{"torn'}, ExistingRun.LEGACY),
        ({"_manifest.json": b"{}"}, ExistingRun.MANIFEST),
    ],
)
def test_existing_run_classification(paths: RunPaths, files: dict[str, bytes], expected: ExistingRun) -> None:
    """Partial initial cache only when no manifest and both outcome files are absent or empty."""
    for suffix, content in files.items():
        (paths.folder / f"out{suffix}").write_bytes(content)
    assert existing_run(paths) is expected


def test_resubmit_offset_records_line_counts(paths: RunPaths) -> None:
    """resubmit writes the sidecar and result line counts; failures before it stop counting."""
    store = create(paths)
    store.reconcile()
    store.append_failure(0, store.reserve(0), failure(store, 0, 0))
    store.append_failure(0, store.reserve(0), failure(store, 0, 1))
    store.append_result(1, store.reserve(1), {"reward": 1.0})
    store.close()
    before = RunStore.open(paths).reconcile().states[0]
    assert (before.counted_failures, before.exhausted) == (2, True)
    assert RunStore.open(paths).resubmit() == (2, 1)
    assert paths.resubmit_offset.read_text() == "2\n1\n"
    assert read_resubmit_offset(paths) == (2, 1)
    after = RunStore.open(paths).reconcile().states[0]
    assert (after.counted_failures, after.pending) == (0, True)


@pytest.mark.parametrize("content", ["x\n", "-1\n", "1\n2\n3\n", ""])
def test_bad_resubmit_offset_is_an_error(paths: RunPaths, content: str) -> None:
    """An unreadable offset is refused rather than silently reset."""
    paths.resubmit_offset.write_text(content)
    with pytest.raises(ManifestError, match="resubmit_offset"):
        read_resubmit_offset(paths)


def test_policy_override_and_identity_override_persist(paths: RunPaths) -> None:
    """update_policy and mark_identity_overridden republish the manifest; verification never returns."""
    store = create(paths)
    store.update_policy(retry_terminal_timeouts=True)
    store.mark_identity_overridden()
    manifest = read_manifest(paths.manifest)
    assert manifest is not None
    assert (manifest.retry_terminal_timeouts, manifest.identity_verified, manifest.identity_source) == (
        True,
        False,
        "overridden",
    )


def test_drift_journal_appends(paths: RunPaths) -> None:
    """Each drifting resume appends one line naming the keys and the run."""
    store = create(paths)
    store.append_drift(["collect.concurrency"])
    store.append_drift(["collect.timeout_s"])
    lines = rows(paths.resume_drift)
    assert [line["keys"] for line in lines] == [["collect.concurrency"], ["collect.timeout_s"]]
    assert lines[0]["run_id"] == store.run_id


def test_legacy_import_orders_sidecar_before_results(paths: RunPaths) -> None:
    """Legacy rows are numbered by arrival per rollout, sidecar failures before main-file results."""
    legacy_failure = {
        "_ng_rollout_id": "demo-t0",
        "_ng_attempt": 0,
        "_ng_failure_class": "session_lost",
        "_ng_failure_terminal": False,
        "_ng_failure_message": "x",
    }
    append_raw(paths.failures, legacy_failure)
    append_raw(paths.results, {"_ng_rollout_id": "demo-t0", "_ng_attempt": 0, "reward": 1.0})
    append_raw(paths.results, {"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 0.0})
    assert existing_run(paths) is ExistingRun.LEGACY
    store = import_legacy(paths)
    recon = store.reconcile()
    assert list(store.table.counts()) == [2, 1, 0]
    assert recon.states[0].disposition == Disposition.MEASURED  # the result arrived after the failure
    assert recon.states[0].selected is not None and recon.states[0].selected.attempt == 1
    assert recon.states[1].disposition == Disposition.MEASURED
    manifest = read_manifest(paths.manifest)
    assert manifest is not None and (manifest.identity_verified, manifest.identity_source) == (
        False,
        "imported",
    )
    store.append_result(2, store.reserve(2), {"reward": 1.0})
    assert RunStore.open(paths).reconcile().attempts == 4


def test_legacy_row_matching_no_rollout_is_an_error(paths: RunPaths) -> None:
    """A legacy row that names no materialized rollout refuses the import."""
    append_raw(paths.results, {"_ng_rollout_id": "gone", "reward": 1.0})
    with pytest.raises(CorruptRecordError, match="legacy row"):
        import_legacy(paths, count=1)
    assert not paths.manifest.exists()


def test_appended_outcome_equals_the_one_read_back(paths: RunPaths) -> None:
    """What an append returns (used for progress) is exactly what a later reconcile reads."""
    store = create(paths, count=5)
    store.reconcile()
    returned = [
        store.append_result(
            0, store.reserve(0), {"reward": 1, "mask_sample": True, "failure_kind": "session_lost"}
        ),
        store.append_result(1, store.reserve(1), {"reward": float("nan"), "response": {"output_text": "a"}}),
        store.append_result(2, store.reserve(2), {"reward": True}),
        store.append_failure(
            3,
            store.reserve(3),
            failure(store, 3, 0, kind="agent_timeout", delivery="not_sent"),
            legacy_class="x",
        ),
        store.append_omission(4, store.reserve(4)),
    ]
    history = RunStore.open(paths).read_history()
    assert [history.outcomes(i)[0] for i in range(5)] == returned
    assert returned[0].retry_masked and returned[0].masked
    assert returned[1].reward is None and returned[2].reward is None


def test_public_api_is_pinned() -> None:
    """The store package exports exactly its documented names (docs/store.md)."""
    import gymslurm.store

    assert sorted(gymslurm.store.__all__) == [
        "ExistingRun",
        "Manifest",
        "Reconciliation",
        "RunLock",
        "RunPaths",
        "RunSpec",
        "RunStore",
        "existing_run",
        "read_resubmit_offset",
    ]


def test_read_only_open_cannot_reserve(paths: RunPaths) -> None:
    """A store opened read-only (aggregation, health) refuses to reserve."""
    create(paths).close()
    with pytest.raises(StoreError, match="read-only"):
        RunStore.open(paths, writable=False).reserve(0)


def test_bad_inputs_are_refused_before_the_old_run_is_touched(paths: RunPaths) -> None:
    """Repeated rollout ids refuse a fresh run before any file of the existing run changes."""
    create(paths).close()
    before = snapshot(paths.folder)
    with pytest.raises(ConfigError, match="repeated"):
        create(paths, inputs=make_inputs(2) + make_inputs(1))
    assert snapshot(paths.folder) == before


def test_import_refuses_a_run_whose_manifest_was_lost(paths: RunPaths) -> None:
    """Stamped rows without their manifest cannot be imported: lost reservations are not recreated."""
    store = create(paths)
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    store.close()
    paths.manifest.unlink()
    assert existing_run(paths) is ExistingRun.LEGACY
    with pytest.raises(CorruptRecordError, match="Restore the manifest"):
        import_legacy(paths)
    assert not paths.manifest.exists()


ORIGIN = {
    "_ng_environment_server": "weather_env",
    "_ng_result_type": "single_agent_turn",
    "agent_ref": {"name": "weather_agent"},
}


def test_records_carry_nemo_gyms_origin_stamps(paths: RunPaths) -> None:
    """With origins set, results and failures name their server, its type and agent, and _ng_task_id."""
    store = create(paths)
    store.reconcile()
    taskset = store.inputs()[0]["task_id"]["taskset"]
    store.stamp_origins({taskset: ORIGIN})
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    store.append_failure(1, store.reserve(1), failure(store, 1, 0))
    for row in (rows(paths.results)[0], rows(paths.failures)[0]):
        assert {key: row[key] for key in ORIGIN} == ORIGIN
        assert row["_ng_task_id"] == row["task_id"]


def test_a_results_own_agent_ref_is_kept(paths: RunPaths) -> None:
    """The legacy adapter's agent_ref in its result wins over the configured one."""
    store = create(paths)
    store.reconcile()
    store.stamp_origins({store.inputs()[0]["task_id"]["taskset"]: ORIGIN})
    store.append_result(0, store.reserve(0), {"reward": 1.0, "agent_ref": {"name": "its_own"}})
    assert rows(paths.results)[0]["agent_ref"] == {"name": "its_own"}


def test_selected_results_are_read_back(paths: RunPaths) -> None:
    """selected_results gives each selected result row with its rollout index (failures left out)."""
    store = create(paths)
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 0.5})
    store.append_failure(1, store.reserve(1), failure(store, 1, 0, terminal=True))
    store.append_result(2, store.reserve(2), {"reward": 1.0})
    store.close()
    again = RunStore.open(paths)
    picked = again.selected_results(again.reconcile().states)
    assert [(index, row["reward"]) for index, row in picked] == [(0, 0.5), (2, 1.0)]


def test_agent_timeout_that_kept_its_answer_is_not_retried_after_reopen(paths: RunPaths) -> None:
    """001: a non-terminal agent_timeout that kept a response with output stays final when saved and
    when the run is read again (resume never regenerates the model's answer)."""
    store = create(paths, 2)
    store.reconcile()
    answer = {"output": [{"type": "message", "content": "42"}]}
    for index in (0, 1):
        attempt = store.reserve(index)
        record = failure(store, index, attempt, kind="agent_timeout")
        saved = store.append_failure(index, attempt, record, response=answer if index == 0 else None)
        assert saved.kept_answer is (index == 0)
    store.close()
    states = RunStore.open(paths).reconcile().states
    assert [state.pending for state in states] == [False, True]
    assert [state.disposition for state in states] == [Disposition.FAILED, Disposition.FAILED]


def test_one_run_spec_describes_a_fresh_run_and_a_legacy_import(tmp_path: Path) -> None:
    """The same RunSpec gives a fresh run and an imported one the same recorded description."""
    spec = RunSpec(
        source_path="d",
        source_digest=DIGEST,
        inputs=make_inputs(2),
        identity={"model": "m"},
        config_digest=DIGEST,
        max_rollout_attempts=4,
        retry_terminal_timeouts=True,
    )
    (tmp_path / "a").mkdir()
    fresh = RunStore.create_fresh(RunPaths.for_output(tmp_path / "a" / "out.jsonl"), spec).manifest
    legacy_paths = RunPaths.for_output(tmp_path / "b" / "out.jsonl")
    legacy_paths.folder.mkdir()
    append_raw(legacy_paths.results, {"_ng_rollout_id": "demo-t0", "reward": 1.0})
    legacy = RunStore.import_legacy(legacy_paths, spec).manifest
    fields = (
        "source_path",
        "source_digest",
        "inputs_digest",
        "config_digest",
        "rollout_count",
        "max_rollout_attempts",
        "retry_terminal_timeouts",
    )
    assert [getattr(fresh, f) for f in fields] == [getattr(legacy, f) for f in fields]
    assert (fresh.identity_source, legacy.identity_source) == ("verified", "imported")
