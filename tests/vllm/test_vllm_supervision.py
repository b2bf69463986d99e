"""A link supervising a real vLLM: kill -9 of its process group, then SIGSTOP, both mid-run.

One run (the module's fixture, since each vLLM start takes minutes): the link starts docs/servers.md's
"vLLM on CPU" server and the demo Environment Server asking it; once rollouts are being saved the
test kills vLLM's whole process group with SIGKILL (a crash: API server, EngineCore and Worker
gone); once the restarted vLLM has served more, it SIGSTOPs the new vLLM's EngineCore (a wedged
engine: the API server still answers ``/health`` 200 and ``/metrics``, completions never come). The tests
read what the run left: restarted in place twice, no rollout charged, every rollout saved.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import psutil
import pytest

from tests.e2e.launcher_chains_helpers import decisions, ledger
from tests.support import wait_until
from tests.vllm.harness import Vllm
from tests.vllm.scenario import RUN_TIMEOUT_S, Run, finish, kill_group, leftovers, results, server_pid, submit
from tests.vllm.scenario import write_benchmark as benchmark

ROWS = 80


def engine_core(api_server: int) -> int:
    """The pid of the EngineCore process the vLLM API server ``api_server`` started."""
    (engine,) = [p.pid for p in psutil.Process(api_server).children() if "EngineCore" in p.name()]
    return engine


@pytest.fixture(scope="module")
def supervised(vllm_install: Vllm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("vllm-supervised")
    run = submit(benchmark(tmp, vllm_install, rows=ROWS, concurrency=4), tmp)
    first = wait_until(
        lambda: server_pid(run, "policy", "started"),
        RUN_TIMEOUT_S,
        "vLLM to start",
        every_s=0.2,
    )
    wait_until(lambda: results(run) >= 8, RUN_TIMEOUT_S, "rollouts before the kill", every_s=0.2)
    kill_group(first, signal.SIGKILL)
    second = wait_until(
        lambda: server_pid(run, "policy", "restarted"),
        RUN_TIMEOUT_S,
        "vLLM's restart after the kill",
        every_s=0.2,
    )
    saved = results(run)
    wait_until(
        lambda: results(run) >= saved + 8, RUN_TIMEOUT_S, "rollouts from the restarted vLLM", every_s=0.2
    )
    os.kill(engine_core(second), signal.SIGSTOP)  # a wedged engine: the API server still answers /health
    yield finish(run)


def test_a_killed_vllm_process_group_is_restarted_in_place(supervised: Run) -> None:
    """kill -9 of vLLM's process group: down ("killed by signal 9"), restarted in place by the same link."""
    downs = [r for r in ledger(supervised.path) if r["kind"] == "server" and r["event"] == "down"]
    assert "signal 9" in downs[0]["cause"], downs
    assert supervised.server_events()[:4] == [
        ("policy", "started"),
        ("env", "started"),
        ("policy", "down"),
        ("policy", "restarted"),
    ]


def test_a_wedged_vllm_engine_is_found_hung_by_its_probes_and_restarted(supervised: Run) -> None:
    """SIGSTOP of vLLM's EngineCore: /health still says 200, but the one-token probes time out and the
    finished-requests counter stands still, so it is down; killed and restarted in place."""
    downs = [r for r in ledger(supervised.path) if r["kind"] == "server" and r["event"] == "down"]
    assert len(downs) == 2 and "probe(s) in a row failed" in downs[1]["cause"], downs
    assert supervised.server_events()[4:] == [("policy", "down"), ("policy", "restarted")]
    assert supervised.report["shards"][0]["server_restarts"] == "policy:2"


def test_both_outages_spend_no_budget_and_every_rollout_is_saved(supervised: Run) -> None:
    """The rollouts vLLM's outages broke are interruptions charged to no one: 0 counted failures, every
    rollout saved, DONE in the one link."""
    coverage, verdict = supervised.coverage(), supervised.report["shards"][0]["verdict"]
    assert (verdict, coverage["successful"], coverage["counted_failures"]) == (
        "DONE",
        ROWS,
        0,
    )
    assert decisions(supervised.path) == ["DONE"]
    interrupted = [r for r in supervised.failures() if r["_ng_failure_class"] == "kill_shaped"]
    assert interrupted and {r["_ng_failure_diagnostics"]["interruption"]["server"] for r in interrupted} == {
        "policy"
    }


def test_no_vllm_process_outlives_the_link(supervised: Run) -> None:
    """Every vLLM the link started (three: the first, two restarts) is gone with its EngineCore and Worker."""
    assert len(supervised.vllm_pids) == 3
    assert not leftovers(supervised)
