"""Two real vLLM replicas behind vllm-router, one killed mid-run: the other carries every rollout.

One run (the module's fixture): the link starts docs/servers.md's "vLLM on CPU" server as two
replicas (``replicas: 2``, about 6 GB together) with vLLM's router in front, and the demo
Environment Server asking the router. Once rollouts are being saved the test kills one replica's
whole process group. ``restart_limit: 0`` retires it instead of starting a third vLLM on two cores:
the restart in place of a killed vLLM is the supervision module's; this one is about the router
and the replica that is left.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.e2e.launcher_chains_helpers import decisions
from tests.support import wait_until
from tests.vllm.harness import Vllm
from tests.vllm.scenario import RUN_TIMEOUT_S, Run, finish, kill_group, leftovers, results, server_pid, submit
from tests.vllm.scenario import write_benchmark as benchmark

ROWS = 80


@pytest.fixture(scope="module")
def one_replica_killed(vllm_install: Vllm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("vllm-replicas")
    bench = benchmark(tmp, vllm_install, rows=ROWS, concurrency=8, replicas=2, restart_limit=0)
    run = submit(bench, tmp)
    wait_until(
        lambda: server_pid(run, "env", "started"),
        RUN_TIMEOUT_S,
        "the replicas, the router, the Environment Server",
        every_s=0.2,
    )
    wait_until(lambda: results(run) >= 8, RUN_TIMEOUT_S, "rollouts before the kill", every_s=0.2)
    victim = server_pid(run, "policy-r1", "started")
    assert victim is not None
    kill_group(victim, signal.SIGKILL)
    yield finish(run, vllms=("policy-r0", "policy-r1"))


def test_every_rollout_is_saved_by_the_replica_left(one_replica_killed: Run) -> None:
    """kill -9 of one vLLM replica's process group: the router's other replica serves the rest; every
    rollout saved, 0 counted failures, DONE in the same link, dispatch never paused."""
    run = one_replica_killed
    coverage = run.coverage()
    assert (run.report["shards"][0]["verdict"], coverage["successful"], coverage["counted_failures"]) == (
        "DONE",
        ROWS,
        0,
    )
    assert decisions(run.path) == ["DONE"]
    assert "dispatch paused" not in run.job_log(), "the replica left carried the load"


def test_the_killed_replica_leaves_the_rotation_and_is_retired(one_replica_killed: Run) -> None:
    """The killed replica is down and, with restart_limit 0, retired; the other is never down."""
    events = one_replica_killed.server_events()
    started = [name for name, event in events if event == "started"]
    assert started == ["policy-r0", "policy-r1", "policy", "env"], events
    assert [e for e in events if e[1] in ("down", "gave_up", "restarted")] == [
        ("policy-r1", "down"),
        ("policy-r1", "gave_up"),
    ], events


def test_no_vllm_replica_outlives_the_link(one_replica_killed: Run) -> None:
    """Both replicas' process groups (API server, EngineCore, Worker) are gone when the link ends."""
    assert len(one_replica_killed.vllm_pids) == 2
    assert not leftovers(one_replica_killed)
