"""200 shards on the real one-node Slurm: the first links as one throttled job array.

Why: one ``sbatch`` per shard took 32 s for 1,000 shards and put 2N jobs in the queue (sites cap a
user at a few hundred). Here 200 shards are submitted with ``slurm.max_running=3``; the test checks
what a user and a site admin would: one ``sbatch`` (the submit prints one array), at most three
first links running at once, each shard's chain going on through its own successor (the
stand-in collector exits 75 then 0, so every shard has two links), ``status`` answering for 200
shards with one scheduler query, and ``cancel`` ending all of it. To keep the shared machine
free, the test lets a handful of shards finish and then cancels the rest (~1 minute).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until

from .helpers import TEST_USER, SlurmCluster, SlurmUser, ensure_test_user, make_user_dir
from .launcher_chains import Chain

pytestmark = pytest.mark.slurm

SHARDS, THROTTLE = 200, 3


@pytest.fixture(scope="module")
def chain(slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path) -> Iterator[Chain]:
    """200 shards submitted as one array throttled to 3 running links."""
    ensure_test_user(TEST_USER)
    user = SlurmUser(TEST_USER, make_user_dir(slurm_session_dir, "array-200", owner=TEST_USER), as_root=True)
    submitted = Chain(
        user,
        slurm_python,
        steps=[{"exit": 75, "progress": 1}, {"exit": 0}],
        overrides=[f"shards={SHARDS}", f"slurm.max_running={THROTTLE}"],
        rows=SHARDS,
    ).submit()
    yield submitted
    submitted.cancel()


def _queue(run_name: str) -> list[tuple[str, str]]:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-u", TEST_USER, "-o", "%i|%j|%T"], capture_output=True, text=True, check=True
    ).stdout
    return [
        (job, state)
        for job, name, state in (line.split("|") for line in out.splitlines())
        if run_name in name
    ]


def test_two_hundred_shards_go_as_one_throttled_array_and_chains_go_on(chain: Chain) -> None:
    """One array for 200 first links, ≤ 3 running, chains continue per shard, status in one query."""
    assert chain.run is not None
    array = json.loads((chain.run / "array.json").read_text())
    assert (array["shards"], array["max_running"]) == (SHARDS, THROTTLE)
    assert not (chain.run / "scripts" / "shard-000.sbatch").exists()
    first_links = {f"{array['job_id']}_{shard}" for shard in range(SHARDS)}
    done: list[dict[str, Any]] = []
    deadline = time.monotonic() + 240
    while len(done) < 4:
        running_first = [
            job for job, state in _queue(chain.run.name) if job in first_links and state == "RUNNING"
        ]
        assert len(running_first) <= THROTTLE, running_first
        report = chain.status()
        # one squeue, plus at most one sacct (where accounting exists) for jobs the queue forgot
        assert len(report["shards"]) == SHARDS and report["queries"] <= 2, report["queries"]
        done = [row for row in report["shards"] if row["verdict"] == "DONE"]
        assert time.monotonic() < deadline, json.dumps(report["summary"])
        time.sleep(2)
    for row in done:
        decisions = chain.decisions(row["shard"])
        assert [d["decision"] for d in decisions] == ["CONTINUE", "DONE"]
        first, second = (d["job_id"] for d in decisions)
        assert first == f"{array['job_id']}_{row['shard']}" and re.fullmatch(rf"\d+_{row['shard']}", second)
        assert row["log"] and Path(row["log"]).name == f"shard-{row['shard']:03d}-{second}.out"
    waiting = [row for row in report["shards"] if row["verdict"] == "WAITING"]
    assert sum(row["job"] in first_links for row in waiting) >= SHARDS // 2  # most still wait in the array
    assert "JobArrayTaskLimit" in " ".join(row["job_state"] for row in waiting)

    chain.gymslurm("cancel", str(chain.run), timeout=300)
    wait_until(
        lambda: not _queue(chain.run.name),
        120,
        lambda: f"the cancelled run's jobs to leave squeue: {_queue(chain.run.name)[:5]}",
        every_s=2,
    )
    final = chain.status()
    verdicts = {row["verdict"] for row in final["shards"]}
    assert verdicts <= {"DONE", "CANCELLED"} and "CANCELLED" in verdicts, verdicts
