"""Health checks: failure rate and completeness over selected history, skips, and stale offsets."""

from __future__ import annotations

import io
import os
from pathlib import Path

import orjson
import pytest

from gymslurm.aggregate import AggregateOptions, aggregate
from gymslurm.cli import main as cli_main
from gymslurm.errors import StaleFileError
from gymslurm.health import (
    COUNT_KEYS,
    HealthThresholds,
    after_collection,
    count_states,
    evaluate,
    run_health_check,
)
from gymslurm.selection import BudgetPolicy, SavedOutcome, select_rollout
from gymslurm.store import RunPaths
from gymslurm.store.lines import index_file, read_lines
from tests.unit.test_aggregate_fixtures import ShardBuilder, companion, write_legacy

LOOSE = HealthThresholds(max_failure_rate=0.5, min_completeness=0.0)


def counts(**given: int) -> dict[str, int]:
    """Health counts with zeros for the rest."""
    return {**dict.fromkeys(COUNT_KEYS, 0), **given}


def check(result: list[dict[str, object]], name: str) -> dict[str, object]:
    """One named check of an evaluation."""
    return next(c for c in result if c["name"] == name)


def test_omissions_never_trip_the_failure_rate() -> None:
    """Omissions are neither failures nor finished rollouts in the failure rate."""
    result = evaluate(counts(expected=10, completed=1, omitted=9), HealthThresholds(max_failure_rate=0.0))
    assert check(result, "failure_rate")["passed"] is True
    assert check(result, "completeness")["value"] == 1.0


def test_failure_rate_over_final_failures() -> None:
    """The failure rate is final failures over completed plus final failures."""
    result = evaluate(
        counts(expected=4, completed=3, final_failures=1), HealthThresholds(max_failure_rate=0.2)
    )
    assert (check(result, "failure_rate")["value"], check(result, "failure_rate")["passed"]) == (0.25, False)


def test_exhausted_failures_count_as_final() -> None:
    """A retryable failure whose budget is exhausted is final; one still within budget is not."""
    policy = BudgetPolicy(max_rollout_attempts=2)
    fail = [SavedOutcome(a, "failure", a, terminal=False, delivery="delivered") for a in range(2)]
    exhausted = select_rollout(2, fail, policy)
    within = select_rollout(1, fail[:1], policy)
    got = count_states([exhausted, within])
    assert (got["final_failures"], got["exhausted"], got["retryable_failures"]) == (1, 1, 1)


def test_run_check_uses_selected_history(tmp_path: Path) -> None:
    """A retried failure that later succeeded is not a failure; a terminal one is."""
    run = ShardBuilder(tmp_path / "out.jsonl", 4)
    run.failure("arith-0").result("arith-0").result("arith-1").failure("arith-2", terminal=True).omit(
        "arith-3"
    )
    report = run_health_check(run.finish(), thresholds=LOOSE)
    assert report.counts["final_failures"] == 1
    assert report.counts["completed"] == 2
    assert report.status == "pass"
    assert report.failure_examples == {"agent_run_error": ["agent_run_error on arith-2"]}


def test_failing_check_sets_status_fail(tmp_path: Path) -> None:
    """A failure rate over the limit fails the report."""
    run = ShardBuilder(tmp_path / "out.jsonl", 2).result("arith-0").failure("arith-1", terminal=True)
    report = run_health_check(run.finish(), thresholds=HealthThresholds(max_failure_rate=0.1))
    assert report.status == "fail"


def test_superseded_result_in_checked_file_is_skipped(tmp_path: Path) -> None:
    """A results file holding a superseded attempt is skipped, with aggregate advice standalone."""
    run = ShardBuilder(tmp_path / "out.jsonl", 1)
    run.result("arith-0", None, masked=True, failure_kind="provider_unavailable").result("arith-0")
    report = run_health_check(run.finish())
    assert report.status == "skipped"
    assert "gymslurm aggregate" in report.message


def test_superseded_failure_in_sidecar_does_not_skip(tmp_path: Path) -> None:
    """A superseded failure in the separate sidecar does not prevent checking the retried results."""
    run = ShardBuilder(tmp_path / "out.jsonl", 1).failure("arith-0").result("arith-0")
    assert run_health_check(run.finish()).status == "pass"


def test_merged_projection_is_checkable(tmp_path: Path) -> None:
    """The selected projection exported by aggregate passes where the raw run was skipped."""
    run = ShardBuilder(tmp_path / "out.jsonl", 2)
    run.result("arith-0", None, masked=True, failure_kind="provider_unavailable").result("arith-0").result(
        "arith-1"
    )
    merged = tmp_path / "merged.jsonl"
    aggregate(AggregateOptions(inputs=(str(run.finish()),), output=merged), written_at="t")
    report = run_health_check(merged)
    assert (report.status, report.counts["completed"]) == ("pass", 2)


def test_file_with_repeated_rollouts_is_skipped(tmp_path: Path) -> None:
    """A file repeating a rollout holds superseded outcomes: skipped, never extra samples."""
    path = write_legacy(
        tmp_path / "x.jsonl", [{"_ng_rollout_id": "a", "reward": 1}, {"_ng_rollout_id": "a", "reward": 0}]
    )
    assert run_health_check(path).status == "skipped"


def test_index_then_replace_is_detected(tmp_path: Path) -> None:
    """Review case: a file replaced after indexing is refused, not read through stale offsets."""
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b'{"task": 0}\n{"task": 1}\n')
    index = index_file(path)
    assert index is not None
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(b'{"task": 9}\n{"task": 1}\n')
    os.replace(replacement, path)
    with pytest.raises(StaleFileError, match="replaced"):
        list(read_lines(index, [0, 1]))


def test_index_then_append_still_reads(tmp_path: Path) -> None:
    """Append-only growth keeps the inode: indexed offsets stay valid."""
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b'{"task": 0}\n{"task": 1}\n')
    index = index_file(path)
    assert index is not None
    with open(path, "ab") as handle:
        handle.write(b'{"task": 2}\n')
    assert [row["task"] for _, row in read_lines(index, [0, 1])] == [0, 1]


def test_index_then_truncate_is_detected(tmp_path: Path) -> None:
    """A file truncated in place below its indexed size is refused."""
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b'{"task": 0}\n{"task": 1}\n')
    index = index_file(path)
    assert index is not None
    os.truncate(path, 5)
    with pytest.raises(StaleFileError):
        list(read_lines(index, [1]))


def test_run_replaced_while_checking_is_detected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh collection replacing the run between index and read makes the check fail loudly."""
    from gymslurm import health

    first = (
        ShardBuilder(tmp_path / "out.jsonl", 2).result("arith-0").failure("arith-1", terminal=True).finish()
    )
    real_index = health.index_file

    def index_then_replace(path: Path) -> object:
        index = real_index(path)
        if path == first:
            fresh = tmp_path / "fresh.jsonl"
            fresh.write_bytes(first.read_bytes())
            os.replace(fresh, first)
        return index

    monkeypatch.setattr(health, "index_file", index_then_replace)
    with pytest.raises(StaleFileError):
        run_health_check(first, thresholds=LOOSE)


def test_after_collection_writes_report(tmp_path: Path) -> None:
    """The automatic check writes <stem>_health.json beside the run."""
    out = ShardBuilder(tmp_path / "out.jsonl", 1).result("arith-0").finish()
    report = after_collection(RunPaths.for_output(out), stderr=io.StringIO())
    assert report.status == "pass"
    assert orjson.loads(companion(out, "_health.json").read_bytes())["status"] == "pass"


def test_after_collection_skips_with_message_and_removes_old_report(tmp_path: Path) -> None:
    """An automatic check over superseded outcomes prints a skip message and leaves no stale report."""
    run = ShardBuilder(tmp_path / "out.jsonl", 1)
    run.result("arith-0", None, masked=True, failure_kind="provider_unavailable").result("arith-0")
    out = run.finish()
    companion(out, "_health.json").write_bytes(b"{}")
    err = io.StringIO()
    after_collection(RunPaths.for_output(out), stderr=err)
    assert "skipped" in err.getvalue()
    assert "gymslurm aggregate" not in err.getvalue()
    assert not companion(out, "_health.json").exists()


@pytest.mark.parametrize(
    ("build", "code"),
    [
        (lambda b: b.result("arith-0").result("arith-1"), 0),
        (lambda b: b.result("arith-0").failure("arith-1", terminal=True), 1),
        (
            lambda b: b.result("arith-0", None, masked=True, failure_kind="provider_unavailable").result(
                "arith-0"
            ),
            3,
        ),
    ],
    ids=["pass → 0", "fail → 1", "skipped → 3"],
)
def test_command_exit_codes(tmp_path: Path, build: object, code: int) -> None:
    """gymslurm health exits 0 when healthy, 1 when a check fails, 3 when skipped."""
    builder = ShardBuilder(tmp_path / "out.jsonl", 2)
    build(builder)  # type: ignore[operator]
    assert cli_main(["health", str(builder.finish())]) == code


def stamped(rollout: str, attempt: int, **extra: object) -> dict[str, object]:
    """A row of a manifest-less file with run and rollout stamps."""
    return {"_ng_run_id": "r", "_ng_rollout_id": rollout, "_ng_attempt": attempt, **extra}


def sidecar_failure(rollout: str, attempt: int) -> dict[str, object]:
    """A failure-sidecar row of a manifest-less file."""
    return stamped(
        rollout, attempt, _ng_failure_class="judge_failed", _ng_failure_message=f"judge failed on {rollout}"
    )


def test_sidecar_only_failure_counts_as_an_expected_rollout(tmp_path: Path) -> None:
    """A file without a manifest: a rollout seen only in the sidecar is expected and fails completeness."""
    rows = [stamped(f"a{i}", 0, reward=1) for i in range(3)]
    path = write_legacy(tmp_path / "re.jsonl", rows, [sidecar_failure("a3", 1)])
    report = run_health_check(path)
    assert (report.counts["expected"], report.counts["completed"], report.counts["final_failures"]) == (
        4,
        3,
        1,
    )
    assert check(report.checks, "completeness")["passed"] is False
    assert report.failure_examples == {"judge_failed": ["judge failed on a3"]}


def test_sidecar_only_omission_is_excluded_from_completeness(tmp_path: Path) -> None:
    """A file without a manifest: an omission in the sidecar is expected but excluded, not a failure."""
    rows = [stamped("a0", 0, reward=1)]
    path = write_legacy(tmp_path / "re.jsonl", rows, [stamped("a1", 1, _ng_omitted=True)])
    report = run_health_check(path)
    assert (report.counts["expected"], report.counts["omitted"], report.status) == (2, 1, "pass")


def test_older_sidecar_failure_of_a_result_is_superseded(tmp_path: Path) -> None:
    """A file without a manifest: a sidecar failure older than the rollout's result is not counted."""
    rows = [stamped("a0", 1, reward=1)]
    path = write_legacy(tmp_path / "re.jsonl", rows, [sidecar_failure("a0", 0), sidecar_failure("a0", 0)])
    report = run_health_check(path)
    assert (report.counts["expected"], report.counts["completed"], report.status) == (1, 1, "pass")


def test_result_superseded_by_newer_sidecar_failure_is_skipped(tmp_path: Path) -> None:
    """A file without a manifest whose result is older than a sidecar failure of it is skipped."""
    rows = [stamped("a0", 0, reward=1)]
    path = write_legacy(tmp_path / "re.jsonl", rows, [sidecar_failure("a0", 1)])
    assert run_health_check(path).status == "skipped"


def test_failure_examples_hold_no_key_a_server_echoed(tmp_path: Path) -> None:
    """A sidecar saved before replies were screened: its echoed key is not copied into the examples."""
    echoed = "Incorrect API key provided: sk-ECHOED-by-an-older-collector"
    run = ShardBuilder(tmp_path / "out.jsonl", 1)
    run.failure("arith-0", echoed, terminal=True)
    report = run_health_check(run.finish(), thresholds=LOOSE)
    examples = [text for texts in report.failure_examples.values() for text in texts]
    assert examples == ["Incorrect API key provided: <redacted> on arith-0"]
