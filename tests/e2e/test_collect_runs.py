"""`gymslurm collect` end to end: a real demo server process, the collector as a subprocess.

Covers resume after a retryable failure, the run lock, identity refusal with no byte changed,
operational drift, SIGTERM, and where every demo-server fault lands (coverage category, exit code).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import (
    REPO_ROOT,
    collect,
    collect_command,
    companion,
    coverage_of,
    read_jsonl,
    reservations_of,
    snapshot,
    write_tasks,
)
from tests.support import wait_until

pytestmark = pytest.mark.e2e


# --- helpers ---------------------------------------------------------------------------------------


def selected(output: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each rollout's selected outcome read straight from the files: (kind, row) of its newest execution."""
    inputs = read_jsonl(companion(output, "_gymslurm_inputs.jsonl"))
    counts = reservations_of(output)
    newest = {task["_ng_rollout_id"]: counts[i] - 1 for i, task in enumerate(inputs)}
    chosen: dict[str, tuple[str, dict[str, Any]]] = {}
    for row in read_jsonl(output):
        if row["_ng_attempt"] == newest[row["_ng_rollout_id"]]:
            chosen[row["_ng_rollout_id"]] = ("result", row)
    for row in read_jsonl(companion(output, "_failures.jsonl")):
        if row["_ng_attempt"] == newest[row["_ng_rollout_id"]]:
            chosen[row["_ng_rollout_id"]] = ("omission" if row.get("_ng_omitted") else "failure", row)
    return chosen


# --- resume --------------------------------------------------------------------------------------


def test_resume_keeps_two_results_and_sends_only_the_third_again(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Two of three finish, the third fails retryably; resume keeps two and sends the third with attempt 1."""
    server = start_demo_server("--accuracy", "1.0")
    dataset = write_tasks(
        tmp_path / "d.jsonl", [{}, {}, {"_demo_fault": "retryable", "_demo_fault_attempts": 1}]
    )
    output = tmp_path / "run" / "out.jsonl"
    first = collect(dataset, output, server.url, "+retry_in_invocation=false", "+require_complete=true")
    assert first.returncode == 75, first.stderr
    saved_results = output.read_bytes()
    assert [row["_ng_rollout_id"] for row in read_jsonl(output)] == ["arith-0", "arith-1"]

    second = collect(dataset, output, server.url, "+resume_from_cache=true", "+require_complete=true")
    assert second.returncode == 0, second.stderr
    assert output.read_bytes().startswith(saved_results)
    new_rows = read_jsonl(output)[2:]
    assert [(row["_ng_rollout_id"], row["_ng_attempt"]) for row in new_rows] == [("arith-2", 1)]
    assert reservations_of(output) == [1, 1, 2]
    cov = coverage_of(output)
    assert (cov["successful"], cov["expected"], cov["complete"], cov["historical_failed_attempts"]) == (
        3,
        3,
        True,
        1,
    )


def test_retryable_failure_is_retried_within_the_invocation(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """By default a retryable failure is dispatched again at once as a new attempt and completes."""
    server = start_demo_server("--accuracy", "1.0")
    dataset = write_tasks(tmp_path / "d.jsonl", [{"_demo_fault": "retryable", "_demo_fault_attempts": 2}])
    output = tmp_path / "out.jsonl"
    done = collect(dataset, output, server.url, "+require_complete=true")
    assert done.returncode == 0, done.stderr
    assert reservations_of(output) == [3] and coverage_of(output)["counted_failures"] == 2


# --- lock, identity, drift -----------------------------------------------------------------------


def test_second_collector_is_refused_naming_the_holder(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A second collector on the same output exits 1 naming the first one's pid and host."""
    server = start_demo_server("--latency-ms", "200")
    dataset = write_tasks(tmp_path / "d.jsonl", [{} for _ in range(600)])  # 2 min: outlasts a slow start
    output = tmp_path / "out.jsonl"
    first = subprocess.Popen(
        collect_command(dataset, output, server.url, "+concurrency=1"),
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: companion(output, "_coverage.json").exists(), first, "the first coverage file")
        second = collect(dataset, output, server.url, "+resume_from_cache=true")
        assert second.returncode == 1
        assert str(first.pid) in second.stderr and os.uname().nodename in second.stderr
    finally:
        first.kill()
        first.wait()


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    """Wait (60 s) for ``condition`` while the collector ``process`` still runs (its exit fails at once)."""

    def check() -> bool:
        if condition():
            return True
        assert process.poll() is None, (
            f"collector exited early: {process.stderr.read() if process.stderr else ''}"
        )
        return False

    wait_until(check, 60, what, every_s=0.05)


def test_changed_model_is_refused_with_no_byte_changed(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A resume against a server reporting another model is refused naming the key; no file changes."""
    first = start_demo_server("--model-name", "model-a")
    dataset = write_tasks(tmp_path / "d.jsonl", [{}, {}])
    output = tmp_path / "run" / "out.jsonl"
    assert collect(dataset, output, first.url).returncode == 0
    before = snapshot(output.parent)
    other = start_demo_server("--model-name", "model-b")
    refused = collect(dataset, output, other.url, "+resume_from_cache=true")
    assert refused.returncode == 2
    assert "environment_config.policy_model" in refused.stderr and "model" in refused.stderr
    assert snapshot(output.parent) == before


def test_changed_dataset_is_refused(start_demo_server: Callable[..., Any], tmp_path: Path) -> None:
    """A resume whose dataset content changed is refused (source and inputs digests)."""
    server = start_demo_server()
    dataset = write_tasks(tmp_path / "d.jsonl", [{}, {}])
    output = tmp_path / "out.jsonl"
    assert collect(dataset, output, server.url).returncode == 0
    write_tasks(dataset, [{}, {}, {}])
    refused = collect(dataset, output, server.url, "+resume_from_cache=true")
    assert refused.returncode == 2 and "source_digest" in refused.stderr


def test_changed_concurrency_resumes_with_a_drift_line(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Changing only concurrency resumes (exit 0), warns, and journals the drift."""
    server = start_demo_server()
    dataset = write_tasks(tmp_path / "d.jsonl", [{}, {}, {}])
    output = tmp_path / "out.jsonl"
    assert collect(dataset, output, server.url, "+concurrency=4").returncode == 0
    resumed = collect(dataset, output, server.url, "+resume_from_cache=true", "+concurrency=2")
    assert resumed.returncode == 0, resumed.stderr
    assert "concurrency" in resumed.stderr
    (drift,) = read_jsonl(companion(output, "_resume_drift.jsonl"))
    assert drift["keys"] == ["concurrency"]


def test_fresh_collection_replaces_an_existing_run_and_says_so(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A non-resume collection at an existing output replaces the run (new run id) and says so."""
    server = start_demo_server()
    dataset = write_tasks(tmp_path / "d.jsonl", [{}])
    output = tmp_path / "out.jsonl"
    assert collect(dataset, output, server.url).returncode == 0
    old_run = coverage_of(output)["run_id"]
    again = collect(dataset, output, server.url)
    assert again.returncode == 0 and "replacing the existing run" in again.stderr
    assert coverage_of(output)["run_id"] != old_run and len(read_jsonl(output)) == 1


def test_resume_without_manifest_is_refused_unless_unsafe(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Saved outcomes without a manifest are refused; allow_unsafe_resume imports them unverified."""
    server = start_demo_server()
    dataset = write_tasks(tmp_path / "d.jsonl", [{}, {}])
    output = tmp_path / "out.jsonl"
    assert collect(dataset, output, server.url).returncode == 0
    legacy_rows = [{k: v for k, v in row.items() if k != "_ng_run_id"} for row in read_jsonl(output)]
    output.write_text("".join(json.dumps(row) + "\n" for row in legacy_rows[:1]))  # an older collector's file
    for suffix in ("_manifest.json", "_reservations.bin", "_identity.json", "_coverage.json"):
        companion(output, suffix).unlink()
    refused = collect(dataset, output, server.url, "+resume_from_cache=true")
    assert refused.returncode == 2 and "allow_unsafe_resume" in refused.stderr
    imported = collect(dataset, output, server.url, "+resume_from_cache=true", "+allow_unsafe_resume=true")
    assert imported.returncode == 0, imported.stderr
    cov = coverage_of(output)
    assert cov["identity_verified"] is False and cov["successful"] == 2
    assert read_jsonl(output)[0] == legacy_rows[0]


def test_partial_initial_cache_starts_fresh(start_demo_server: Callable[..., Any], tmp_path: Path) -> None:
    """Part of an initial cache (no manifest, empty outcomes): 'Skipping resume_from_cache', fresh run."""
    server = start_demo_server()
    dataset = write_tasks(tmp_path / "d.jsonl", [{}])
    output = tmp_path / "out.jsonl"
    output.write_bytes(b"")
    companion(output, "_materialized_inputs.jsonl").write_bytes(b"{}\n")
    resumed = collect(dataset, output, server.url, "+resume_from_cache=true")
    assert resumed.returncode == 0 and "Skipping resume_from_cache" in resumed.stderr
    assert coverage_of(output)["successful"] == 1


def test_symlinked_output_is_resolved_and_kept(start_demo_server: Callable[..., Any], tmp_path: Path) -> None:
    """A symlinked output is written through: companions beside the target, the symlink kept."""
    server = start_demo_server()
    dataset = write_tasks(tmp_path / "d.jsonl", [{}])
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.jsonl"
    target.write_bytes(b"")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert collect(dataset, link, server.url).returncode == 0
    assert link.is_symlink() and companion(target, "_manifest.json").exists()
    assert not companion(link, "_manifest.json").exists()


# --- signals ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signame", "require_complete", "code"),
    [("SIGTERM", True, 75), ("SIGUSR1", True, 75), ("SIGINT", False, 0)],
)
def test_stop_signal_cancels_in_flight_and_leaves_them_unfinished(
    start_demo_server: Callable[..., Any], tmp_path: Path, signame: str, require_complete: bool, code: int
) -> None:
    """A stop signal cancels requests in flight: reserved and missing, not failed; resume completes."""
    server = start_demo_server("--latency-ms", "300", "--accuracy", "1.0")
    dataset = write_tasks(tmp_path / "d.jsonl", [{} for _ in range(30)])
    output = tmp_path / "out.jsonl"
    extra = [f"+require_complete={str(require_complete).lower()}", "+concurrency=3"]
    process = subprocess.Popen(
        collect_command(dataset, output, server.url, *extra),
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(lambda: len(read_jsonl(output)) >= 3, process, "three results")
    process.send_signal(getattr(signal, signame))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    cov = coverage_of(output)
    assert cov["failed"] == 0 and cov["missing"] >= 1 and not cov["complete"]
    resumed = collect(dataset, output, server.url, "+resume_from_cache=true", "+require_complete=true")
    assert resumed.returncode == 0, resumed.stderr
    assert coverage_of(output)["successful"] == 30


# --- every demo fault -------------------------------------------------------------------------------

# fault spec -> (expected selected kind, expected routing class or None, retryable afterwards)
FAULT_CASES: list[tuple[dict[str, Any], str, str | None]] = [
    ({}, "measured", None),
    ({"_demo_fault": "retryable", "_demo_fault_attempts": 1}, "measured", None),
    ({"_demo_fault": "slow", "_demo_latency_ms": 50}, "measured", None),
    ({"_demo_fault": "terminal"}, "failed", "agent_command_not_allowed"),
    ({"_demo_fault": "retryable"}, "failed", "session_lost"),
    ({"_demo_fault": "unspecified"}, "failed", "environment_server_failed"),
    ({"_demo_fault": "admission"}, "failed", "environment_server_failed"),
    ({"_demo_fault": "kill_shaped"}, "failed", "kill_shaped"),
    ({"_demo_fault": "masked"}, "masked", None),
    ({"_demo_fault": "masked_kept"}, "masked", None),
    ({"_demo_fault": "unscored"}, "unscored", None),
    ({"_demo_fault": "omit"}, "intentionally_omitted", None),
    ({"_demo_fault": "malformed"}, "failed", "environment_protocol_violation"),
    ({"_demo_fault": "long_reason"}, "failed", "environment_protocol_violation"),
    ({"_demo_fault": "not_json"}, "failed", "environment_protocol_violation"),
    ({"_demo_fault": "wrong_task"}, "failed", "environment_protocol_violation"),
    ({"_demo_fault": "stale"}, "failed", None),
    ({"_demo_fault": "http500"}, "failed", "environment_server_failed"),
    ({"_demo_fault": "http503"}, "failed", "provider_unavailable"),
    ({"_demo_fault": "http429"}, "failed", "provider_unavailable"),
]


def _disposition(kind: str, row: dict[str, Any]) -> str:
    if kind == "omission":
        return "intentionally_omitted"
    if kind == "failure":
        return "failed"
    if row.get("mask_sample") is True:
        return "masked"
    reward = row.get("reward")
    return "measured" if isinstance(reward, int | float) and not isinstance(reward, bool) else "unscored"


def test_every_fault_lands_in_its_coverage_category(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """With routing on, each demo fault's rollout is selected in the right category and class."""
    server = start_demo_server("--accuracy", "1.0")
    dataset = write_tasks(tmp_path / "d.jsonl", [spec for spec, _, _ in FAULT_CASES])
    output = tmp_path / "out.jsonl"
    run = collect(dataset, output, server.url, "+route_failures_to_sidecar=true", "+require_complete=true")
    chosen = selected(output)
    for number, (spec, category, failure_class) in enumerate(FAULT_CASES):
        kind, row = chosen[f"arith-{number}"]
        assert _disposition(kind, row) == category, (spec, row)
        if failure_class is not None:
            assert row["_ng_failure_class"] == failure_class, (spec, row)
    cov = coverage_of(output)
    counts = {
        name: sum(1 for _, c, _ in FAULT_CASES if c == name) for name in ("measured", "masked", "failed")
    }
    assert {name: cov[name] for name in counts} == counts
    assert cov["expected"] == len(FAULT_CASES) and not cov["complete"]
    # admission and kill_shaped stay retryable without spending budget, so no progress is lost: 75
    assert run.returncode == 75, run.stderr
    assert (
        "used up their failure budget" in run.stderr
        and str(companion(output, "_failures.jsonl")) in run.stderr
    )


@pytest.mark.parametrize(
    ("specs", "overrides", "code", "message"),
    [
        ([{}], [], 0, "exit 0: complete"),
        ([{"_demo_fault": "terminal"}], [], 76, "only terminal failures"),
        ([{"_demo_fault": "retryable"}], [], 76, "used up their failure budget"),
        ([{}, {"_demo_fault": "omit"}], [], 0, "1 completed, 2 expected, 1 omitted"),
        ([{"_demo_fault": "omit"}], [], 76, "intentionally omitted"),
        ([{"_demo_fault": "admission"}], [], 1, "no progress"),
        ([{"_demo_fault": "kill_shaped"}], [], 1, "no progress"),
        ([{"_demo_fault": "retryable"}], ["+retry_in_invocation=false"], 75, "progress made"),
        ([{"_demo_fault": "malformed"}], [], 1, "protocol"),
        ([{"_demo_fault": "malformed"}], ["+route_failures_to_sidecar=true"], 76, "only terminal failures"),
        ([{"_demo_fault": "terminal"}], ["+require_complete=false"], 0, "partial results accepted"),
        ([{}, {}], ["+dispatch_budget_s=0"], 1, "Increase the dispatch budget (+dispatch_budget_s) or"),
    ],
)
def test_exit_codes(  # noqa: PLR0917
    start_demo_server: Callable[..., Any],
    tmp_path: Path,
    specs: list[dict[str, Any]],
    overrides: list[str],
    code: int,
    message: str,
) -> None:
    """Each outcome mix ends with the exit code of the spec and says why."""
    server = start_demo_server("--accuracy", "1.0")
    dataset = write_tasks(tmp_path / "d.jsonl", specs)
    run = collect(dataset, tmp_path / "out.jsonl", server.url, "+require_complete=true", *overrides)
    assert run.returncode == code, run.stderr
    assert message in run.stderr


def test_tasksets_are_routed_to_their_servers(start_demo_server: Callable[..., Any], tmp_path: Path) -> None:
    """A taskset → server mapping sends each taskset's tasks to its server; both configs enter identity."""
    healthy = start_demo_server("--accuracy", "1.0", "--model-name", "model-a")
    failing = start_demo_server("--terminal-rate", "1.0", "--model-name", "model-b")
    dataset = tmp_path / "d.jsonl"
    rows = [
        {"task_id": {"taskset": ts, "task_id": str(i)}, "task_input": {"a": i, "b": 1, "op": "+"}}
        for i, ts in enumerate(["alpha", "beta", "alpha", "beta"])
    ]
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "out.jsonl"
    mapping = f"+environment_server_urls={{alpha: '{healthy.url}', beta: '{failing.url}'}}"
    run = collect(dataset, output, None, mapping)
    assert run.returncode == 0, run.stderr
    chosen = selected(output)
    assert {rid: kind for rid, (kind, _) in chosen.items()} == {
        "alpha-0": "result",
        "beta-1": "failure",
        "alpha-2": "result",
        "beta-3": "failure",
    }
    identity = json.loads(companion(output, "_identity.json").read_text())
    assert set(identity["environment_config"]) == {"alpha", "beta"}


def test_interrupted_fresh_replacement_is_refused_even_when_unsafe(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A manifest left 'replacing' by an interrupted fresh run refuses resume, even unsafe; fresh works."""
    server = start_demo_server()
    dataset = write_tasks(tmp_path / "d.jsonl", [{}])
    output = tmp_path / "out.jsonl"
    assert collect(dataset, output, server.url).returncode == 0
    manifest = companion(output, "_manifest.json")
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "state": "replacing"}))
    for extra in ([], ["+allow_unsafe_resume=true"]):
        refused = collect(dataset, output, server.url, "+resume_from_cache=true", *extra)
        assert refused.returncode == 2 and "interrupted" in refused.stderr
    assert collect(dataset, output, server.url).returncode == 0


def test_torn_tail_is_repaired_only_after_validation(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """An incomplete last line survives a refused resume and is removed by an accepted one."""
    server = start_demo_server("--model-name", "model-a")
    dataset = write_tasks(tmp_path / "d.jsonl", [{}, {}])
    output = tmp_path / "out.jsonl"
    assert collect(dataset, output, server.url).returncode == 0
    with output.open("ab") as handle:
        handle.write(b'{"reward": 1.0, "_ng_run')
    torn = output.read_bytes()
    other = start_demo_server("--model-name", "model-b")
    assert collect(dataset, output, other.url, "+resume_from_cache=true").returncode == 2
    assert output.read_bytes() == torn
    resumed = collect(dataset, output, server.url, "+resume_from_cache=true")
    assert resumed.returncode == 0 and "incomplete last line" in resumed.stderr
    assert output.read_bytes() == torn[: torn.rindex(b"\n") + 1]


def test_explicit_retry_terminal_timeouts_updates_the_saved_policy(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """retry_terminal_timeouts=true retries a terminal timeout and is saved; later resumes keep it."""
    server = start_demo_server()
    timeout_task = {"_demo_fault": "terminal", "_demo_failure_kind": "agent_timeout"}
    dataset = write_tasks(tmp_path / "d.jsonl", [timeout_task])
    output = tmp_path / "out.jsonl"
    assert collect(dataset, output, server.url, "+require_complete=true").returncode == 76
    assert reservations_of(output) == [1]
    retried = collect(dataset, output, server.url, "+resume_from_cache=true", "+retry_terminal_timeouts=true")
    assert retried.returncode == 0, retried.stderr
    assert reservations_of(output) == [3]  # two more attempts: the budget of 3 counted failures
    assert json.loads(companion(output, "_manifest.json").read_text())["retry_terminal_timeouts"] is True
    collect(dataset, output, server.url, "+resume_from_cache=true")
    assert coverage_of(output)["retry_terminal_timeouts"] is True


def test_resubmit_gives_exhausted_rollouts_a_fresh_budget(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """+resubmit=true resets the failure budget once; execution numbers keep increasing."""
    server = start_demo_server()
    dataset = write_tasks(tmp_path / "d.jsonl", [{}, {"_demo_fault": "retryable", "_demo_fault_attempts": 4}])
    output = tmp_path / "out.jsonl"
    assert collect(dataset, output, server.url, "+require_complete=true").returncode == 76
    assert reservations_of(output) == [1, 3] and coverage_of(output)["failure_budget_exhausted"] == 1
    again = collect(dataset, output, server.url, "+resume_from_cache=true", "+require_complete=true")
    assert again.returncode == 76 and reservations_of(output) == [1, 3]  # a plain resume does not reset
    fresh = collect(
        dataset, output, server.url, "+resume_from_cache=true", "+resubmit=true", "+require_complete=true"
    )
    assert fresh.returncode == 0, fresh.stderr
    assert reservations_of(output) == [1, 5]  # attempt 3 failed (counted anew), attempt 4 succeeded
    assert companion(output, "_resubmit_offset").read_text().split()[0] == "3"


def test_server_dying_mid_run_then_resume_on_a_new_server(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A server that dies mid-run: the circuit breaker ends the invocation with exit 1 once it stays
    down (docs/servers.md), charging nobody; resume on a new address completes."""
    dying = start_demo_server("--accuracy", "1.0", "--die-after", "5")
    dataset = write_tasks(tmp_path / "d.jsonl", [{} for _ in range(12)])
    output = tmp_path / "out.jsonl"
    first = collect(
        dataset, output, dying.url, "+concurrency=1", "+require_complete=true", "+dispatch_breaker_wait_s=2"
    )
    assert first.returncode == 1 and "circuit breaker" in first.stderr, first.stderr
    assert coverage_of(output)["successful"] == 5 and coverage_of(output)["counted_failures"] == 0
    dying.process.wait(timeout=10)
    down = collect(dataset, output, dying.url, "+resume_from_cache=true", "+require_complete=true")
    assert down.returncode == 1 and "cannot read the Environment Server's configuration" in down.stderr
    healthy = start_demo_server("--accuracy", "1.0")
    resumed = collect(dataset, output, healthy.url, "+resume_from_cache=true", "+require_complete=true")
    assert resumed.returncode == 0, resumed.stderr
    assert "environment_server_url" in resumed.stderr  # operational drift, noted
    assert coverage_of(output)["successful"] == 12


def test_foreign_record_refuses_before_any_write(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A record of another run is refused before the drift line or any other write is made."""
    server = start_demo_server()
    dataset = write_tasks(tmp_path / "d.jsonl", [{}, {}])
    output = tmp_path / "run" / "out.jsonl"
    assert collect(dataset, output, server.url).returncode == 0
    foreign = {**read_jsonl(output)[0], "_ng_run_id": "run-" + "0" * 32}
    with output.open("a") as handle:
        handle.write(json.dumps(foreign) + "\n")
    before = snapshot(output.parent)
    refused = collect(dataset, output, server.url, "+resume_from_cache=true", "+concurrency=3")
    assert refused.returncode == 2 and "belongs to run" in refused.stderr
    assert snapshot(output.parent) == before
