"""A suite whose one model server is vLLM on the multi-node Slurm sandbox: two real replicas on two
nodes behind vllm-router, one killed mid-run.

One run (the module's fixture): a suite (docs/suites.md) of two demo benchmarks whose shared stack
is docs/servers.md's "vLLM on CPU" server as two replicas, each on a node of its own (``nodes: 1``,
``replicas: 2``: the link asks Slurm for two nodes, about 6 GB of vLLM together), with vLLM's
router in front on the link's node; each benchmark's own demo Environment Server asks the router.
It is submitted with the Slurm backend as the test user ``slurmtest``: the link starts each replica
as an ``srun --overlap`` step on its node, inside that node's network namespace, and probes it over
the node's address (``http://a2:PORT``); the router and the collectors (which read each replica's
``/metrics``) reach it across the sandbox's bridge. Once rollouts are being saved the test kills
the whole process group of the replica on the other node. ``restart_limit: 0`` retires it instead
of starting a third vLLM on two cores: the restart in place of a killed vLLM is the supervision
module's; this one is about the shared stack, the router, the replica that is left, and vLLM
inside a Slurm job on a sandbox node.

Why a suite started by the link, not the vLLM tests' running vLLM given by URL: what the suite
promises is that a link starts its model server once for all its benchmarks, which only the
ledger of a link that starts it shows; and making this module's run that suite costs no vLLM start
of its own (each is 74-179 s here). Why Slurm here and not a module of its own: a vLLM start is
minutes, so the one scenario that starts two carries the Slurm form too (it stays in the ``vllm``
xdist group: one vLLM stack at a time on the machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from gymslurm.job.stack_load import LOADING
from tests.e2e.launcher_chains_helpers import decisions, ledger
from tests.slurm.helpers import SlurmCluster, run, scenario_user
from tests.slurm.launcher_chains import FINAL, Chain
from tests.support import wait_until
from tests.vllm.harness import Vllm, group_alive
from tests.vllm.scenario import RUN_TIMEOUT_S, Run, kill_group, results, server_pid, wait_for
from tests.vllm.scenario import write_suite as suite

pytestmark = pytest.mark.slurm

ROWS = {"arith": 48, "arith-short": 32}
REPLICAS = ("policy-r0", "policy-r1")
SLURM = {"time": "00:30:00"}  # two vLLM starts one after the other, then the rollouts


@dataclass
class SlurmRun(Run):
    """The run, and where its replicas' vLLMs ran: the scenario's directory (every process of the
    scenario runs in it) and each replica's network namespace (``gs-a2``), in replica order."""

    workdir: Path = Path()
    namespaces: list[str] = field(default_factory=list)


def host_of(url: str) -> str:
    """``a2`` of ``http://a2:41234``."""
    return url.split("//")[1].rsplit(":", 1)[0]


def started_urls(run: Path) -> dict[str, str]:
    """The URL each server of the run's first link was started at, by name (ledger ``started`` records)."""
    return {r["name"]: r["url"] for r in ledger(run) if r["kind"] == "server" and r["event"] == "started"}


def api_server(url: str, workdir: Path) -> int | None:
    """The pid of the vLLM API server of this scenario serving ``url`` (every sandbox node shares the
    machine's pid space; its command line has ``--host NODE --port PORT``, its cwd the user's dir)."""
    host, port = host_of(url), url.rsplit(":", 1)[1]
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            argv = proc.info["cmdline"] or []
            # vLLM's python itself, not the link's `srun ... -- python -m ...` on its own node
            if argv[1:3] != ["-m", "vllm.entrypoints.openai.api_server"] or Path(proc.cwd()) != workdir:
                continue
            if argv[argv.index("--host") + 1] == host and argv[argv.index("--port") + 1] == port:
                return int(proc.info["pid"])
    return None


def network_namespace(pid: int) -> str:
    """The sandbox node namespace (``gs-a2``, /run/netns) process ``pid`` runs in, or "" when none."""
    mine = os.stat(f"/proc/{pid}/ns/net").st_ino
    named = [ns.name for ns in Path("/run/netns").glob("gs-*") if ns.stat().st_ino == mine]
    return named[0] if named else ""


def scenario_processes(workdir: Path) -> list[str]:
    """Every process still running in the scenario's directory (a vLLM, a router, a link), described."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if Path(proc.cwd()) == workdir:
                found.append(
                    f"{proc.info['pid']} {proc.info['name']} {' '.join(proc.info['cmdline'] or [])[:200]}"
                )
    return found


def final_report(chain: Chain) -> dict[str, Any] | None:
    """``status --json`` once the suite chain and every benchmark are final, else None."""
    report = chain.status()
    rows = [*report["shards"], *report["suite"]]
    return report if all(r["verdict"] in FINAL for r in rows) else None


def submit(chain: Chain, path: Path) -> Path:
    out = chain.gymslurm("submit", str(path))
    match = re.search(r"gymslurm status (\S+)", out)
    assert match, out
    chain.run = Path(match.group(1))
    return chain.run


@pytest.fixture(scope="module")
def one_replica_killed(
    vllm_install: Vllm,
    slurm_cluster: SlurmCluster,
    slurm_python: Path,
    slurm_session_dir: Path,
) -> Iterator[SlurmRun]:
    assert len(slurm_cluster.nodes) >= 2, slurm_cluster.nodes
    user = scenario_user(slurm_session_dir, "vllm-replicas")
    chain = Chain(user, slurm_python, steps=[])

    def write(name: str, text: str) -> Path:
        return user.write(name, text, mode=0o644)

    policy = {"nodes": 1, "replicas": 2, "restart_limit": 0}
    path = submit(
        chain,
        suite(write, vllm_install, python=str(slurm_python), rows=ROWS, concurrency=8, slurm=SLURM, **policy),
    )
    try:
        wait_for(
            lambda: server_pid(path, "env", "started", nth=1),
            "the replicas on their nodes, the router, both Environment Servers",
        )
        wait_for(lambda: results(path) >= 8, "rollouts before the kill")
        urls = started_urls(path)
        pids = [
            wait_for(lambda u=urls[name]: api_server(u, user.workdir), f"{name}'s vLLM") for name in REPLICAS
        ]
        namespaces = [network_namespace(pid) for pid in pids]
        victim = pids[1]
        assert os.getpgid(victim) == victim, "the API server leads its process group (EngineCore, Worker)"
        kill_group(victim, signal.SIGKILL)
        report = wait_until(
            lambda: final_report(chain),
            RUN_TIMEOUT_S,
            lambda: json.dumps(chain.status())[-3000:],
            every_s=2.0,
        )
        job = str(next(r for r in ledger(path) if r["kind"] == "start")["job_id"])
        wait_until(lambda: not run(["squeue", "-h", "-j", job]).strip(), 120, f"the link's job {job} to end")
        yield SlurmRun(path, report, pids, workdir=user.workdir, namespaces=namespaces)
    finally:
        chain.cancel()


def test_every_rollout_of_every_benchmark_is_saved_by_the_replica_left(one_replica_killed: SlurmRun) -> None:
    """kill -9 of one vLLM replica's process group on its node: the router's other replica serves the
    rest; each benchmark DONE with every rollout saved and 0 counted failures, in the same link,
    dispatch paused only while the vLLMs loaded (the collectors start beside them), never for the kill."""
    run = one_replica_killed
    assert [row["verdict"] for row in run.report["suite"]] == ["DONE", "DONE"]
    for name, rows in ROWS.items():
        coverage = run.coverage(name)
        assert (coverage["successful"], coverage["counted_failures"]) == (rows, 0), name
        assert decisions(run.path / "benchmarks" / name) == ["DONE"], name
    assert decisions(run.path) == ["DONE"]
    log = run.job_log()
    waits = log.count(f"supervision: down policy {LOADING}")
    assert waits == len(ROWS), "each collector, started while the vLLMs load, waits for the stack once"
    assert log.count("dispatch paused") == waits, "no other pause: the replica left carried the load"


def test_each_replica_serves_on_a_node_of_its_own_inside_that_nodes_network(
    one_replica_killed: SlurmRun,
) -> None:
    """The replicas are probed at their nodes' addresses, two nodes of the job, the link's first; the
    router listens on the link's node; each vLLM ran inside its node's network namespace (its
    ``/proc/PID/ns/net`` is the sandbox's ``gs-NODE``)."""
    urls = started_urls(one_replica_killed.path)
    link = next(r for r in ledger(one_replica_killed.path) if r["kind"] == "start")["host"]
    nodes = [host_of(urls[name]) for name in REPLICAS]
    assert nodes[0] == link and nodes[1] != link and host_of(urls["policy"]) == link, urls
    assert one_replica_killed.namespaces == [f"gs-{node}" for node in nodes], one_replica_killed.namespaces


def test_the_suites_shared_vllm_is_started_once_for_every_benchmark(one_replica_killed: SlurmRun) -> None:
    """One link, one start of the shared stack (each replica, then the router), each benchmark's own
    Environment Server started once (while the vLLMs load, so in any order beside them); both
    collectors share the vLLM, each with half of it, read from the replicas' own ``/metrics``
    across the nodes."""
    events = one_replica_killed.server_events()
    started = [name for name, event in events if event == "started"]
    assert sorted(started) == ["env", "env", "policy", "policy-r0", "policy-r1"], events
    assert started.index("policy-r0") < started.index("policy-r1") < started.index("policy"), events
    assert [r["kind"] for r in ledger(one_replica_killed.path)].count("start") == 1
    lines = one_replica_killed.job_log().splitlines()
    for name in ROWS:
        said = [
            line for line in lines if f"] {name}: the load adapts to model server 'policy''s queue" in line
        ]
        assert len(said) == 1 and said[0].endswith("its share of the model server 0.50"), (name, said)


def test_the_killed_replica_leaves_the_rotation_and_is_retired(one_replica_killed: SlurmRun) -> None:
    """The killed replica is down and, with restart_limit 0, retired; the other is never down."""
    events = one_replica_killed.server_events()
    assert [e for e in events if e[1] in ("down", "gave_up", "restarted")] == [
        ("policy-r1", "down"),
        ("policy-r1", "gave_up"),
    ], events


def test_no_vllm_replica_outlives_the_link(one_replica_killed: SlurmRun) -> None:
    """Once the link's job ended, both replicas' process groups (API server, EngineCore, Worker) are
    gone from both nodes, and nothing else runs in the scenario's directory."""
    assert len(one_replica_killed.vllm_pids) == 2
    assert not [pid for pgid in one_replica_killed.vllm_pids for pid in group_alive(pgid)]
    assert not scenario_processes(one_replica_killed.workdir)
