"""``status`` counts a link that outlived its job as live (issue 32): its heartbeat is fresh and it
holds the shard's link lock, so status never says STALLED (and advises ``resubmit``) while that link
is about to write its decision.

Real links on the local backend. The queue's supervisor is killed, then the first link's batch shell
(the job): the queue shows the job ended (NODE_FAIL), and the successors queued behind it start,
find the link lock held and exit at once. The chain step itself lives on, beats, and writes DONE.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.launcher_chains_helpers import gymslurm, only_run, status, write_benchmark
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def _supervisors(local: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "gymslurm.site.local" in cmdline and str(local) in cmdline:
            found.append(proc)
    return found


def _first_job(local: Path) -> dict[str, object]:
    job: dict[str, object] = json.loads((local / "jobs" / "local-1.json").read_text())
    return job


def test_a_link_that_outlived_its_job_is_live_until_it_writes_done(tmp_path: Path) -> None:
    """The first link's job ended under it (its batch shell killed, its successors gone): while the
    link still beats and holds its lock, status says HEALTHY and names it, never STALLED; then DONE."""
    bench = write_benchmark(tmp_path, [{"exit": 0, "progress": 1, "sleep": 35}], rows=1)
    gymslurm("submit", str(bench), "--backend", "local", "shards=1", "aggregation.enabled=false")
    run = only_run(tmp_path)
    local = run / "local"
    wait_until(
        (run / "shards" / "000" / "heartbeat.json").exists, 120, "the first link's heartbeat", every_s=0.1
    )
    for supervisor in _supervisors(local):
        supervisor.kill()
    shell = int(str(_first_job(local)["pid"]))
    (step,) = psutil.Process(shell).children()
    os.kill(shell, signal.SIGKILL)  # the job ends; its chain step (the link) does not
    seen: list[tuple[str, str]] = []
    while step.is_running() and step.status() != psutil.STATUS_ZOMBIE:
        row = status(run)["shards"][0]
        seen.append((row["verdict"], row["why"]))
        if row["verdict"] == "DONE":
            break
        time.sleep(0.3)
    final = status(run)["shards"][0]
    assert final["verdict"] == "DONE", final
    assert not [s for s in seen if s[0] == "STALLED"], seen
    outlived = [why for verdict, why in seen if verdict == "HEALTHY" and "outlived" in why]
    assert outlived, "\n".join(map(str, seen))
