"""A node that fails twice under one chain is kept off the chain's later links (issue 32), on the real
multi-node sandbox.

The chain's jobs may run on one node only, X (``extra_directives: --exclude=`` every other node), so
each of its links lands there. X is set DOWN under the first link, resumed, and again under the same
job requeued there (Slurm requeues a ``--requeue`` job whose node fails): two node failures on X. The
job's next run finds out (Slurm's word, ``sacct -D``, or the runs it accounts for), calls X bad and
keeps the links queued behind it off X (``scontrol update ExcNodeList=X``, which replaces the
script's list): the chain's next job runs on another node, which the script alone forbade. Status
and the report name X.

The node is drained first and set DOWN only once no job but the chain's runs on it (other tests and
sessions share the sandbox); it is always resumed, in a ``finally`` block.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .helpers import SlurmCluster, SlurmUser, run
from .launcher_chains import Chain
from .nodes import down_under, resume_node, wait_until_alone_on

pytestmark = pytest.mark.slurm

SLEEP = {"exit": 75, "sleep": 600, "on_signal": 75, "progress": 1}
STEPS = [SLEEP, SLEEP, {"exit": 75, "progress": 1}, {"exit": 0, "progress": 1}]


def _fail_node_under(chain: Chain, calls: int, node: str) -> str:
    """Once the chain's collector ran ``calls`` times (its link on ``node``, asleep): drain the node,
    wait until the link is alone there, set it DOWN, wait until the link's job left RUNNING, resume."""
    job = chain.wait_for_calls(calls, timeout=420)
    run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=gymslurm-test-drain"])
    try:
        wait_until_alone_on(node, {job})
        down_under(node, job)
    finally:
        resume_node(node)
    return job


def test_a_node_failing_twice_under_one_chain_is_excluded_from_its_later_links(
    slurm_cluster: SlurmCluster, slurm_user: SlurmUser, slurm_python: Path
) -> None:
    """X fails twice under the chain's first job (requeued there): the next job of the chain runs off
    X, status names X excluded with 2 node failures, and the chain ends DONE."""
    assert len(slurm_cluster.nodes) >= 2, f"needs 2 nodes, the sandbox has {slurm_cluster.nodes}"
    node, others = slurm_cluster.nodes[-1], slurm_cluster.nodes[:-1]
    chain = Chain(
        slurm_user,
        slurm_python,
        STEPS,
        overrides=["aggregation.enabled=false"],
        slurm_yaml=f"  time: '00:20:00'\n  extra_directives: ['--exclude={','.join(others)}']\n",
    )
    chain.submit()
    try:
        first = _fail_node_under(chain, 1, node)
        again = _fail_node_under(chain, 2, node)
        assert again == first  # the same job, requeued on the one node it may use
        report = chain.wait(timeout=600, aggregation=False)
        starts = [r for r in chain.ledger() if r["kind"] == "start"]
        on_node = [(s["job_id"], s["restart_count"]) for s in starts if s["host"] == node]
        assert (first, 0) in on_node and (first, 1) in on_node, starts
        later = [s for s in starts if s["job_id"] != first]
        assert later and all(s["host"] != node for s in later), starts  # the script alone forbids that
        row = report["shards"][0]
        assert row["verdict"] == "DONE", row
        assert row["excluded_nodes"] == {node: 2}, row
        assert row["faults"]["node_failure"] == 2 and row["faults"]["requeued"] == 0, row["faults"]
        assert f"nodes {node} (2 node failures) kept off" in row["why"], row["why"]
    finally:
        subprocess.run(
            ["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True, check=False
        )
        chain.cancel()
