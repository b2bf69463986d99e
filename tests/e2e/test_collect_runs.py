"""`gymslurm collect` end to end: a real demo server process, the collector as a subprocess.

Covers resume after a retryable failure, the run lock, identity refusal with no byte changed,
operational drift, SIGTERM, and where every demo-server fault lands (coverage category, exit code).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]


# --- helpers ---------------------------------------------------------------------------------------


def write_tasks(path: Path, specs: list[dict[str, Any]]) -> Path:
    """A native dataset: one arithmetic task per spec; spec keys are extra task_input fields."""
    with path.open("w") as handle:
        for number, extra in enumerate(specs):
            task_input = {"question": f"What is {number} + 1?", "a": number, "b": 1, "op": "+", **extra}
            handle.write(
                json.dumps(
                    {"task_id": {"taskset": "arith", "task_id": str(number)}, "task_input": task_input}
                )
            )
            handle.write("\n")
    return path


def collect_command(dataset: Path, output: Path, url: str, *overrides: str) -> list[str]:
    return [
        sys.executable, "-m", "gymslurm", "collect",
        f"+input_jsonl_fpath={dataset}", f"+output_jsonl_fpath={output}", f"+environment_server_url={url}",
        "+progress=plain", "+summary=false", *overrides,
    ]  # fmt: skip


def collect(dataset: Path, output: Path, url: str, *overrides: str, env: dict[str, str] | None = None) -> Any:
    """Run one collection to its end; returns the CompletedProcess (text)."""
    return subprocess.run(
        collect_command(dataset, output, url, *overrides),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})},
        check=False,
    )  # fmt: skip


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def companion(output: Path, suffix: str) -> Path:
    return output.with_name(output.stem + suffix)


def coverage_of(output: Path) -> dict[str, Any]:
    return json.loads(companion(output, "_coverage.json").read_text())


def reservations_of(output: Path) -> list[int]:
    """The per-rollout reservation counts (docs/formats.md layout)."""
    data = companion(output, "_reservations.bin").read_bytes()
    (count,) = struct.unpack_from("<Q", data, 16)
    return list(struct.unpack_from(f"<{count}I", data, 64))


def selected(output: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each rollout's selected outcome read straight from the files: (kind, row) of its newest execution."""
    inputs = read_jsonl(companion(output, "_materialized_inputs.jsonl"))
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


def snapshot(folder: Path) -> dict[str, str]:
    """Digest of every run file except the lock (its holder line is rewritten by every collector)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if not path.name.endswith("_run.lock")
    }


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
    dataset = write_tasks(tmp_path / "d.jsonl", [{} for _ in range(40)])
    output = tmp_path / "out.jsonl"
    first = subprocess.Popen(
        collect_command(dataset, output, server.url, "+concurrency=1"), cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: companion(output, "_coverage.json").exists(), first)
        second = collect(dataset, output, server.url, "+resume_from_cache=true")
        assert second.returncode == 1
        assert str(first.pid) in second.stderr and os.uname().nodename in second.stderr
    finally:
        first.kill()
        first.wait()


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, (
            f"collector exited early: {process.stderr.read() if process.stderr else ''}"
        )
        assert time.monotonic() < deadline, "timed out waiting for the collector"
        time.sleep(0.05)


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
        collect_command(dataset, output, server.url, *extra), cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _wait_for(lambda: len(read_jsonl(output)) >= 3, process)
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
        ([{}, {}], ["+dispatch_budget_s=0"], 1, "were not dispatched"),
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
