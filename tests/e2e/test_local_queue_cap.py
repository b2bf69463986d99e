"""The local backend runs at most ``slurm.max_running`` jobs at once and queues the rest (issue 32).

Real links on the local backend (the rendered scripts, ``chain-step`` processes, the stand-in
collector): 6 shards, each a link of ~1.5 s, with a cap of 2. The job files' start and end times say
how many ran at once; status shows the waiting shards PENDING; every shard finishes exactly once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gymslurm.site.local import default_max_running
from tests.e2e.launcher_chains_helpers import gymslurm, only_run, status, wait_until_final, write_benchmark

pytestmark = pytest.mark.e2e

SHARDS, CAP = 6, 2


def _peak(jobs: list[dict[str, Any]]) -> int:
    """The most jobs whose [start, end] overlap at one instant; a job not ended yet (the aggregation
    job still finishing after the run reads final) holds its slot until now."""
    now_s = time.time()
    starts = [(j["started_at"], 1) for j in jobs]
    ends = [(j["ended_at"] or now_s, -1) for j in jobs]
    edges = sorted(starts + ends)
    peak = running = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def test_at_most_the_cap_of_jobs_run_at_once_and_the_rest_wait_pending(tmp_path: Path) -> None:
    """6 one-link shards, slurm.max_running 2: never more than 2 jobs at once, waiting shards shown
    WAITING with their link pending for room ("Resources"), and every shard DONE."""
    bench = write_benchmark(tmp_path, [{"exit": 0, "progress": 1, "sleep": 1.5}], rows=SHARDS)
    gymslurm(
        "submit",
        str(bench),
        "--backend",
        "local",
        f"shards={SHARDS}",
        f"slurm.max_running={CAP}",
        "aggregation.command=[/bin/true]",
    )
    run = only_run(tmp_path)
    seen_pending = False
    deadline = time.monotonic() + 120
    while not seen_pending and time.monotonic() < deadline:
        seen_pending = any(
            row["verdict"] == "WAITING" and "pending (Resources)" in json.dumps(row)
            for row in status(run)["shards"]
        )
        time.sleep(0.3)
    wait_until_final(run)
    jobs = [json.loads(path.read_text()) for path in (run / "local" / "jobs").glob("local-*.json")]
    ran = [job for job in jobs if job["started_at"]]
    assert _peak(ran) <= CAP, [(j["id"], j["started_at"], j["ended_at"]) for j in ran]
    assert seen_pending
    assert [row["verdict"] for row in status(run)["shards"]] == ["DONE"] * SHARDS


@pytest.mark.parametrize(
    ("cores", "gib", "cap"),
    [(2, 64, 2), (64, 8, 4), (8, 1, 1), (1, 0, 1)],
    ids=["cores", "memory", "small", "floor"],
)
def test_the_default_cap_is_one_job_per_core_and_per_two_gib(cores: int, gib: int, cap: int) -> None:
    """Without slurm.max_running: min(cores, memory / 2 GiB), at least 1."""
    assert default_max_running(cores, gib * 2**30) == cap
