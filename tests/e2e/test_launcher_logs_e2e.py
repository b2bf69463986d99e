"""`gymslurm logs` on a real local run: printing a link's log, and following it until it decided."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import (
    ROOT,
    gymslurm,
    only_run,
    status,
    wait_until_final,
    write_benchmark,
)
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def test_logs_prints_the_links_job_log_and_follow_stops_after_its_decision(tmp_path: Path) -> None:
    """On a local run: `logs --follow` prints the running link's log and ends once it decided."""
    # The link runs 15 s: a status poll (a process start) on a loaded machine can take seconds, and a
    # 3 s link went from WAITING to DONE between two of them, never seen HEALTHY.
    bench = write_benchmark(tmp_path, [{"exit": 0, "sleep": 15}])
    gymslurm("submit", str(bench), "--backend", "local", "shards=1", "aggregation.enabled=false")
    run = only_run(tmp_path)
    wait_until(lambda: status(run)["shards"][0]["verdict"] == "HEALTHY", 120, "a HEALTHY shard", every_s=0.2)
    # --link 1: on a loaded machine (CI) the newest link was already a second one by the time
    # `logs` started (seen once); which link is newest is not what this test is about.
    follow = subprocess.run(
        [sys.executable, "-m", "gymslurm", "logs", str(run), "--link", "1", "--follow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    ledger = (run / "shards" / "000" / "ledger.jsonl").read_text()
    assert follow.returncode == 0, follow.stderr
    assert "shard-000-local-1.out <==" in follow.stdout, ledger
    assert "decision " in follow.stdout and "stopped following" in follow.stdout, ledger
    wait_until_final(run, aggregation=False)
    again = gymslurm("logs", str(run), "--link", "1")
    assert "decision " in again.stdout
    refused = gymslurm("logs", str(run), "--link", "9", check=False)
    assert refused.returncode == 2 and "link(s): --link takes 1.." in refused.stderr
