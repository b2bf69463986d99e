"""Nodes of the multi-node sandbox taken from under a link: set DOWN, preempted, resumed; spelled once.

test_node_down.py and test_bad_node_slurm.py take a node DOWN under a running link, test_suite_slurm.py
and test_cost_slurm.py preempt a link from the ``high`` partition; each used to carry its own copy.
Setting a node DOWN kills every job on it, so :func:`wait_until_alone_on` comes first (other tests,
other pytest sessions), and the node is always resumed (:func:`resume_node`) in a ``finally``.
"""

from __future__ import annotations

import subprocess

from tests.support import wait_until

from .helpers import UP_NODE_STATES, SlurmUser, parse_scontrol_job, run

ACTIVE_STATES = "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,REQUEUED,RESIZING"
QUIET_TIMEOUT_S = 600


def jobs_on(node: str) -> set[str]:
    """Ids of the jobs (any user) running or completing on ``node``."""
    return set(run(["squeue", "-h", "-w", node, "-t", ACTIVE_STATES, "-o", "%i"]).split())


def wait_until_alone_on(node: str, own: set[str], timeout: float = QUIET_TIMEOUT_S) -> None:
    """Wait until no job but ``own`` runs on ``node``; fail naming the others after ``timeout`` s."""
    wait_until(
        lambda: not jobs_on(node) - own,
        timeout,
        lambda: (
            f"{node} to be ours alone: jobs {sorted(jobs_on(node) - own)} of other tests or sessions "
            "still run there, and setting the node DOWN would kill them"
        ),
        every_s=2.0,
    )


def node_state(node: str) -> str:
    """``sinfo``'s state of one node (``idle``, ``down*``, ``drained`` ...)."""
    return run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]).split()[0]


def resume_node(node: str) -> None:
    """``scontrol update state=resume``, then wait until the node is up (idle/mixed/...) again.

    Slurm refuses a resume of a node that already came back by itself (``IDLE to RESUME``): that
    refusal is fine, a node still down or drained after 60 s is not.
    """
    resume = ["scontrol", "update", f"nodename={node}", "state=resume"]
    subprocess.run(resume, capture_output=True, check=False)

    def up() -> bool:
        state = node_state(node)
        if state.startswith("drain"):
            subprocess.run(resume, capture_output=True, check=False)
        return state in UP_NODE_STATES

    wait_until(up, 60, lambda: f"node {node} up after state=resume (it is {node_state(node)})", every_s=1.0)


def job_state(job: str) -> str:
    """One job's state (``RUNNING``, ``PENDING`` ...), from ``scontrol show job -o``."""
    return parse_scontrol_job(job, run(["scontrol", "show", "job", "-o", job])).state


def down_under(node: str, job: str) -> None:
    """Set ``node`` DOWN and wait until ``job`` (a link on it) has left RUNNING."""
    run(["scontrol", "update", f"nodename={node}", "state=down", "reason=gymslurm-test"])
    wait_until(
        lambda: job_state(job) != "RUNNING",
        60,
        f"job {job} to stop RUNNING after node {node} went DOWN",
        every_s=1.0,
    )


def preempt_on(user: SlurmUser, node: str, *wants: str) -> None:
    """A 3 s job of the ``high`` partition that ``wants`` (``--gres=gpu:4``, ``-c 8``) of ``node``: Slurm
    preempts a link there for it."""
    user.run(["sbatch", "-p", "high", *wants, "-w", node, "-o", "/dev/null", "--wrap", "sleep 3"])
