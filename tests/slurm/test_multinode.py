"""Chains on the multi-node sandbox: what only several nodes can show (issue 18).

Why: on one node every link of a chain runs where the one before ran, so nothing proves that a
link resumes from files its predecessor wrote on *another* node (the shared run directory is all
they share), or that the ledger names the host each link ran on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import (
    SECOND_CLUSTER,
    TEST_USER,
    SlurmCluster,
    SlurmUser,
    cluster_env,
    ensure_test_user,
    job_nodes,
    make_user_dir,
    run,
)
from .launcher_chains import Chain
from .test_node_down import resume_node

pytestmark = pytest.mark.slurm


def test_a_successor_on_another_node_resumes_the_chain_to_done(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """The first link's node is drained while it runs: the successor runs elsewhere, the chain ends DONE."""
    assert len(slurm_cluster.nodes) >= 2, slurm_cluster.nodes
    ensure_test_user(TEST_USER)
    workdir = make_user_dir(slurm_session_dir, "successor-node", owner=TEST_USER)
    user = SlurmUser(TEST_USER, workdir, as_root=True)
    steps = [{"exit": 75, "sleep": 15, "on_signal": 75, "progress": 1}, {"exit": 0}]
    chain = Chain(user, slurm_python, steps, overrides=["aggregation.enabled=false"]).submit()
    node = ""
    try:
        first = chain.wait_for_calls(1)
        (node,) = job_nodes(first)
        run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=gymslurm-test-successor"])
        report = chain.wait(timeout=240, aggregation=False)
        starts = [r for r in chain.ledger() if r["kind"] == "start"]
        assert [r["host"] for r in starts[:1]] == [node] and starts[1]["host"] != node, starts
        assert [d["decision"] for d in chain.decisions()] == ["CONTINUE", "DONE"]
        assert report["shards"][0]["verdict"] == "DONE"
    finally:
        if node:
            resume_node(node)
        chain.cancel()


def test_a_run_on_cluster_b_chains_aggregates_and_reports_there(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """slurm.cluster=b: every link and the aggregation run on b's nodes, and status follows them there."""
    ensure_test_user(TEST_USER)
    workdir = make_user_dir(slurm_session_dir, "on-cluster-b", owner=TEST_USER)
    user = SlurmUser(TEST_USER, workdir, as_root=True)
    steps = [{"exit": 75, "progress": 1}, {"exit": 0}]
    chain = Chain(user, slurm_python, steps, overrides=[f"slurm.cluster={SECOND_CLUSTER}"]).submit()
    try:
        report = chain.wait(timeout=240)
        assert report["shards"][0]["verdict"] == "DONE" and report["aggregation"]["state"].startswith("DONE")
        b_nodes = set(user.run(["sinfo", "-h", "-N", "-o", "%N"], env=cluster_env(SECOND_CLUSTER)).split())
        hosts = [r["host"] for s in (0, None) for r in chain.ledger(s) if r["kind"] == "start"]
        assert len(hosts) == 3 and set(hosts) <= b_nodes, (hosts, b_nodes)
        jobs = [str(r["job_id"]) for s in (0, None) for r in chain.ledger(s) if r["kind"] == "start"]
        sacct = ["sacct", "-M", SECOND_CLUSTER, "-n", "-P", "-X", "-j", ",".join(jobs), "-o", "JobID"]
        done = user.run(sacct)
        assert sorted(done.split()) == sorted(jobs)
    finally:
        chain.cancel()
