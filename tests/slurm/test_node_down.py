"""A chain survives its node being set DOWN on the real one-node Slurm.

Why: a node failure kills a link without the time-limit warning; the chain must still go on
(Slurm requeues the ``--requeue`` job, or its successor runs) and end DONE with no doubled link,
and the real collector, stopped mid-collection, must resume without counting a rollout twice.
Here the node returns to service within milliseconds (``ReturnToService=2``: slurmd's next
answer brings it back), so what is exercised is Slurm killing and requeueing the link
(``NODE FAILURE``), not a long outage.

Setting the only node DOWN kills every job on the cluster, so the test first waits until no job
but its own chain's is queued or running (other tests, other pytest sessions), and always resumes
the node in a ``finally`` block and waits until it is up again. This module sorts after the
launcher modules, so in a whole-directory run the wait is short.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import (
    TEST_USER,
    SlurmCluster,
    SlurmUser,
    cluster_problem,
    ensure_test_user,
    make_user_dir,
    parse_scontrol_job,
    run,
)
from .launcher_real import RealChain

pytestmark = pytest.mark.slurm

ACTIVE_STATES = "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,REQUEUED,RESIZING"
QUIET_TIMEOUT_S = 600
TASKS = 10
SCENARIO: dict[str, Any] = dict(
    tasks=TASKS,
    shards=1,
    server_flags=["--latency-ms", "1000"],
    collector=["+concurrency=1"],
    slurm="  time: '00:05:00'\n",
)


def active_jobs() -> set[str]:
    """Ids of every job on the cluster (any user) in one of squeue's active states."""
    return set(run(["squeue", "-h", "-t", ACTIVE_STATES, "-o", "%i"]).split())


def wait_until_alone(own: set[str], timeout: float = QUIET_TIMEOUT_S) -> None:
    """Wait until no active job but ``own`` exists; fail naming the others after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while others := active_jobs() - own:
        if time.monotonic() > deadline:
            pytest.fail(
                f"jobs {sorted(others)} of other tests or sessions are still active after {timeout}s; "
                "setting the node DOWN would kill them: run this test when the cluster is quiet"
            )
        time.sleep(2.0)


def resume_node(node: str) -> None:
    """``scontrol update state=resume``, then wait until the node is up again.

    With ``ReturnToService=2`` slurmd's next answer returns a DOWN node to service by itself
    (within milliseconds here), and Slurm then refuses the resume (``IDLE to RESUME``): that
    refusal is fine, a node still down after 60 s is not.
    """
    resume = ["scontrol", "update", f"nodename={node}", "state=resume"]
    subprocess.run(resume, capture_output=True, check=False)
    deadline = time.monotonic() + 60
    while (problem := cluster_problem()) is not None:
        assert time.monotonic() < deadline, f"node {node} not back 60 s after state=resume: {problem}"
        time.sleep(1.0)


@pytest.fixture
def quiet_cluster(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster once no other job is active; its node is resumed and up again afterwards."""
    wait_until_alone(set())
    try:
        yield slurm_cluster
    finally:
        resume_node(slurm_cluster.node)


def _job_state(job: str) -> str:
    return parse_scontrol_job(int(job), run(["scontrol", "show", "job", "-o", job])).state


def _mid_collection(chain: RealChain, outcomes: int, timeout: float = 120) -> str:
    """Wait until shard 0's collector saved ``outcomes`` results; the running link's job id."""
    deadline = time.monotonic() + timeout
    path = chain.output(0)
    while not path.exists() or len(path.read_text().splitlines()) < outcomes:
        assert time.monotonic() < deadline, f"{path}: fewer than {outcomes} results after {timeout}s"
        time.sleep(0.5)
    starts = [r for r in chain.ledger() if r["kind"] == "start"]
    return str(starts[-1]["job_id"])


def test_node_set_down_mid_collection_the_chain_ends_done_with_each_rollout_once(
    quiet_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Node DOWN mid-collection, then resumed: the link reruns or its successor runs, DONE, no doubles."""
    ensure_test_user(TEST_USER)
    user = SlurmUser(TEST_USER, make_user_dir(slurm_session_dir, "node-down", owner=TEST_USER), as_root=True)
    chain = RealChain(user, slurm_python, SCENARIO).submit()
    node = quiet_cluster.node
    try:
        job = _mid_collection(chain, outcomes=3)
        wait_until_alone({str(r["job_id"]) for r in chain.ledger() if "job_id" in r})
        run(["scontrol", "update", f"nodename={node}", "state=down", "reason=gymslurm-test"])
        deadline = time.monotonic() + 60
        while _job_state(job) == "RUNNING":
            assert time.monotonic() < deadline, f"job {job} still RUNNING 60 s after node {node} went DOWN"
            time.sleep(1.0)
        resume_node(node)
        report = chain.finished(timeout=240)
        decisions = chain.decisions()
        assert decisions[0]["job_id"] == job and decisions[0]["decision"] == "CONTINUE", decisions
        assert [d["decision"] for d in decisions[1:]] == ["DONE"], decisions
        assert report["shards"][0]["verdict"] == "DONE" and report["aggregation"]["state"].startswith("DONE")
        assert len([r for r in chain.ledger() if r["kind"] == "submitted" and r["after"] == job]) == 1
        assert chain.rollout_ids(0) == Counter({f"arith-{i}": 1 for i in range(TASKS)})
        assert chain.rollout_ids(None) == chain.rollout_ids(0)
        # Known: Slurm TERMs the demo server with the collector, so the request in flight may end as a
        # counted transport_peer_drop (one attempt of that rollout's budget) rather than missing.
    finally:
        chain.cancel()
