"""The collector's circuit breaker for a server nobody supervises (collected by hand, real processes).

Outside a job nobody watches the Environment Server; when it dies mid-run, transport failures in a
row across different rollouts make the collector probe it: a server that does not answer is the
cause, so those attempts are interruptions (no budget), dispatch pauses, and the invocation ends
with exit 1 when the server stays down, or goes on when it comes back.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DemoServer
from tests.e2e.helpers import collect_command, companion, coverage_of, read_jsonl
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def _dataset(path: Path, rows: int) -> Path:
    with path.open("w") as handle:
        for n in range(rows):
            task_input = {"question": f"What is {n} + 2?", "a": n, "b": 2, "op": "+"}
            handle.write(
                json.dumps({"task_id": {"taskset": "arith", "task_id": str(n)}, "task_input": task_input})
                + "\n"
            )
    return path


def _collect(tmp: Path, server: DemoServer, *overrides: str) -> subprocess.Popen[str]:
    """Start the collector; its stderr goes to ``tmp/collector.stderr`` (read it while it runs)."""
    data = _dataset(tmp / "data.jsonl", 60)
    overrides = ("+concurrency=8", "+route_failures_to_sidecar=true", "+require_complete=true", *overrides)
    argv = collect_command(data, tmp / "out" / "r.jsonl", server.url, *overrides)
    with (tmp / "collector.stderr").open("w") as stderr:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, text=True)


def _stderr(tmp: Path) -> str:
    return (tmp / "collector.stderr").read_text(errors="replace")


def _wait_stderr(tmp: Path, collector: subprocess.Popen[str], text: str) -> None:
    """Wait until the running collector has written ``text`` to its stderr."""

    def written() -> bool:
        if text in _stderr(tmp):
            return True
        assert collector.poll() is None, f"the collector exited before {text!r}:\n{_stderr(tmp)}"
        return False

    wait_until(written, 60, lambda: f"{text!r} from the collector:\n{_stderr(tmp)}", every_s=0.05)


def _results(tmp: Path) -> int:
    path = tmp / "out" / "r.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _interruptions(tmp: Path) -> list[dict[str, Any]]:
    path = companion(tmp / "out" / "r.jsonl", "_failures.jsonl")
    return (
        [row for row in read_jsonl(path) if row["_ng_failure_class"] == "kill_shaped"]
        if path.exists()
        else []
    )


def _wait_results(tmp: Path, count: int) -> None:
    wait_until(lambda: _results(tmp) >= count, 60, f"{count} outcomes saved", every_s=0.05)


def test_a_dead_server_ends_the_invocation_with_exit_1_charging_nobody(
    tmp_path: Path, start_demo_server: Any
) -> None:
    """kill -9 of the server mid-run, no comeback: exit 1 after dispatch_breaker_wait_s, 0 counted
    failures, the attempts in flight recorded as interruptions (cause server_unreachable)."""
    server = start_demo_server("--latency-ms", "300")
    collector = _collect(tmp_path, server, "+dispatch_breaker_wait_s=3")
    _wait_results(tmp_path, 8)
    server.process.kill()
    collector.wait(timeout=120)
    coverage, stderr = coverage_of(tmp_path / "out" / "r.jsonl"), _stderr(tmp_path)
    assert collector.returncode == 1, stderr
    assert coverage["counted_failures"] == 0 and coverage["failure_budget_exhausted"] == 0
    assert "circuit breaker" in stderr and "no rollout was charged" in stderr
    interrupted = _interruptions(tmp_path)
    assert interrupted
    assert interrupted[0]["_ng_failure_diagnostics"]["interruption"]["cause"] == "server_unreachable"


def test_a_server_back_within_the_wait_lets_the_run_finish(tmp_path: Path, start_demo_server: Any) -> None:
    """The server dies and comes back on its port within dispatch_breaker_wait_s: dispatch pauses,
    then resumes; the run completes in the same invocation with 0 counted failures."""
    server = start_demo_server("--latency-ms", "300")
    collector = _collect(tmp_path, server, "+dispatch_breaker_wait_s=60")
    _wait_results(tmp_path, 8)
    server.process.kill()
    server.process.wait()
    _wait_stderr(tmp_path, collector, "circuit breaker open")  # the outage is seen before it ends
    start_demo_server("--latency-ms", "300", "--port", str(server.port))  # the last --port wins
    collector.wait(timeout=120)
    coverage, stderr = coverage_of(tmp_path / "out" / "r.jsonl"), _stderr(tmp_path)
    assert collector.returncode == 0, stderr
    assert (coverage["successful"], coverage["counted_failures"]) == (60, 0)
    assert "circuit breaker open" in stderr and "circuit breaker closed" in stderr


def test_a_timeout_of_one_rollout_while_the_server_answers_still_counts(
    tmp_path: Path, start_demo_server: Any
) -> None:
    """One rollout's request times out while the server answers the others: the streak breaks,
    the probe finds the server alive, and the failure spends budget as before."""
    server = start_demo_server()
    data = _dataset(tmp_path / "data.jsonl", 20)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    rows[3]["task_input"].update({"_demo_fault": "slow", "_demo_fault_attempts": 1})  # 1 s, first attempt
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = collect_command(
        data,
        tmp_path / "out" / "r.jsonl",
        server.url,
        "+concurrency=4",
        "+route_failures_to_sidecar=true",
        "+request_timeout_s=0.6",
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    coverage = coverage_of(tmp_path / "out" / "r.jsonl")
    assert done.returncode == 0, done.stderr
    assert (coverage["successful"], coverage["counted_failures"]) == (20, 1)
    assert not _interruptions(tmp_path)
