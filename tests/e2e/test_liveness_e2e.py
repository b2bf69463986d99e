"""Liveness from progress, not from a process: real collector, real demo server, local backend.

A frozen collector (``gymslurm inject --kind hang``: SIGSTOP) under a link whose heartbeat keeps
beating, and an Environment Server that stops answering while its process lives, both end the
link within ``slurm.stall_window_s`` (exit 1: the next link goes on and finishes the shard), and
``status`` says UNRESPONSIVE with the evidence meanwhile.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import launch_demo_server
from tests.e2e.launcher_chains_helpers import gymslurm, ledger, only_run, status, wait_until_final
from tests.support import wait_until

pytestmark = pytest.mark.e2e
WINDOW_S = 20


def _benchmark(tmp: Path, server: str, rows: int = 24) -> Path:
    dataset = tmp / "data.jsonl"
    gymslurm("demo-server", "--write-dataset", str(dataset), "--n", str(rows))
    path = tmp / "bench.yaml"
    path.write_text(
        f"dataset: {dataset}\nrun_root: {tmp / 'runs'}\nshards: 1\n{server}"
        f"collector:\n  command: [{sys.executable}, -m, gymslurm, collect]\n"
        "  overrides: [+route_failures_to_sidecar=true, +concurrency=2, +progress=none,"
        " +live_progress_interval_s=1]\n"
        f"slurm:\n  python: {sys.executable}\n  stall_window_s: {WINDOW_S}\naggregation:\n  enabled: false\n"
    )
    return path


def _results(run: Path) -> int:
    path = run / "output/shard-000/rollouts.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _decisions(run: Path) -> list[dict[str, Any]]:
    return [r for r in ledger(run) if r["kind"] == "decision"]


def test_a_frozen_collector_reads_unresponsive_and_its_link_ends_in_the_stall_window(tmp_path: Path) -> None:
    """inject --kind hang: UNRESPONSIVE with the collector's frozen record; the link exits 1 in the window."""
    server = (
        "servers:\n  - name: env\n"
        f"    command: [{sys.executable}, -m, gymslurm, demo-server, --host, '{{host}}', --port, '{{port}}',"
        " --latency-ms, '700']\n    health_path: /health\n"
    )
    gymslurm("submit", str(_benchmark(tmp_path, server)), "--backend", "local")
    run = only_run(tmp_path)
    wait_until(lambda: _results(run) >= 2, 90, "the first results", every_s=0.3)
    gymslurm("inject", str(run), "0", "--kind", "hang")
    hung_at = time.monotonic()
    row = wait_until(
        lambda: next((r for r in [status(run)["shards"][0]] if r["verdict"] == "UNRESPONSIVE"), None),
        WINDOW_S + 10,
        "status to say UNRESPONSIVE",
        every_s=0.3,
    )
    assert "progress record" in row["why"] and "frozen" in row["why"], row["why"]
    first = wait_until(lambda: _decisions(run), WINDOW_S + 40, "the hung link's decision", every_s=0.3)[0]
    assert time.monotonic() - hung_at < WINDOW_S + 30
    assert first["decision"] == "RETRY" and "unresponsive" in first["reason"] and "frozen" in first["reason"]
    report = wait_until_final(run, timeout_s=180, aggregation=False)
    assert report["shards"][0]["verdict"] == "DONE"


def test_a_server_that_stops_answering_while_alive_ends_the_link(tmp_path: Path) -> None:
    """A url server SIGSTOPped mid-run: requests in flight, no outcome for the window: exit 1, then DONE."""
    demo = launch_demo_server(("--latency-ms", "700"), tmp_path / "server.log")
    try:
        bench = _benchmark(tmp_path, f"servers:\n  - name: env\n    url: {demo.url}\n")
        gymslurm("submit", str(bench), "--backend", "local")
        run = only_run(tmp_path)
        wait_until(lambda: _results(run) >= 2, 90, "the first results", every_s=0.3)
        os.kill(demo.process.pid, signal.SIGSTOP)
        try:
            row = wait_until(
                lambda: next((r for r in [status(run)["shards"][0]] if r["verdict"] == "UNRESPONSIVE"), None),
                WINDOW_S + 15,
                "status to say UNRESPONSIVE",
                every_s=0.3,
            )
            assert "stopped answering" in row["why"], row["why"]
            first = wait_until(lambda: _decisions(run), WINDOW_S + 40, "the link's decision", every_s=0.3)[0]
        finally:
            os.kill(demo.process.pid, signal.SIGCONT)
        assert first["decision"] == "RETRY" and "stopped answering" in first["reason"], first
        report = wait_until_final(run, timeout_s=180, aggregation=False)
        assert report["shards"][0]["verdict"] == "DONE"
    finally:
        demo.stop()
