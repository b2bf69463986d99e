"""The local queue's supervisor is restarted by whoever finds work pending and no supervisor holding
its lock (issue 32): a link, ``status`` and ``submit --wait`` all do.

Real links on the local backend (the rendered scripts, ``chain-step`` processes, the stand-in
collector). The supervisor is SIGKILLed while the first links run and their successors wait in the
queue; nobody types a command, and ``submit --wait`` must still end with the run done.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gymslurm.site.local import LocalBackend
from tests.e2e.launcher_chains_helpers import ROOT, status, write_benchmark
from tests.support import wait_until

pytestmark = pytest.mark.e2e

SHARDS = 2
OVERRIDES = [f"shards={SHARDS}", "aggregation.command=[/bin/true]"]


def _supervisors(local: Path) -> list[psutil.Process]:
    """The supervisor processes of this queue (``python -m gymslurm.site.local LOCAL``)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "gymslurm.site.local" in cmdline and str(local) in cmdline and _alive(proc):
            found.append(proc)
    return found


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a killed process nobody reaped yet is gone for our purpose)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _jobs(local: Path) -> list[dict[str, object]]:
    jobs = []
    for path in (local / "jobs").glob("local-*.json"):
        try:
            jobs.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return jobs


def _acted(run: Path, shard: int) -> bool:
    """The shard's first link queued its lookahead (a ``submitted`` record by a job, not by submit)."""
    try:
        records = [json.loads(line) for line in (run / "shards" / f"{shard:03d}" / "ledger.jsonl").open()]
    except (OSError, ValueError):
        return False
    return any(r["kind"] == "submitted" and str(r.get("by", "")).startswith("local-") for r in records)


def test_wait_ends_done_after_the_supervisor_is_killed_under_running_links(tmp_path: Path) -> None:
    """The supervisor SIGKILLed while both first links run (their successors pending): the links, the
    next status and --wait start a new one; --wait ends 0 with every shard DONE, no command typed."""
    steps = [{"exit": 75, "progress": 1, "sleep": 4}, {"exit": 0, "progress": 1, "sleep": 1}]
    bench = write_benchmark(tmp_path, steps, rows=SHARDS)
    wait = subprocess.Popen(
        [sys.executable, "-m", "gymslurm", "submit", str(bench), "--backend", "local", "--wait", *OVERRIDES],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: list((tmp_path / "runs").glob("*/local/jobs")), 120, "the run's local queue")
        local = next((tmp_path / "runs").glob("*/local"))
        acted = lambda: all(_acted(local.parent, s) for s in range(SHARDS))  # noqa: E731
        wait_until(acted, 120, "both first links past their first act")
        for supervisor in _supervisors(local):  # the one holding the lock (and a racing one exiting)
            os.kill(supervisor.pid, signal.SIGKILL)
        wait_until(lambda: not _supervisors(local), 120, "the supervisor gone")
        assert any(job["state"] == "PENDING" for job in _jobs(local)), "the successors wait for a supervisor"
        out, _ = wait.communicate(timeout=240)
    finally:
        if wait.poll() is None:
            wait.kill()
            wait.communicate()
    assert wait.returncode == 0, out[-3000:]
    assert out.strip().splitlines()[-1].startswith(f"run {local.parent.name}: done:"), out[-3000:]
    assert [row["verdict"] for row in status(local.parent)["shards"]] == ["DONE"] * SHARDS


def test_a_queue_query_starts_a_supervisor_when_work_is_pending_and_none_holds_the_lock(
    tmp_path: Path,
) -> None:
    """The supervisor killed while job 1 runs and job 2 waits on it: once job 1's shell is gone, one
    ``queue()`` (what status and --wait ask) starts a supervisor, which runs job 2 to its end."""
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=j\n#SBATCH --output=out-%j.txt\nsleep 2\n")
    local = tmp_path / "local"
    backend = LocalBackend(local)
    first = backend.submit(script)
    second = backend.submit(script, after=[first])
    wait_until(lambda: backend.jobs()[0]["state"] == "RUNNING", 120, "job 1 running")
    for supervisor in _supervisors(local):
        supervisor.kill()
    wait_until(lambda: not _supervisors(local), 120, "the supervisor gone")
    shell = psutil.Process(int(str(backend.jobs()[0]["pid"])))
    wait_until(lambda: not _alive(shell), 120, "job 1's shell to end")
    time.sleep(1.5)  # longer than a supervisor's idle exit: nobody but the query starts one
    assert not _supervisors(local)
    assert backend.queue()[second].state == "PENDING"
    wait_until(lambda: backend.jobs()[1]["state"] == "COMPLETED", 60, "job 2 to run to its end")
    assert backend.jobs()[0]["state"] == "NODE_FAIL"  # its supervisor died: its exit code is lost
