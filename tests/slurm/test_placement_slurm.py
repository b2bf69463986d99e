"""Servers placed on nodes of the job's own, and replicas behind vllm-router, on the multi-node sandbox.

Why: on one node every server runs beside the link and answers on 127.0.0.1; on the users' clusters
a model server spans nodes (multi-node vLLM, SGLang) or runs as replicas on node sets of their own,
and only real ``srun --overlap`` steps on other nodes (each node its own network namespace here)
show that the servers bind where the other nodes reach them, that a replica's node going DOWN
leaves the run to the others, and that a job whose every replica died ends at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support import wait_until

from .helpers import TEST_USER, SlurmCluster, SlurmUser, ensure_test_user, make_user_dir, run
from .launcher_real import RealChain
from .nodes import QUIET_TIMEOUT_S, jobs_on, resume_node

pytestmark = pytest.mark.slurm

BASE: dict[str, Any] = dict(
    shards=1,
    server_flags=[],
    collector=["+concurrency=8"],
    slurm="  time: '00:05:00'\n  lookahead: 1\n",
    policy_yaml="    probe_interval_s: 1\n    probe_timeout_s: 3\n    startup_timeout_s: 120\n",
)


def _user(slurm_session_dir: Path, name: str) -> SlurmUser:
    ensure_test_user(TEST_USER)
    return SlurmUser(TEST_USER, make_user_dir(slurm_session_dir, name, owner=TEST_USER), as_root=True)


def _steps(job_id: str) -> dict[str, str]:
    """Each step of a job by name, with the node it ran on (sacct: accounting is on)."""
    out = subprocess.run(
        ["sacct", "-n", "-P", "-j", job_id, "-o", "JobName,NodeList"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if line.startswith("gs-"))


def _server_records(chain: RealChain) -> list[dict[str, Any]]:
    return [r for r in chain.ledger() if r["kind"] == "server"]


def _results(chain: RealChain) -> int:
    path = chain.output(0)
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_model_server_spanning_two_nodes_serves_the_run_by_its_head_nodes_name(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """nodes: 2: one ``srun --overlap`` step per node (rank 0 on the head, rank 1 on another node), its
    URL the head node's name, the Environment Server on a third node reached by the collector by its
    node's name; the run ends DONE with every rollout. The demo model runs as a real two-rank server
    (``--nodes {nodes} --node-rank {node_rank} --head-node {head_node}``, demo/ranks.py): rank 1 joins
    the head across nodes and every completion took its part."""
    assert len(slurm_cluster.nodes) >= 3, slurm_cluster.nodes
    user = _user(slurm_session_dir, "two-node-server")
    ranks = ["--nodes", "{nodes}", "--node-rank", "{node_rank}", "--head-node", "{head_node}"]
    flags = ["--latency-ms", "200", *ranks]
    policy = BASE["policy_yaml"] + "    nodes: 2\n"
    spec = {**BASE, "tasks": 12, "model_flags": flags, "policy_yaml": policy, "demo_yaml": "    nodes: 1\n"}
    chain = RealChain(user, slurm_python, spec).submit()
    try:
        report = chain.finished(timeout=300)
        assert report["shards"][0]["verdict"] == "DONE"
        assert sum(chain.rollout_ids(0).values()) == 12
        started = {r["name"]: r for r in _server_records(chain) if r["event"] == "started"}
        link = next(r for r in chain.ledger() if r["kind"] == "start")
        head = link["host"]
        assert started["policy"]["url"].startswith(f"http://{head}:"), (started, head)
        demo_host = started["demo"]["url"].split("//")[1].split(":")[0]
        assert demo_host not in (head, "127.0.0.1"), started["demo"]
        steps = _steps(str(link["job_id"]))
        assert steps["gs-policy-0"] == head and steps["gs-policy-1"] not in (head, demo_host), steps
        assert steps["gs-demo-0"] == demo_host, steps
        log = (chain.run / "logs" / "server-policy-s000.log").read_text()  # type: ignore[operator]
        assert f"rank 1 listening on http://{steps['gs-policy-1']}:" in log, log[-2000:]
        assert f"rank 1: joined http://{head}:" in log, log[-2000:]
    finally:
        chain.cancel()


def _replica_spec(tasks: int, extra: str = "") -> dict[str, Any]:
    return {
        **BASE,
        "tasks": tasks,
        "model_flags": ["--latency-ms", "1000"],
        "policy_yaml": BASE["policy_yaml"] + "    nodes: 1\n    replicas: 3\n" + extra,
    }


def test_a_replicas_node_set_down_mid_run_leaves_the_run_to_the_other_two(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Three replicas on three nodes behind vllm-router; the node of one (not the link's) is set DOWN
    mid-run: that replica leaves the rotation, its restarts fail on the dead node, the other two finish
    the run in the same job, 0 budget spent.

    Setting a node DOWN kills every job on it, other tests' too (it requeued the node-down test's
    shard on a2, seen in CI): the job asks for its nodes ``--exclusive``, so the node set DOWN holds
    nothing else (Slurm's scheduler finds them, nothing of the cluster is blocked meanwhile)."""
    assert len(slurm_cluster.nodes) >= 3, slurm_cluster.nodes
    user = _user(slurm_session_dir, "replica-node-down")
    spec = _replica_spec(120, "    restart_limit: 1\n")
    spec["slurm"] += "  extra_directives: ['--exclusive']\n"
    chain = RealChain(user, slurm_python, spec).submit()
    node = ""
    try:
        wait_until(lambda: _results(chain) >= 8, QUIET_TIMEOUT_S, "some outcomes before the node goes down")
        started = {r["name"]: r for r in _server_records(chain) if r["event"] == "started"}
        node = started["policy-r1"]["url"].split("//")[1].split(":")[0]
        link = next(r for r in chain.ledger() if r["kind"] == "start")
        assert node != link["host"], (node, link)
        assert not jobs_on(node) - {str(link["job_id"])}, f"another job shares {node}: {jobs_on(node)}"
        run(["scontrol", "update", f"nodename={node}", "state=down", "reason=gymslurm-test-replica"])
        report = chain.finished(timeout=400)
        coverage = chain.companion(0, "_coverage.json")
        assert report["shards"][0]["verdict"] == "DONE" and coverage["counted_failures"] == 0, coverage
        assert [d["decision"] for d in chain.decisions()] == ["DONE"], "the same job finished the run"
        downs = [r["name"] for r in _server_records(chain) if r["event"] == "down"]
        assert downs and set(downs) == {"policy-r1"}, _server_records(chain)
    finally:
        if node:
            resume_node(node)
        chain.cancel()


def _replica_pids(chain: RealChain, hosts: set[str]) -> list[int]:
    """Pids of this run's demo model servers bound on ``hosts`` (every node shares the pid space here)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.info["cmdline"] or []
            mine = Path(proc.cwd()) == chain.user.workdir
            if mine and "demo-model-server" in cmdline and hosts & set(cmdline):
                found.append(proc.info["pid"])
    return found


def test_every_replica_killed_past_its_limit_ends_the_job_with_exit_1(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """restart_limit 0, all three replicas killed: the link exits 1 at once (RETRY, no allocation left
    idle: the job ends), no rollout spends budget, and the next job finishes the run."""
    user = _user(slurm_session_dir, "replicas-all-dead")
    spec = _replica_spec(30, "    restart_limit: 0\n")
    chain = RealChain(user, slurm_python, spec).submit()
    try:
        wait_until(lambda: _results(chain) >= 4, 240, "some outcomes before the kills")
        started = {r["name"]: r for r in _server_records(chain) if r["event"] == "started"}
        replicas = [r for name, r in started.items() if name.startswith("policy-r")]
        hosts = {r["url"].split("//")[1].split(":")[0] for r in replicas}
        pids = _replica_pids(chain, hosts)
        assert len(pids) >= 3, (hosts, pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        decided = lambda: next((r for r in chain.ledger() if r["kind"] == "decision"), None)  # noqa: E731
        first = wait_until(decided, 240, "the link's decision")
        # No allocation left idle: the dead job leaves squeue well inside its 5-minute time limit.
        wait_until(lambda: str(first["job_id"]) not in chain.active_jobs(), 30, "the dead link's job to end")
        report = chain.finished(timeout=400)
        assert first["exit_code"] == 1 and "went down more than restart_limit=0" in first["reason"], first
        assert report["shards"][0]["verdict"] == "DONE"
        assert chain.companion(0, "_coverage.json")["counted_failures"] == 0
    finally:
        chain.cancel()


def _step_daemons(job: str, step_name: str) -> list[int]:
    """Pids of the ``slurmstepd`` of this job's step named ``step_name`` (every node shares the pid
    space here): ``squeue -s`` names the step, its daemon's command line ``slurmstepd: [JOB.STEP]``."""
    number = run(["squeue", "-h", "-j", job, "-o", "%A"]).split()[0]
    steps = [
        line.split("|") for line in run(["squeue", "-h", "-s", "-j", number, "-o", "%i|%j"]).splitlines()
    ]
    ids = [f"[{number}.{step.rpartition('.')[2]}]" for step, name in steps if name == step_name]
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if cmdline.startswith("slurmstepd:") and any(step in cmdline for step in ids):
                found.append(proc.info["pid"])
    return found


def _in_rotation(router: str) -> list[str]:
    """The workers vllm-router routes to now (``GET /list_workers``)."""
    try:
        with urllib.request.urlopen(f"{router}/list_workers", timeout=5) as reply:
            return [str(url) for url in json.loads(reply.read()).get("urls", [])]
    except (OSError, ValueError):
        return []


def test_a_hung_replica_leaves_the_rotation_and_comes_back_restarted(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """One replica (not on the link's node) SIGSTOPped mid-run, and its Slurm step's slurmstepd too:
    alive to the kernel but answering nothing, its probe stalls and it leaves the rotation; its old
    step is ended (scancel JOB.STEP) or, the stopped slurmstepd not answering, the replica takes a new
    port (the hung one still holds its own): it is restarted, back in the router's rotation, and the
    same job finishes the run DONE, 0 budget spent (issue 32: every restart failed "address already
    in use" and the replica was retired)."""
    assert len(slurm_cluster.nodes) >= 3, slurm_cluster.nodes
    user = _user(slurm_session_dir, "replica-hung")
    chain = RealChain(user, slurm_python, _replica_spec(400, "    restart_limit: 1\n")).submit()
    pids: list[int] = []
    try:
        wait_until(lambda: _results(chain) >= 8, 240, "some outcomes before the hang")
        started = {r["name"]: r for r in _server_records(chain) if r["event"] == "started"}
        node = started["policy-r1"]["url"].split("//")[1].split(":")[0]
        link = next(r for r in chain.ledger() if r["kind"] == "start")
        assert node != link["host"], (node, link)
        pids = _replica_pids(chain, {node}) + _step_daemons(link["job_id"], "gs-policy-r1-0")
        assert len(pids) >= 2, (node, pids)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        restarted = wait_until(
            lambda: [
                r for r in _server_records(chain) if r["name"] == "policy-r1" and r["event"] == "restarted"
            ],
            300,
            "policy-r1 restarted",
        )
        back = restarted[-1]["url"]
        wait_until(
            lambda: back in _in_rotation(started["policy"]["url"]), 60, f"{back} in the router's rotation"
        )
        for pid in pids:  # the hang ends: a job ends only once every step's slurmstepd has let go
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        report = chain.finished(timeout=400)
        coverage = chain.companion(0, "_coverage.json")
        assert report["shards"][0]["verdict"] == "DONE" and coverage["counted_failures"] == 0, coverage
        assert [d["decision"] for d in chain.decisions()] == ["DONE"], "the same job finished the run"
        downs = {r["name"] for r in _server_records(chain) if r["event"] == "down"}
        assert downs == {"policy-r1"}, _server_records(chain)
        assert not [r for r in _server_records(chain) if r["event"] == "gave_up"], _server_records(chain)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        chain.cancel()


def _visible_devices(marker: str) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES of this run's demo model server (``--model-name marker``) and of the demo
    server asking it (its ``--policy-url`` ends with the model server's port)."""
    procs = [(p, p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])]
    found: dict[str, str] = {}
    for proc, cmdline in procs:
        if marker in cmdline and "demo-model-server" in cmdline:
            port = cmdline[cmdline.index("--port") + 1]
            asking = [p for p, c in procs if "demo-server" in c and any(a.endswith(f":{port}") for a in c)]
            for role, each in [("policy", proc), *(("demo", p) for p in asking)]:
                with contextlib.suppress(psutil.Error):
                    found[role] = each.environ().get("CUDA_VISIBLE_DEVICES", "")
    return found


def test_servers_on_the_links_node_each_see_gpus_of_their_own(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """policy ``gpus: 2`` and demo ``gpus: 1``, both in the link's process: the job asks --gres=gpu:3,
    Slurm gives the link three of the node's four (CUDA_VISIBLE_DEVICES=0,1,2, or 1,2,3 when another
    job holds device 0), and the policy's process sees the first two, the demo server's the third
    (read from each running process's environment), not all three each."""
    user = _user(slurm_session_dir, "gpu-split")
    marker = f"gpusplit-{os.getpid()}-{time.monotonic_ns()}"
    spec = {
        **BASE,
        "tasks": 30,
        "model_flags": ["--latency-ms", "400", "--model-name", marker],
        "policy_yaml": BASE["policy_yaml"] + "    gpus: 2\n",
        "demo_yaml": "    gpus: 1\n",
    }
    chain = RealChain(user, slurm_python, spec).submit()
    try:
        seen = wait_until(lambda: (v := _visible_devices(marker)) and len(v) == 2 and v, 180, "both servers")
        policy, demo = seen["policy"].split(","), seen["demo"].split(",")
        assert len(policy) == 2 and len(demo) == 1 and sorted(policy + demo) == policy + demo, seen
        assert set(policy + demo) <= {"0", "1", "2", "3"} and len(set(policy + demo)) == 3, seen
        assert chain.finished(timeout=300)["shards"][0]["verdict"] == "DONE"
        started = {r["name"]: r["cause"] for r in _server_records(chain) if r["event"] == "started"}
        assert f"with GPUs {seen['policy']} " in started["policy"], started
        assert f"with GPUs {seen['demo']} " in started["demo"], started
    finally:
        chain.cancel()
