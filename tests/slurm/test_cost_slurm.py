"""GPU-hours on the real Slurm (docs/cost.md): the ledger's figure and what Slurm's accounting recorded.

Cluster ``a`` keeps accounting (slurmdbd, ``gres/gpu`` in AccountingStorageTRES, gpu:4 per node);
cluster ``n`` keeps none. One GPU per link, the scripted stand-in collector.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .helpers import NO_ACCOUNTING_CLUSTER, SlurmCluster, cluster_env, job_nodes, scenario_user
from .launcher_chains import Chain
from .nodes import preempt_on

pytestmark = pytest.mark.slurm

HOLD_S = 45  # how long each interrupted link runs before it is interrupted
LINK_SLACK_S = 2.0  # how far the ledger's and Slurm's seconds of one link may be apart
INTERRUPTED = {"exit": 0, "sleep": 600, "on_signal": 75, "progress": 1}
STEPS = [
    INTERRUPTED,  # requeued by scontrol
    INTERRUPTED,  # requeued by scontrol again
    INTERRUPTED,  # preempted by a high-partition job (PreemptMode=REQUEUE: Slurm requeues it)
    {"exit": 1, "sleep": HOLD_S},  # a retry spent
    {"exit": 1, "sleep": HOLD_S},  # the retry budget ends: EXHAUSTED, then resubmit
    {"exit": 0, "sleep": HOLD_S},  # the resubmitted chain finishes
]


def _running_for(chain: Chain, calls: int, seconds: float) -> str:
    """Wait until the collector ran ``calls`` times, let that link run ``seconds``; its job id."""
    job = chain.wait_for_calls(calls, timeout=300)
    time.sleep(seconds)  # pacing only: every figure compared below is measured, none is assumed
    return job


def test_ledger_and_sacct_gpu_hours_agree_across_requeues_a_preemption_and_a_resubmit(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Two requeues, one preemption, one resubmit: the ledger's GPU-hours and sacct's TRES agree within
    2 s a link."""
    chain = Chain(
        scenario_user(slurm_session_dir, "cost-sacct"),
        slurm_python,
        STEPS,
        overrides=["slurm.partition=low", "slurm.gpus=1", "aggregation.enabled=false"],
        slurm_yaml="  infra_retry_limit: 1\n",
    )
    chain.submit()
    try:
        job = _running_for(chain, 1, HOLD_S)
        chain.user.run(["scontrol", "requeue", job])
        _running_for(chain, 2, HOLD_S)
        chain.user.run(["scontrol", "requeue", job])
        _running_for(chain, 3, HOLD_S)
        (node,) = job_nodes(job)  # the preemptor wants the link's own node, all of its GPUs
        preempt_on(chain.user, node, "--gres=gpu:4")
        report = chain.wait(timeout=600, aggregation=False)
        assert report["shards"][0]["verdict"] == "EXHAUSTED", report["shards"][0]
        chain.gymslurm("resubmit", str(chain.run), str(chain.user.workdir / "bench.yaml"))
        chain.wait_for_decisions(more_than=5, timeout=300)
        report = chain.wait(timeout=300, aggregation=False)
        decisions = [(d["job_id"] == job, d["restart_count"], d["decision"]) for d in chain.decisions()]
        assert decisions[:3] == [(True, 0, "CONTINUE"), (True, 1, "CONTINUE"), (True, 2, "CONTINUE")]
        assert [d[2] for d in decisions[3:]] == ["RETRY", "STOP_EXHAUSTED", "DONE"], decisions
        summary = report["summary"]
        ledger, slurm = summary["gpu_hours"], summary["gpu_hours_slurm"]
        assert slurm is not None and ledger > 6 * 0.8 * HOLD_S / 3600, summary
        # ElapsedRaw's whole seconds and the moments one side sees and the other not: 2 s a link
        # (docs/cost.md; 2 % of this chain was 1.0 s a link, and CI's load once took 1.02 s)
        assert abs(ledger - slurm) * 3600 <= LINK_SLACK_S * len(decisions), (ledger, slurm, decisions)
        assert report["shards"][0]["gpu_hours_slurm"] == slurm
        text = chain.gymslurm("status", str(chain.run))
        assert "Slurm recorded" in text, text
        assert chain.run is not None and "Slurm recorded" in (chain.run / "report.html").read_text()
    finally:
        chain.cancel()


def test_without_accounting_the_status_says_so_and_runs_no_sacct(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Cluster n (no slurmdbd): the ledger's GPU-hours, no Slurm figure (null, not 0); the line says why."""
    env = cluster_env(NO_ACCOUNTING_CLUSTER)
    chain = Chain(
        scenario_user(slurm_session_dir, "cost-no-accounting"),
        slurm_python,
        [{"exit": 0, "sleep": 5}],
        overrides=["slurm.gpus=1", "aggregation.enabled=false"],
        env=env,
    )
    chain.submit()
    try:
        report = chain.wait(timeout=240, aggregation=False)
        summary = report["summary"]
        assert summary["gpu_hours"] > 0 and summary["gpu_hours_slurm"] is None, summary
        assert summary["slurm_accounting"] is False and report["queries"] == 1
        assert "no Slurm figure: this cluster keeps no accounting" in chain.gymslurm("status", str(chain.run))
    finally:
        chain.cancel()


def test_a_run_past_its_gpu_budget_stops_with_budget(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """budget.gpu_hours 0.006 (21.6 GPU-seconds), links of ~12 s on one GPU: the chain stops BUDGET, no
    link starts past it, and Slurm's record of what was spent agrees with the ledger's (10 %: short)."""
    steps = [{"exit": 75, "progress": 1, "sleep": 12}] * 6 + [{"exit": 0}]
    overrides = ["slurm.gpus=1", "aggregation.enabled=false", "budget.gpu_hours=0.006"]
    chain = Chain(scenario_user(slurm_session_dir, "cost-budget"), slurm_python, steps, overrides=overrides)
    chain.submit()
    try:
        report = chain.wait(timeout=300, aggregation=False)
        row = report["shards"][0]
        assert row["verdict"] == "BUDGET", row
        decisions = [d["decision"] for d in chain.decisions()]
        assert decisions[-1] == "STOP_BUDGET" and decisions.count("STOP_BUDGET") == 1, decisions
        assert len(decisions) < len(steps)
        summary = report["summary"]
        assert summary["gpu_hours"] >= 0.006 and summary["budget_warning"] is True
        assert summary["gpu_hours_slurm"] is not None
        assert abs(summary["gpu_hours"] - summary["gpu_hours_slurm"]) <= 0.1 * summary["gpu_hours_slurm"]
    finally:
        chain.cancel()
