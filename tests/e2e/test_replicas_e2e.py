"""A model server run as replicas behind vllm-router, each supervised on its own (docs/servers.md).

Real processes throughout: ``gymslurm submit --backend local`` runs a link that starts three demo
model server replicas, vLLM's router in front of them (the ``vllm-router`` wheel, its Rust binary),
the demo Environment Server calling the router, and the real collector; the tests kill or stop one
replica while requests are in flight.
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
    tmp: Path,
    marker: str,
    *,
    rows: int,
    policy_extra: str = "",
    latency_ms: int = 300,
    router: str = "vllm_router",
    collector_extra: str = "",
) -> Path:
    dataset = tmp / "data.jsonl"
    gymslurm("demo-server", "--write-dataset", str(dataset), "--n", str(rows))
    path = tmp / "bench.yaml"
    py = sys.executable
    path.write_text(
        f"dataset: {dataset}\nrun_root: {tmp / 'runs'}\nshards: 1\nservers:\n"
        f"  - name: policy\n    command: [{py}, -m, gymslurm, demo-model-server, --host, '{{host}}', --port,"
        f" '{{port}}', --model-name, {marker}, --latency-ms, '{latency_ms}']\n"
        "    replicas: 3\n    probe: chat_completions\n    probe_interval_s: 0.5\n    probe_timeout_s: 2\n"
        f"    startup_timeout_s: 60\n    collector_override: null\n{policy_extra}"
        f"    router: {{command: [{py}, -m, {router}.launch_router]}}\n"
        f"  - name: env\n    command: [{py}, -m, gymslurm, demo-server, --host, '{{host}}',"
        " --port, '{port}', --policy-url, '{servers.policy.url}',"
        f" --model-name, {marker}]\n"
        "    health_path: /health\n    probe_interval_s: 0.5\n"
        f"collector:\n  command: [{py}, -m, gymslurm, collect]\n"
        f"  overrides: [+route_failures_to_sidecar=true, +concurrency=8, +progress=none{collector_extra}]\n"
        f"slurm:\n  python: {py}\naggregation:\n  enabled: false\n"
    )
    return path


def _replica_pids(marker: str) -> list[int]:
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "demo-model-server" in cmdline and marker in cmdline:
            pids.append(proc.info["pid"])
    return sorted(pids)


def _results(run: Path) -> int:
    path = run / "output/shard-000/rollouts.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _coverage(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "output/shard-000/rollouts_coverage.json").read_text())
    return data


def _job_log(run: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((run / "logs").glob("*.out")))


def _server_events(run: Path) -> list[tuple[str, str]]:
    return [(r["name"], r["event"]) for r in ledger(run) if r["kind"] == "server"]


@pytest.mark.parametrize("router", ["vllm_router", "sglang_router"])
def test_sigkill_of_one_replica_leaves_the_others_serving_and_spends_no_budget(
    tmp_path: Path, router: str
) -> None:
    """kill -9 of one of three replicas mid-run: it leaves the router's rotation and is restarted in
    place while the other two carry the load (dispatch never pauses), 0 counted failures, one link.
    Both of the ecosystem's routers, unchanged: vLLM's (the default) and SGLang's (``router.command``)."""
    marker = f"replica-{uuid.uuid4().hex[:8]}"
    bench = _benchmark(tmp_path, marker, rows=80, latency_ms=600, router=router)
    gymslurm("submit", str(bench), "--backend", "local")
    run = only_run(tmp_path)
    pids = wait_until(
        lambda: len(_replica_pids(marker)) == 3 and _replica_pids(marker), 90, "three replicas", every_s=0.1
    )
    wait_until(lambda: _results(run) >= 8, 90, "some outcomes before the kill", every_s=0.1)
    os.kill(pids[1], signal.SIGKILL)
    report = wait_until_final(run, timeout_s=240, aggregation=False)
    coverage = _coverage(run)
    assert (report["shards"][0]["verdict"], coverage["successful"], coverage["counted_failures"]) == (
        "DONE",
        80,
        0,
    )
    assert decisions(run) == ["DONE"], "the same link finished"
    events = _server_events(run)
    started = [name for name, event in events if event == "started"]
    assert started == ["policy-r0", "policy-r1", "policy-r2", "policy", "env"], events
    downs = [name for name, event in events if event == "down"]
    assert len(downs) == 1 and downs[0].startswith("policy-r"), events
    assert (downs[0], "restarted") in events
    assert "dispatch paused" not in _job_log(run), "the other replicas carried the load"
    assert not _replica_pids(marker), "no replica outlives its link"


def test_a_hung_replica_leaves_the_rotation_and_is_restarted(tmp_path: Path) -> None:
    """SIGSTOP of one replica: its completion probes time out, it is taken out of rotation, killed and
    restarted in place; the run finishes in the same link with 0 counted failures."""
    marker = f"hungrep-{uuid.uuid4().hex[:8]}"
    bench = _benchmark(tmp_path, marker, rows=200, latency_ms=600)
    gymslurm("submit", str(bench), "--backend", "local")
    run = only_run(tmp_path)
    pids = wait_until(
        lambda: len(_replica_pids(marker)) == 3 and _replica_pids(marker), 90, "three replicas", every_s=0.1
    )
    wait_until(lambda: _results(run) >= 6, 90, "some outcomes before the hang", every_s=0.1)
    os.kill(pids[0], signal.SIGSTOP)
    report = wait_until_final(run, timeout_s=240, aggregation=False)
    coverage = _coverage(run)
    assert (report["shards"][0]["verdict"], coverage["successful"], coverage["counted_failures"]) == (
        "DONE",
        200,
        0,
    )
    down = next(r for r in ledger(run) if r["kind"] == "server" and r["event"] == "down")
    assert down["name"].startswith("policy-r") and "probe(s) in a row failed" in down["cause"], down
    assert (down["name"], "restarted") in _server_events(run)
    assert decisions(run) == ["DONE"]


def test_every_replica_killed_past_its_limit_stops_the_link_with_exit_1(tmp_path: Path) -> None:
    """restart_limit 0 and all three replicas killed: each is retired, and when none is left the link
    stops the collector and exits 1 (RETRY) at once; no rollout spends budget; the next link finishes."""
    marker = f"allrep-{uuid.uuid4().hex[:8]}"
    bench = _benchmark(tmp_path, marker, rows=24, policy_extra="    restart_limit: 0\n")
    gymslurm("submit", str(bench), "--backend", "local")
    run = only_run(tmp_path)
    pids = wait_until(
        lambda: len(_replica_pids(marker)) == 3 and _replica_pids(marker), 90, "three replicas", every_s=0.1
    )
    wait_until(lambda: _results(run) >= 2, 90, "some outcomes before the kills", every_s=0.1)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    report = wait_until_final(run, timeout_s=240, aggregation=False)
    first = next(r for r in ledger(run) if r["kind"] == "decision")
    assert first["exit_code"] == 1
    assert "server 'policy' went down more than restart_limit=0" in first["reason"]
    assert decisions(run)[0] == "RETRY" and report["shards"][0]["verdict"] == "DONE"
    gave_up = sorted(name for name, event in _server_events(run)[:12] if event == "gave_up")
    assert gave_up == ["policy-r0", "policy-r1", "policy-r2"]
    assert _coverage(run)["counted_failures"] == 0


def _run_reading_every_replicas_queue(tmp_path: Path, marker: str, collector_extra: str = "") -> str:
    """Submit 30 rows to three replicas, wait for DONE with every row saved, check the collector's
    line naming each replica's queue (not the router's); the job log."""
    bench = _benchmark(tmp_path, marker, rows=30, latency_ms=100, collector_extra=collector_extra)
    gymslurm("submit", str(bench), "--backend", "local")
    run = only_run(tmp_path)
    report = wait_until_final(run, timeout_s=240, aggregation=False)
    assert report["shards"][0]["verdict"] == "DONE" and _coverage(run)["successful"] == 30
    started = {
        name: r["url"]
        for r in ledger(run)
        if r["kind"] == "server" and r["event"] == "started"
        for name in [r["name"]]
    }
    replicas = [started[f"policy-r{i}"].split("//")[1] for i in range(3)]
    log = _job_log(run)
    line = next(x for x in log.splitlines() if "adaptive load reads" in x)
    assert line.endswith(f"queue at {', '.join(replicas)}"), (line, replicas)
    return log


def test_adaptive_load_reads_every_replicas_queue_by_reference(tmp_path: Path) -> None:
    """``+dispatch_model_metrics_url={servers.policy.metrics_url}`` is each replica's /metrics (not the
    router's): the collector polls all three, and the run finishes DONE."""
    extra = ", +dispatch_adaptive=metrics, '+dispatch_model_metrics_url={servers.policy.metrics_url}'"
    _run_reading_every_replicas_queue(tmp_path, f"metrics-{uuid.uuid4().hex[:8]}", extra)


def test_without_a_word_in_the_benchmark_the_load_adapts_to_every_replicas_queue(tmp_path: Path) -> None:
    """No dispatch_adaptive in collector.overrides: the link finds the model server's /metrics answering
    and the collector reads each replica's queue (issue 22: the load adapts by default)."""
    log = _run_reading_every_replicas_queue(tmp_path, f"auto-{uuid.uuid4().hex[:8]}")
    assert "the load adapts to model server 'policy''s queue (its /metrics answers)" in log
