"""Chains on the multi-node sandbox: what only several nodes can show (issue 18).

Why: on one node every link of a chain runs where the one before ran, so nothing proves that a
link resumes from files its predecessor wrote on *another* node (the shared run directory is all
they share), or that the ledger names the host each link ran on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until

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
from .launcher_real import RealChain

pytestmark = pytest.mark.slurm
TWO_NODE_MODEL = Path(__file__).with_name("two_node_model.py")


def test_a_successor_on_another_node_resumes_the_chain_to_done(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """The first link's node is closed to the chain while it runs: the successor runs elsewhere, DONE.

    The chain's queued links are told to avoid that node (``ExcNodeList``), one job at a time: a
    drained node was shared state, and another test resuming every node let the successor land on
    the drained one (seen in CI).
    """
    assert len(slurm_cluster.nodes) >= 2, slurm_cluster.nodes
    ensure_test_user(TEST_USER)
    workdir = make_user_dir(slurm_session_dir, "successor-node", owner=TEST_USER)
    user = SlurmUser(TEST_USER, workdir, as_root=True)
    steps = [{"exit": 75, "sleep": 15, "on_signal": 75, "progress": 1}, {"exit": 0}]
    chain = Chain(user, slurm_python, steps, overrides=["aggregation.enabled=false"]).submit()
    try:
        first = chain.wait_for_calls(1)
        (node,) = job_nodes(first)
        queued = [r["job_id"] for r in chain.ledger() if r["kind"] == "submitted" and r["job_id"] != first]
        assert queued, chain.ledger()
        for job in queued:
            run(["scontrol", "update", f"jobid={job}", f"ExcNodeList={node}"])
        report = chain.wait(timeout=240, aggregation=False)
        starts = [r for r in chain.ledger() if r["kind"] == "start"]
        assert [r["host"] for r in starts[:1]] == [node] and starts[1]["host"] != node, starts
        assert [d["decision"] for d in chain.decisions()] == ["CONTINUE", "DONE"]
        assert report["shards"][0]["verdict"] == "DONE"
    finally:
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


@contextlib.contextmanager
def held_as_user(lock: Path) -> Iterator[None]:
    """Hold a run's lock file as the test user (``flock(1)``; the folder made by that user, as a job
    would make it) for the ``with`` block."""
    script = f'mkdir -p {lock.parent} && exec flock {lock} -c "echo locked; exec sleep 900"'
    holder = subprocess.Popen(
        ["runuser", "-u", TEST_USER, "--", "bash", "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        os.killpg(holder.pid, signal.SIGTERM)
        holder.wait(timeout=30)


def _job_state(job: str) -> str:
    """A qualified job's (``b:12_0``) state on its own cluster, from ``scontrol show job -o``."""
    cluster, _, raw = job.rpartition(":")
    line = run(["scontrol", "show", "job", "-o", raw], env=cluster_env(cluster))
    match = re.search(r"JobState=(\S+)", line)
    return match.group(1) if match else "?"


def _starts(chain: Chain, shard: int | None) -> list[dict[str, Any]]:
    return [r for r in chain.ledger(shard) if r["kind"] == "start"]


def _counted(run_dir: Path, shard: int) -> bool:
    """The run's tally (``tally.jsonl``) counts shard ``shard``'s chain finished."""
    tally = run_dir / "tally.jsonl"
    lines = tally.read_text().splitlines() if tally.exists() else []
    return any((r := json.loads(line))["event"] == "finished" and r.get("shard") == shard for line in lines)


def test_shards_across_two_clusters_aggregate_once_on_the_named_one_after_trigger_and_aggregation_die(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """slurm.clusters=[a, b], aggregate_on b: shard 0 runs on a, shard 1 on b (run.json's placement).
    Shard 1 finishes first and is counted in the run's tally; shard 0's collector is held until then,
    so shard 0's link is the one that completes the tally. It is killed while it waits to count
    itself (the run's aggregate lock held), shard 1's spare links cancelled: the lookahead link of
    shard 0, on a, counts its chain and queues the aggregation on b with no dependency (none exists
    across clusters). That aggregation job is killed while it merges: its lookahead job on b reruns
    it, which ends DONE once; status asks one squeue per cluster."""
    ensure_test_user(TEST_USER)
    workdir = make_user_dir(slurm_session_dir, "across-clusters", owner=TEST_USER)
    user = SlurmUser(TEST_USER, workdir, as_root=True)
    overrides = [
        "shards=2",
        f"slurm.clusters=[a,{SECOND_CLUSTER}]",
        f"slurm.aggregate_on={SECOND_CLUSTER}",
        "aggregation.command=[sleep,'25']",
    ]
    release = workdir / "release-shard-0"  # shard 0's collector waits for it
    steps = [{"exit": 0, "hold": {"output": "/shard-000/", "until": str(release)}}]
    chain = Chain(user, slurm_python, steps, overrides=overrides)
    try:
        chain.submit()
        assert chain.run is not None
        info = json.loads((chain.run / "run.json").read_text())
        assert [(b["cluster"], b["first"], b["count"]) for b in info["placement"]] == [
            ("a", 0, 1),
            (SECOND_CLUSTER, 1, 1),
        ]
        assert info["aggregate_cluster"] == SECOND_CLUSTER
        wait_until(lambda: _counted(chain.run, 1), 240, "shard 1 counted in the run's tally", every_s=1.0)
        trigger_b = str(chain.decisions(1)[-1]["job_id"])
        spares = [r["job_id"] for r in chain.ledger(1) if r["kind"] == "submitted"]
        ids = [j.split(":")[1] for j in spares]  # some may have run and ended: scancel may complain
        subprocess.run(["scancel", f"--clusters={SECOND_CLUSTER}", *ids], check=False)
        with held_as_user(chain.run / "aggregate" / "lock"):  # shard 0's trigger waits here to count
            release.touch()
            wait_until(lambda: chain.decisions(0), 240, "shard 0 to decide", every_s=1.0)
            trigger_a = str(chain.decisions(0)[-1]["job_id"])
            assert [trigger_a.partition(":")[0], trigger_b.partition(":")[0]] == ["a", SECOND_CLUSTER]
            run(["scancel", "--clusters=a", "--signal=KILL", "--full", trigger_a.split(":")[1]])
            wait_until(
                lambda: _job_state(trigger_a) not in {"RUNNING", "COMPLETING"},
                120,
                f"{trigger_a} to end after SIGKILL",
                every_s=1.0,
            )
            assert not (chain.run / "aggregate" / "ledger.jsonl").exists()  # no trigger got through
            assert not _counted(chain.run, 0)
        triggers = [trigger_a, trigger_b]
        wait_until(lambda: _starts(chain, None), 240, "the aggregation to start", every_s=1.0)
        first = _starts(chain, None)[0]["job_id"]
        run(["scancel", f"--clusters={SECOND_CLUSTER}", "--signal=KILL", "--full", first.split(":")[1]])
        report = chain.wait(timeout=300)
        assert [row["verdict"] for row in report["shards"]] == ["DONE", "DONE"]
        assert report["aggregation"]["state"].startswith("DONE")
        aggregate = chain.ledger(None)
        submitted = [r for r in aggregate if r["kind"] == "submitted"]
        assert submitted[0]["by"].startswith("a:") and submitted[0]["by"] not in triggers, submitted
        assert submitted[0]["after"] is None, submitted  # no dependency across clusters
        assert all(r["job_id"].startswith(f"{SECOND_CLUSTER}:") for r in submitted), submitted
        starts = [r for r in aggregate if r["kind"] == "start"]
        decisions = [r["decision"] for r in aggregate if r["kind"] == "decision"]
        assert len(starts) >= 2 and starts[0]["job_id"] == first and decisions.count("DONE") == 1, aggregate
        b_nodes = set(user.run(["sinfo", "-h", "-N", "-o", "%N"], env=cluster_env(SECOND_CLUSTER)).split())
        assert {r["host"] for r in starts} <= b_nodes
        assert report["queries"] <= 4, report["queries"]  # one squeue per cluster (+ sacct per cluster)
    finally:
        chain.cancel()


def test_the_demo_with_shards_on_both_clusters_merges_every_rollout_once(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """``gymslurm submit demo "slurm.clusters={a:'0',b:'1'}" slurm.aggregate_on=b --wait`` (each
    cluster names its shard) as the test user: shard 0's links run on a's nodes, shard 1's and the
    aggregation on b's, every one of the 40 rollouts is merged exactly once."""
    ensure_test_user(TEST_USER)
    workdir = make_user_dir(slurm_session_dir, "demo-across", owner=TEST_USER)
    user = SlurmUser(TEST_USER, workdir, as_root=True)
    named = f"slurm.clusters={{a:'0',{SECOND_CLUSTER}:'1'}}"  # each cluster names its shard
    argv = [
        str(slurm_python),
        "-m",
        "gymslurm",
        "submit",
        "demo",
        named,
        f"slurm.aggregate_on={SECOND_CLUSTER}",
        f"slurm.python={slurm_python}",
        "--wait",
    ]
    out = user.run(argv, timeout=600)
    (run_dir,) = (workdir / "gymslurm_runs").glob("demo-*/")
    try:
        assert f"shards 1..1: cluster {SECOND_CLUSTER}" in out, out
        nodes = {
            c: set(user.run(["sinfo", "-h", "-N", "-o", "%N"], env=cluster_env(c)).split())
            for c in ("a", SECOND_CLUSTER)
        }
        ledgers = {0: run_dir / "shards/000", 1: run_dir / "shards/001", None: run_dir / "aggregate"}
        for shard, folder in ledgers.items():
            records = [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines()]
            cluster = "a" if shard == 0 else SECOND_CLUSTER
            starts = [r for r in records if r["kind"] == "start"]
            assert starts and all(r["job_id"].startswith(f"{cluster}:") for r in starts), (shard, starts)
            assert {r["host"] for r in starts} <= nodes[cluster], (shard, starts, nodes)
        merged = (run_dir / "output/merged/rollouts.jsonl").read_text().splitlines()
        ids = [json.loads(line)["_ng_rollout_id"] for line in merged]
        assert len(ids) == 40 and len(set(ids)) == 40
    finally:
        user.run([str(slurm_python), "-m", "gymslurm", "cancel", str(run_dir)])


class TwoNodeModelChain(RealChain):
    """The demo benchmark whose model server is one ``srun -N2 -n2`` step over the job's two nodes."""

    def _policy_yaml(self) -> str:
        script = self.user.write("two_node_model.py", TWO_NODE_MODEL.read_text(), mode=0o644)
        srun = ["srun", "-N2", "-n2", "--overlap", "--kill-on-bad-exit=1"]
        command = [*srun, str(self.python), str(script), "{port}"]
        return (
            f"  - name: policy\n    command: {json.dumps(command)}\n    probe: chat_completions\n"
            "    startup_timeout_s: 120\n    collector_override: null\n"
        )


def test_a_model_server_spanning_two_nodes_as_an_srun_step_serves_a_whole_run(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """A link with --nodes=2 starts its model server as ``srun -N2 -n2`` (head on the link's node,
    worker on the other): the Environment Server's requests cross to the second node, every one of
    the 20 rollouts is merged once, and when the link ends no process of the step is left on either
    node."""
    ensure_test_user(TEST_USER)
    workdir = make_user_dir(slurm_session_dir, "two-node-model", owner=TEST_USER)
    user = SlurmUser(TEST_USER, workdir, as_root=True)
    spec = {
        "tasks": 20,
        "shards": 1,
        "server_flags": [],
        "collector": [],
        "model_flags": [],
        "slurm": '  extra_directives: ["--nodes=2", "--ntasks-per-node=1"]\n',
    }
    chain = TwoNodeModelChain(user, slurm_python, spec)
    try:
        chain.submit()
        report = chain.finished(timeout=420)
        assert report["shards"][0]["verdict"] == "DONE" and report["aggregation"]["state"].startswith("DONE")
        (start,) = [r for r in chain.ledger(0) if r["kind"] == "start"]
        nodes = job_nodes(start["job_id"])
        assert len(nodes) == 2 and start["host"] == nodes[0], (nodes, start)
        assert chain.run is not None
        log = (chain.run / "logs" / "server-policy-s000.log").read_text()
        forwarded = re.findall(r"^forwarded (\d+) to (\S+) from (\S+)$", log, re.M)
        assert forwarded and {(to, frm) for _, to, frm in forwarded} == {(nodes[1], nodes[0])}, log[-2000:]
        assert sorted(chain.rollout_ids(None).values()) == [1] * 20
        pgrep = ["pgrep", "-f", str(workdir / "two_node_model.py")]
        left = subprocess.run(pgrep, capture_output=True, text=True, check=False)
        assert left.stdout.strip() == "", left.stdout  # the step ended on both nodes with its link
    finally:
        chain.cancel()


def test_cancel_and_resubmit_of_a_run_across_clusters_reach_every_cluster(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Shards on a and b, both collecting: ``cancel`` ends both chains (no job of the run left on
    either cluster, both CANCELLED); ``resubmit`` queues each shard's new chain on its own cluster,
    and the run ends DONE with the aggregation on a."""
    ensure_test_user(TEST_USER)
    workdir = make_user_dir(slurm_session_dir, "cancel-across", owner=TEST_USER)
    user = SlurmUser(TEST_USER, workdir, as_root=True)
    steps = [{"exit": 0, "sleep": 600, "on_signal": 75}, {"exit": 0}]
    chain = Chain(user, slurm_python, steps, overrides=["shards=2", f"slurm.clusters=[a,{SECOND_CLUSTER}]"])
    try:
        chain.submit()
        wait_until(lambda: chain.calls(0) and chain.calls(1), 240, "both shards collecting", every_s=1.0)
        out = chain.gymslurm("cancel", str(chain.run))
        assert "cancelled" in out, out
        report = chain.wait(timeout=180, aggregation=False)
        assert [row["verdict"] for row in report["shards"]] == ["CANCELLED", "CANCELLED"], report["shards"]
        mine = {str(r["job_id"]) for s in (0, 1) for r in chain.ledger(s) if "job_id" in r}

        def left_in_queues() -> set[str]:  # scancel is asynchronous: the queues let go a moment later
            return {
                f"{cluster}:{job}"
                for cluster in ("a", SECOND_CLUSTER)
                for job in user.run(["squeue", f"--clusters={cluster}", "-h", "-o", "%i"]).split()
            } & mine

        wait_until(
            lambda: not left_in_queues(),
            240,
            "no job of the cancelled run left on either cluster",
            every_s=1.0,
        )
        out = chain.gymslurm("resubmit", str(chain.run), str(workdir / "bench.yaml"))
        assert "new chain" in out, out
        report = chain.wait(timeout=300)
        assert [row["verdict"] for row in report["shards"]] == ["DONE", "DONE"]
        assert report["aggregation"]["state"].startswith("DONE")
        for shard, cluster in ((0, "a"), (1, SECOND_CLUSTER)):
            records = chain.ledger(shard)
            after = records[[r["kind"] for r in records].index("resubmit") :]
            starts = [r["job_id"] for r in after if r["kind"] == "start"]
            assert starts and all(job.startswith(f"{cluster}:") for job in starts), (shard, after)
        assert all(r["job_id"].startswith("a:") for r in chain.ledger(None) if r["kind"] == "start")
    finally:
        chain.cancel()


def test_inject_logs_and_report_of_a_run_across_clusters_go_to_the_shards_cluster(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Shard 1 of a run over [a, b] runs on b: ``inject RUN 1 --kind timeout`` signals b's job (its
    link records it and goes on to DONE on b) while shard 0 on a is untouched; ``logs --shard 1``
    prints that job's log (Slurm's own id in the file name); ``report`` is written."""
    ensure_test_user(TEST_USER)
    workdir = make_user_dir(slurm_session_dir, "inject-across", owner=TEST_USER)
    user = SlurmUser(TEST_USER, workdir, as_root=True)
    steps = [{"exit": 0, "sleep": 600, "on_signal": 75}, {"exit": 0}]
    chain = Chain(user, slurm_python, steps, overrides=["shards=2", f"slurm.clusters=[a,{SECOND_CLUSTER}]"])
    try:
        chain.submit()
        wait_until(lambda: chain.calls(0) and chain.calls(1), 240, "both shards collecting", every_s=1.0)
        job = str(_starts(chain, 1)[0]["job_id"])
        assert job.startswith(f"{SECOND_CLUSTER}:"), job
        out = chain.gymslurm("inject", str(chain.run), "1", "--kind", "timeout")
        assert f"sent to job {job}" in out and "--clusters" not in out.split("(")[0], out
        wait_until(
            lambda: [d["decision"] for d in chain.decisions(1)][-1:] == ["DONE"],
            180,
            "shard 1 to go on to DONE",
            every_s=1.0,
        )
        assert len(chain.decisions(1)) == 2, chain.decisions(1)  # the signalled link, then its successor
        assert [r["kind"] for r in chain.ledger(1)].count("injected") == 1
        assert chain.decisions(0) == [] and chain.calls(0) == 1  # shard 0 on a: still its first link
        log = chain.gymslurm("logs", str(chain.run), "--shard", "1", "--link", "1")
        assert f"-{job.split(':')[1]}.out" in log, log[:500]
        assert "wrote" in chain.gymslurm("report", str(chain.run))
    finally:
        chain.cancel()
