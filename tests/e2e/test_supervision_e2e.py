"""A job's supervised servers on loopback: a server's death is the run's, never a rollout's.

Real processes throughout: ``gymslurm submit --backend local`` runs a link that starts the demo
Environment Server, supervises it and runs the real collector against it; the test kills the
server with SIGKILL while requests are in flight.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.launcher_chains_helpers import decisions, gymslurm, ledger, only_run, wait_until_final
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def _benchmark(
    tmp: Path, marker: str, *, rows: int = 40, latency_ms: int = 400, extra_server: str = ""
) -> Path:
    dataset = tmp / "data.jsonl"
    gymslurm("demo-server", "--write-dataset", str(dataset), "--n", str(rows))
    path = tmp / "bench.yaml"
    path.write_text(
        f"dataset: {dataset}\nrun_root: {tmp / 'runs'}\nshards: 1\n"
        "servers:\n  - name: env\n"
        f"    command: [{sys.executable}, -m, gymslurm, demo-server, --host, '{{host}}', --port, '{{port}}',"
        f" --latency-ms, '{latency_ms}', --model-name, {marker}]\n"
        "    health_path: /health\n    probe_interval_s: 0.5\n    probe_timeout_s: 2\n"
        f"    startup_timeout_s: 60\n{extra_server}"
        f"collector:\n  command: [{sys.executable}, -m, gymslurm, collect]\n"
        "  overrides: [+route_failures_to_sidecar=true, +concurrency=8, +progress=none]\n"
        f"slurm:\n  python: {sys.executable}\naggregation:\n  enabled: false\n"
    )
    return path


def _server_pids(marker: str) -> list[int]:
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "demo-server" in cmdline and marker in cmdline:
            pids.append(proc.info["pid"])
    return pids


def _results(run: Path) -> int:
    path = run / "output/shard-000/rollouts.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _coverage(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "output/shard-000/rollouts_coverage.json").read_text())
    return data


def _failures(run: Path) -> list[dict[str, Any]]:
    path = run / "output/shard-000/rollouts_failures.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_sigkill_of_the_environment_server_mid_run_spends_no_failure_budget(tmp_path: Path) -> None:
    """kill -9 of the job's Environment Server with requests in flight: restarted in place, 0 counted
    failures, every in-flight attempt recorded as an interruption with the evidence, coverage complete."""
    marker = f"supervised-{uuid.uuid4().hex[:8]}"
    bench = _benchmark(tmp_path, marker)
    gymslurm("submit", str(bench), "--backend", "local")
    run = only_run(tmp_path)
    (pid,) = wait_until(lambda: _server_pids(marker), 60, "the demo server to start", every_s=0.1)
    wait_until(lambda: _results(run) >= 8, 60, "some outcomes before the kill", every_s=0.1)
    os.kill(pid, signal.SIGKILL)
    report = wait_until_final(run, timeout_s=180, aggregation=False)
    coverage = _coverage(run)
    assert (report["shards"][0]["verdict"], coverage["successful"], coverage["expected"]) == ("DONE", 40, 40)
    assert coverage["counted_failures"] == 0 and coverage["failure_budget_exhausted"] == 0
    interrupted = [row for row in _failures(run) if row["_ng_failure_class"] == "kill_shaped"]
    assert interrupted, "the attempts in flight at the kill are recorded as interruptions"
    evidence = interrupted[0]["_ng_failure_diagnostics"]["interruption"]
    assert (evidence["cause"], evidence["server"]) == ("server_died", "env")
    assert interrupted[0]["_ng_failure_record"]["source"] == "collector"
    assert decisions(run) == ["DONE"], "restarted in place: the same link finished"
    events = [r["event"] for r in ledger(run) if r["kind"] == "server"]
    assert events == ["started", "down", "restarted"]
    assert report["shards"][0]["server_restarts"] == "env:1", "status shows each server's restarts"
    assert not _server_pids(marker), "no server outlives its link"


def test_a_server_dying_past_its_restart_limit_stops_the_link_with_exit_1(tmp_path: Path) -> None:
    """A server that dies again after every restart: past restart_limit the link stops the collector
    and decides RETRY (exit 1), no rollout spends budget, and the next link finishes."""
    marker = f"dying-{uuid.uuid4().hex[:8]}"
    bench = _benchmark(tmp_path, marker, rows=24, latency_ms=100, extra_server="    restart_limit: 1\n")
    gymslurm("submit", str(bench), "--backend", "local")
    run = only_run(tmp_path)
    (first,) = wait_until(lambda: _server_pids(marker), 60, "the demo server to start", every_s=0.1)
    wait_until(lambda: _results(run) >= 2, 60, "some outcomes before the first kill", every_s=0.1)
    os.kill(first, signal.SIGKILL)
    wait_until(
        lambda: any(r.get("event") == "restarted" for r in ledger(run)), 60, "the restart", every_s=0.1
    )
    (second,) = _server_pids(marker)
    os.kill(second, signal.SIGKILL)
    report = wait_until_final(run, timeout_s=180, aggregation=False)
    assert decisions(run)[0] == "RETRY" and decisions(run)[-1] == "DONE"
    first = next(r for r in ledger(run) if r["kind"] == "decision")
    assert "restart_limit=1" in first["reason"] and first["exit_code"] == 1
    assert report["shards"][0]["verdict"] == "DONE"
    assert _coverage(run)["counted_failures"] == 0
    assert [r["event"] for r in ledger(run) if r["kind"] == "server"][:4] == [
        "started",
        "down",
        "restarted",
        "down",
    ]


def test_a_hung_environment_server_is_detected_by_its_probe_and_restarted(tmp_path: Path) -> None:
    """SIGSTOP of the server: its probes time out, the link kills and restarts it in place, the
    requests it held are interruptions (0 counted failures) and the same link finishes."""
    marker = f"hung-{uuid.uuid4().hex[:8]}"
    bench = _benchmark(tmp_path, marker, rows=30, latency_ms=300)
    gymslurm("submit", str(bench), "--backend", "local")
    run = only_run(tmp_path)
    (pid,) = wait_until(lambda: _server_pids(marker), 60, "the demo server to start", every_s=0.1)
    wait_until(lambda: _results(run) >= 8, 60, "some outcomes before the hang", every_s=0.1)
    os.kill(pid, signal.SIGSTOP)
    report = wait_until_final(run, timeout_s=180, aggregation=False)
    coverage = _coverage(run)
    assert (report["shards"][0]["verdict"], coverage["successful"], coverage["counted_failures"]) == (
        "DONE",
        30,
        0,
    )
    down = next(r for r in ledger(run) if r["kind"] == "server" and r["event"] == "down")
    assert "probe(s) in a row failed" in down["cause"]
    assert decisions(run) == ["DONE"]
    assert any(row["_ng_failure_class"] == "kill_shaped" for row in _failures(run))


def _stack_benchmark(
    tmp: Path, marker: str, *, rows: int, model_flags: str = "", policy_extra: str = ""
) -> Path:
    dataset = tmp / "data.jsonl"
    gymslurm("demo-server", "--write-dataset", str(dataset), "--n", str(rows))
    path = tmp / "bench.yaml"
    py = sys.executable
    path.write_text(
        f"dataset: {dataset}\nrun_root: {tmp / 'runs'}\nshards: 1\nservers:\n"
        f"  - name: policy\n    command: [{py}, -m, gymslurm, demo-model-server, --host, '{{host}}', --port,"
        f" '{{port}}', --model-name, {marker}{model_flags}]\n"
        "    probe: chat_completions\n    probe_interval_s: 0.5\n    probe_timeout_s: 2\n"
        f"    collector_override: null\n{policy_extra}"
        f"  - name: env\n    command: [{py}, -m, gymslurm, demo-server, --host, '{{host}}',"
        " --port, '{port}', --policy-url, '{servers.policy.url}',"
        f" --model-name, {marker}]\n"
        "    health_path: /health\n    probe_interval_s: 0.5\n"
        f"collector:\n  command: [{py}, -m, gymslurm, collect]\n"
        "  overrides: [+route_failures_to_sidecar=true, +concurrency=8, +progress=none]\n"
        f"slurm:\n  python: {py}\naggregation:\n  enabled: false\n"
    )
    return path


def _model_pids(marker: str) -> list[int]:
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "demo-model-server" in cmdline and marker in cmdline:
            pids.append(proc.info["pid"])
    return pids


def test_sigkill_of_the_model_server_mid_run_restarts_it_and_spends_no_budget(tmp_path: Path) -> None:
    """kill -9 of the model server the Environment Server calls: the Environment Server's failures
    (provider_unavailable) during the outage are interruptions, the model server is restarted in
    place, 0 counted failures, coverage complete in the same link."""
    marker = f"model-{uuid.uuid4().hex[:8]}"
    bench = _stack_benchmark(tmp_path, marker, rows=40, model_flags=", --latency-ms, '400'")
    gymslurm("submit", str(bench), "--backend", "local")
    run = only_run(tmp_path)
    (pid,) = wait_until(lambda: _model_pids(marker), 60, "the model server to start", every_s=0.1)
    wait_until(lambda: _results(run) >= 8, 60, "some outcomes before the kill", every_s=0.1)
    os.kill(pid, signal.SIGKILL)
    report = wait_until_final(run, timeout_s=180, aggregation=False)
    coverage = _coverage(run)
    assert (report["shards"][0]["verdict"], coverage["successful"], coverage["counted_failures"]) == (
        "DONE",
        40,
        0,
    )
    assert decisions(run) == ["DONE"] and report["shards"][0]["server_restarts"] == "policy:1"
    interrupted = [r for r in _failures(run) if r["_ng_failure_class"] == "kill_shaped"]
    assert interrupted and all(
        r["_ng_failure_diagnostics"]["interruption"]["server"] == "policy" for r in interrupted
    )
    started = [r for r in ledger(run) if r["kind"] == "server" and r["event"] == "started"]
    assert [r["name"] for r in started] == ["policy", "env"] and all(r["startup_s"] > 0 for r in started)


def test_a_model_server_that_never_answers_a_completion_stops_the_link_with_its_log_tail(
    tmp_path: Path,
) -> None:
    """A model server whose /health answers but that never generates (hang at the first completion):
    the chat-completion probe never passes, the link exits 1 and the ledger's reason has its log."""
    marker = f"never-{uuid.uuid4().hex[:8]}"
    extra = "    startup_timeout_s: 4\n"
    bench = _stack_benchmark(tmp_path, marker, rows=4, model_flags=", --hang-after, '0'", policy_extra=extra)
    gymslurm("submit", str(bench), "--backend", "local", "slurm.infra_retry_limit=0")
    run = only_run(tmp_path)
    wait_until_final(run, timeout_s=120, aggregation=False)
    first = next(r for r in ledger(run) if r["kind"] == "decision")
    assert first["exit_code"] == 1 and "server 'policy' was not healthy after 4.0s" in first["reason"]
    assert "injected fault 'hang'" in first["reason"], "the server's log tail is in the reason"
    assert not _model_pids(marker)
