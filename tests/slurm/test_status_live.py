"""``gymslurm status`` while a run is live, on the real one-node Slurm with the real collector.

Why: a status that lies while a run is live is what users saw — coverage stuck at ``0/N`` until a
link ended, a frozen link shown HEALTHY for minutes, a cancelled run shown STALLED, and a hung
server burning the allocation until the time limit. Each is checked here as a user would see it,
through ``gymslurm status RUN --json`` run as the submitting user.

Scenarios (submitted together by the module fixture, so their waits overlap, ~2 minutes):

- ``live``: one shard of 900 tasks at 1 s each, one at a time (it runs while ``hung`` is tested and is
  cancelled by its own test). Live coverage must rise during the
  first link; then the chain step is frozen (SIGSTOP: its heartbeat stops while the job stays
  RUNNING) and status must say UNRESPONSIVE within two heartbeat intervals; then ``gymslurm cancel``
  and status must say CANCELLED.
- ``hung`` (run first, while its first link is young): one shard of 800 tasks at 0.2 s,
  ``stall_window_s=10``. Once outcomes are saved the
  demo server the job started is stopped with SIGSTOP (its socket accepts and never answers): the
  collector must exit 1 after the window, the link decide RETRY, and the next link (a fresh
  server) finish the shard DONE.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support import wait_until

from .helpers import SlurmCluster, submitted_up_front
from .launcher_real import RealChain

pytestmark = pytest.mark.slurm

SCENARIOS: dict[str, dict[str, Any]] = {
    "live": dict(
        tasks=900,
        shards=1,
        server_flags=["--latency-ms", "1000"],
        collector=["+concurrency=1", "+live_progress_interval_s=1"],
        slurm="  time: '00:10:00'\n",
    ),
    "hung": dict(
        tasks=800,
        shards=1,
        server_flags=["--latency-ms", "200"],
        collector=["+concurrency=2", "+live_progress_interval_s=1", "+stall_window_s=10"],
        slurm="  time: '00:10:00'\n",
    ),
}


@pytest.fixture(scope="module")
def runs(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> Iterator[dict[str, RealChain]]:
    """Both scenarios submitted up front, so their Slurm waits overlap."""
    yield from submitted_up_front(
        slurm_session_dir,
        "live",
        SCENARIOS,
        lambda user, spec: RealChain(user, slurm_python, spec).submit(),
    )


def _poll(
    run: RealChain, until: Callable[[dict[str, Any]], bool], timeout: float, what: str
) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def check() -> dict[str, Any] | None:
        seen.append(run.status())
        return seen[-1] if until(seen[-1]) else None

    return wait_until(
        check, timeout, lambda: f"{what}; last status: {json.dumps(seen[-1], indent=1)}", every_s=1.0
    )


def _heartbeat(run: RealChain) -> dict[str, Any]:
    assert run.run is not None
    data: dict[str, Any] = json.loads((run.run / "shards/000/heartbeat.json").read_text())
    return data


def _demo_server_of(run: RealChain) -> psutil.Process:
    step = psutil.Process(_heartbeat(run)["pid"])
    servers = [p for p in step.children(recursive=True) if "demo-server" in " ".join(p.cmdline())]
    assert servers, [p.cmdline() for p in step.children(recursive=True)]
    return servers[0]


def test_hung_server_ends_the_link_with_exit_1_and_the_chain_goes_on(runs: dict[str, RealChain]) -> None:
    """SIGSTOP the job's server: the collector exits 1 after stall_window_s, RETRY, a new link finishes."""
    run = runs["hung"]
    _poll(run, lambda r: r["shards"][0]["successful"] >= 5 and r["shards"][0]["live"], 240, "first outcomes")
    _demo_server_of(run).send_signal(signal.SIGSTOP)
    report = run.finished(timeout=420)
    decisions = run.decisions(0)
    assert [(d["decision"], d["exit_code"]) for d in decisions] == [("RETRY", 1), ("DONE", 0)], decisions
    assert report["shards"][0]["verdict"] == "DONE" and report["shards"][0]["retries"] == "1/3"
    coverage = run.companion(0, "_coverage.json")
    assert (coverage["successful"], coverage["counted_failures"]) == (800, 0)
    assert run.rollout_ids(0) == run.rollout_ids(None)
    assert run.run is not None
    log = "".join(p.read_text() for p in (run.run / "logs").glob("shard-000-*.out"))
    assert "stalled: no outcome saved for 10s (stall_window_s)" in log


def test_live_coverage_rises_then_frozen_step_is_unresponsive_then_cancelled(
    runs: dict[str, RealChain],
) -> None:
    """Coverage rises during a link; a frozen step is UNRESPONSIVE within two beats; cancel → CANCELLED."""
    run = runs["live"]
    first = _poll(
        run, lambda r: r["shards"][0]["successful"] >= 2 and r["shards"][0]["live"], 240, "live coverage"
    )
    row = first["shards"][0]
    assert row["verdict"] == "HEALTHY" and row["job_state"] == "RUNNING" and row["jobs"] == 0
    assert row["successor"] not in (None, row["job"]) and row["successor_state"].startswith("PENDING")
    assert row["eta"] != "-" and row["rate_per_s"] > 0 and row["log"] and first["queries"] == 1
    later = _poll(run, lambda r: r["shards"][0]["successful"] >= row["successful"] + 3, 60, "coverage rising")
    assert later["shards"][0]["job"] == row["job"], "the same link is still running"
    assert later["summary"]["successful"] >= row["successful"] + 3 and later["summary"]["eta"] != "-"

    beat = _heartbeat(run)
    step = psutil.Process(beat["pid"])
    step.send_signal(signal.SIGSTOP)
    frozen_at = time.time()
    try:
        seen = _poll(run, lambda r: r["shards"][0]["verdict"] == "UNRESPONSIVE", 60, "UNRESPONSIVE")
        noticed_after = time.time() - frozen_at
    finally:
        step.send_signal(signal.SIGCONT)
    assert noticed_after <= 2 * beat["interval_s"] + 3, noticed_after
    assert f"scancel {row['job']}" in seen["shards"][0]["why"]
    _poll(run, lambda r: r["shards"][0]["verdict"] == "HEALTHY", 30, "HEALTHY again after SIGCONT")

    run.gymslurm("cancel", str(run.run))
    final = _poll(run, lambda r: r["shards"][0]["verdict"] == "CANCELLED", 90, "CANCELLED")
    assert "gymslurm resubmit" in final["shards"][0]["why"]
