"""The kill harness on real Slurm: 10 chains, one job of each SIGKILLed at a random instant.

Each chain (the scripted stand-in: three links, then the aggregation) has one of its jobs — its
first link, its second, its third, or the aggregation — killed as soon as ``squeue`` shows it
RUNNING plus a random delay (a third within 100 ms): ``scancel --signal=KILL --batch`` (the batch
shell only) or ``--full`` (every process of the job). Every chain must then end DONE with its
aggregation DONE, with no human command: the lookahead (docs/launcher.md, "The invariant").
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import TEST_USER, SlurmCluster, SlurmUser, ensure_test_user, make_user_dir
from .launcher_chains import Chain

pytestmark = pytest.mark.slurm
TRIALS = 10
STEPS = [{"exit": 75, "sleep": 4, "progress": 1}, {"exit": 75, "sleep": 4, "progress": 1}, {"exit": 0}]


def _running() -> set[str]:
    argv = ["squeue", "-h", "-r", "-t", "R", "-o", "%i"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
    return set(out.split())


def _jobs_of(chain: Chain) -> tuple[list[str], list[str]]:
    links = [r["job_id"] for r in chain.ledger() if r["kind"] in ("submitted", "start")]
    agg = [r["job_id"] for r in chain.ledger(None) if r["kind"] in ("submitted", "start")]
    return list(dict.fromkeys(links)), list(dict.fromkeys(agg))


Plan = tuple[str, int, str, float]  # target, which of its jobs, scancel --batch or --full, delay


def _killer(chains: list[Chain], plans: list[Plan], log: list[str], stop: list[bool]) -> None:
    seen: list[list[str]] = [[] for _ in chains]
    left = set(range(len(chains)))
    while left and not stop:
        running = _running()
        for i in sorted(left):
            target, nth, how, delay = plans[i]
            links, agg = _jobs_of(chains[i])
            pool = agg if target == "aggregation" else links
            for job in pool:
                if job in running and job not in seen[i]:
                    seen[i].append(job)
            if len(seen[i]) >= nth:
                job = seen[i][nth - 1]
                time.sleep(delay)
                argv = ["scancel", "--signal=KILL", f"--{how}", job]
                subprocess.run(argv, capture_output=True, check=False)
                log.append(f"chain {i}: {target} #{nth} job {job} SIGKILL --{how} +{delay:.3f}s after seen")
                left.discard(i)
        time.sleep(0.05)


@pytest.fixture(scope="module")
def chains(slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path) -> Iterator[list[Chain]]:
    """TRIALS chains submitted up front."""
    ensure_test_user(TEST_USER)
    made = []
    for i in range(TRIALS):
        folder = make_user_dir(slurm_session_dir, f"kill-{i}", owner=TEST_USER)
        user = SlurmUser(TEST_USER, folder, as_root=True)
        made.append(Chain(user, slurm_python, STEPS, slurm_yaml="  infra_retry_limit: 10\n").submit())
    yield made
    for chain in made:
        chain.cancel()


def test_ten_chains_each_with_a_job_killed_at_random_finish_by_themselves(chains: list[Chain]) -> None:
    """Every chain ends DONE and aggregated, whichever of its jobs was killed and when."""
    rng = random.Random(19)
    plans = []
    for i in range(TRIALS):
        target = "aggregation" if i % 4 == 3 else "link"
        nth = 1 if target == "aggregation" else 1 + i % 3
        delay = rng.uniform(0, 0.1) if i % 3 == 0 else rng.uniform(0.1, 3.0)
        plans.append((target, nth, rng.choice(["batch", "full"]), delay))
    log: list[str] = []
    stop: list[bool] = []
    thread = threading.Thread(target=_killer, args=(chains, plans, log, stop), daemon=True)
    thread.start()
    try:
        reports = [chain.wait(timeout=600) for chain in chains]
    finally:
        stop.append(True)
        thread.join(timeout=10)
    verdicts = [(r["shards"][0]["verdict"], r["aggregation"]["state"][:4]) for r in reports]
    assert len(log) >= TRIALS, log
    assert verdicts == [("DONE", "DONE")] * TRIALS, (verdicts, log)
