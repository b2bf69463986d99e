"""A suite whose one model server is vLLM: two real replicas behind vllm-router, one killed mid-run.

One run (the module's fixture): a suite (docs/suites.md) of two demo benchmarks whose shared stack
is docs/servers.md's "vLLM on CPU" server as two replicas (``replicas: 2``, about 6 GB together)
with vLLM's router in front; each benchmark's own demo Environment Server asks the router. The
link starts the stack once for both benchmarks. Once rollouts are being saved the test kills one
replica's whole process group. ``restart_limit: 0`` retires it instead of starting a third vLLM
on two cores: the restart in place of a killed vLLM is the supervision module's; this one is about
the shared stack, the router and the replica that is left.

Why a suite started by the link, not the vLLM tests' running vLLM given by URL: what the suite
promises is that a link starts its model server once for all its benchmarks, which only the
ledger of a link that starts it shows; and making this module's run that suite costs no vLLM start
of its own (each is 74-179 s here).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.e2e.launcher_chains_helpers import decisions, ledger
from tests.vllm.harness import Vllm
from tests.vllm.scenario import Run, finish, kill_group, leftovers, results, server_pid, submit, wait_for
from tests.vllm.scenario import write_suite as suite

ROWS = {"arith": 48, "arith-short": 32}


@pytest.fixture(scope="module")
def one_replica_killed(vllm_install: Vllm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("vllm-replicas")
    run = submit(suite(tmp, vllm_install, ROWS, concurrency=8, replicas=2, restart_limit=0), tmp)
    wait_for(
        lambda: server_pid(run, "env", "started", nth=1), "the replicas, the router, both Environment Servers"
    )
    wait_for(lambda: results(run) >= 8, "rollouts before the kill")
    victim = server_pid(run, "policy-r1", "started")
    assert victim is not None
    kill_group(victim, signal.SIGKILL)
    yield finish(run, vllms=("policy-r0", "policy-r1"))


def test_every_rollout_of_every_benchmark_is_saved_by_the_replica_left(one_replica_killed: Run) -> None:
    """kill -9 of one vLLM replica's process group: the router's other replica serves the rest; each
    benchmark DONE with every rollout saved and 0 counted failures, in the same link, dispatch never
    paused."""
    run = one_replica_killed
    assert [row["verdict"] for row in run.report["suite"]] == ["DONE", "DONE"]
    for name, rows in ROWS.items():
        coverage = run.coverage(name)
        assert (coverage["successful"], coverage["counted_failures"]) == (rows, 0), name
        assert decisions(run.path / "benchmarks" / name) == ["DONE"], name
    assert decisions(run.path) == ["DONE"]
    assert "dispatch paused" not in run.job_log(), "the replica left carried the load"


def test_the_suites_shared_vllm_is_started_once_for_every_benchmark(one_replica_killed: Run) -> None:
    """One link, one start of the shared stack (each replica, then the router), then each benchmark's
    own Environment Server; both collectors share the vLLM, each with half of it."""
    events = one_replica_killed.server_events()
    started = [name for name, event in events if event == "started"]
    assert started == ["policy-r0", "policy-r1", "policy", "env", "env"], events
    assert [r["kind"] for r in ledger(one_replica_killed.path)].count("start") == 1
    log = one_replica_killed.job_log()
    for name in ROWS:
        said = (
            f"{name}: the load adapts to model server 'policy''s queue (its /metrics answers); its share of"
        )
        assert f"{said} the model server 0.50" in log, name


def test_the_killed_replica_leaves_the_rotation_and_is_retired(one_replica_killed: Run) -> None:
    """The killed replica is down and, with restart_limit 0, retired; the other is never down."""
    events = one_replica_killed.server_events()
    assert [e for e in events if e[1] in ("down", "gave_up", "restarted")] == [
        ("policy-r1", "down"),
        ("policy-r1", "gave_up"),
    ], events


def test_no_vllm_replica_outlives_the_link(one_replica_killed: Run) -> None:
    """Both replicas' process groups (API server, EngineCore, Worker) are gone when the link ends."""
    assert len(one_replica_killed.vllm_pids) == 2
    assert not leftovers(one_replica_killed)
