"""A job's own stop costs no rollout its failure budget, and no process of a link outlives it (real Slurm).

Why: ``scancel`` and ``scontrol requeue`` send SIGTERM to every process of the job at once, the
job's Environment Server included: its in-flight requests drop a moment before (or after) the
collector hears its own signal. They must be interruptions (no budget spent), whatever the order.
And on ``proctrack/linuxproc`` a process that left the link's process tree escapes Slurm's
cleanup: a SIGKILLed link must leave no server behind.

Scenarios (submitted together by one module fixture, each interrupted by a watcher loop as soon as
its first link has saved a few outcomes with 8 requests in flight, so their Slurm waits overlap):

- ``scancel``: plain ``scancel`` of the running link (SIGCONT+SIGTERM to all its processes);
- ``requeue``: ``scontrol requeue`` of the running link (the same job id runs again);
- ``kill9``: SIGKILL of the link's ``chain-step`` process (its server must die with it);
- ``model_kill9``: the demo stack (model server + Environment Server asking it), SIGKILL of the
  model server: restarted in place by the link, the same link finishes.

Each chain must then finish DONE with every rollout once, 0 counted failures, and the first
link's server process (pid + create time from the ledger) must be gone once the link has ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support import wait_until

from .helpers import TEST_USER, SlurmCluster, SlurmUser, ensure_test_user, make_user_dir
from .launcher_real import RealChain

pytestmark = pytest.mark.slurm

# 120 requests (about 25 s for a first link) leave the watcher room to be starved a while too.
TASKS = 120
SPEC: dict[str, Any] = dict(
    tasks=TASKS,
    shards=1,
    server_flags=["--latency-ms", "1500"],
    collector=["+concurrency=8"],
    slurm="  time: '00:05:00'\n",
    server_yaml="    probe_interval_s: 1\n    probe_timeout_s: 3\n",
)
KINDS = ("scancel", "requeue", "kill9")
STACK_SPEC: dict[str, Any] = {**SPEC, "model_flags": ["--latency-ms", "1500"], "server_flags": []}


def _results(chain: RealChain) -> int:
    path = chain.output(0)
    return len(path.read_text().splitlines()) if path.exists() else 0


def _first_server(chain: RealChain, program: str = "demo-server") -> dict[str, Any] | None:
    """The running first link's job id and its server's pid + create time (found by its cwd)."""
    starts = [r for r in chain.ledger() if r["kind"] == "start"]
    if not starts:
        return None
    for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
        with contextlib.suppress(psutil.Error):
            if program in (proc.info["cmdline"] or []) and Path(proc.cwd()) == chain.user.workdir:
                return {
                    "job_id": starts[0]["job_id"],
                    "pid": proc.pid,
                    "create_time": proc.info["create_time"],
                }
    return None


def _chain_step_pid(chain: RealChain) -> int | None:
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "chain-step" in cmdline and str(chain.run) in cmdline:
            return int(proc.info["pid"])
    return None


def _interrupt(kind: str, chain: RealChain, job: str, server: dict[str, Any]) -> None:
    if kind == "model_kill9":
        os.kill(server["pid"], signal.SIGKILL)
    elif kind == "scancel":
        subprocess.run(["scancel", job], check=True)
    elif kind == "requeue":
        subprocess.run(["scontrol", "requeue", job], check=True)
    else:
        pid = _chain_step_pid(chain)
        assert pid is not None, "the running link's chain-step process"
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _watch(
    chains: dict[str, RealChain],
    done: dict[str, tuple[RealChain, dict[str, Any]]],
    stop: threading.Event,
    errors: list[BaseException],
    lock: threading.Lock,
) -> None:
    """Interrupt each chain (as soon as it is submitted) once its first link has saved 8 outcomes."""
    try:
        while not stop.is_set():
            with lock:
                submitted = list(chains.items())
            for kind, chain in submitted:
                program = "demo-model-server" if kind == "model_kill9" else "demo-server"
                if kind in done or _results(chain) < 8:
                    continue
                server = _first_server(chain, program)
                if server is None:
                    continue
                _interrupt(kind, chain, str(server["job_id"]), server)
                done[kind] = (chain, server)
            time.sleep(0.3)
    except BaseException as error:  # handed to the fixture, which raises it
        errors.append(error)


def _missed(chain: RealChain) -> str:
    """Why a scenario was not interrupted: its first link already decided, or where it is."""
    decided = [r for r in chain.ledger() if r["kind"] == "decision"]
    if decided:
        return f"its first link ended {decided[0]['decision']} before it could be interrupted"
    return f"{_results(chain)} outcomes, {len([r for r in chain.ledger() if r['kind'] == 'start'])} start(s)"


@pytest.fixture(scope="module")
def interrupted(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> Iterator[dict[str, tuple[RealChain, dict[str, Any]]]]:
    """Every scenario submitted, each interrupted once its first link has saved 8 outcomes.

    The watcher runs while the later scenarios are still being submitted: a first link once did its 60
    requests in about 15 s, and on a loaded sandbox submitting the other three took longer than that,
    so the first scenario (scancel) had ended DONE before a watcher started after the submissions
    looked at it (seen in CI: its ledger's decision 16 s after its start), and was never interrupted.
    """
    ensure_test_user(TEST_USER)
    chains: dict[str, RealChain] = {}
    done: dict[str, tuple[RealChain, dict[str, Any]]] = {}
    stop, errors, lock = threading.Event(), list[BaseException](), threading.Lock()
    watcher = threading.Thread(target=_watch, args=(chains, done, stop, errors, lock), daemon=True)
    watcher.start()
    try:
        for kind in (*KINDS, "model_kill9"):
            user = SlurmUser(
                TEST_USER, make_user_dir(slurm_session_dir, f"interrupt-{kind}", owner=TEST_USER), True
            )
            spec = STACK_SPEC if kind == "model_kill9" else SPEC
            chain = RealChain(user, slurm_python, spec).submit()
            with lock:
                chains[kind] = chain

        def missed() -> str:
            left = {kind: _missed(chain) for kind, chain in chains.items() if kind not in done}
            return f"every link to get to 8 outcomes: {left}"

        wait_until(lambda: len(done) >= len(chains) or errors, 300, missed, every_s=0.5)
        stop.set()
        watcher.join(timeout=30)
        if errors:
            raise errors[0]
        yield done
    finally:
        stop.set()
        for chain in chains.values():
            chain.cancel()


@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupted_link_spends_no_failure_budget_and_leaves_no_server(
    interrupted: dict[str, tuple[RealChain, dict[str, Any]]], kind: str
) -> None:
    """scancel / requeue / SIGKILL of a link with 8 requests in flight: the chain ends DONE with every
    rollout once and 0 counted failures, and the interrupted link's server did not outlive it."""
    chain, server = interrupted[kind]
    report = chain.finished(timeout=400)
    coverage = chain.companion(0, "_coverage.json")
    assert report["shards"][0]["verdict"] == "DONE"
    assert (coverage["successful"], coverage["counted_failures"]) == (TASKS, 0), json.dumps(coverage)
    assert set(chain.rollout_ids(0).values()) == {1}
    assert not _alive(server["pid"], server["create_time"]), (
        f"the server of job {server['job_id']} outlived it"
    )
    assert len([r for r in chain.ledger() if r["kind"] == "start"]) >= 2, "a second run finished the work"


def test_a_killed_model_server_is_restarted_in_place_and_spends_no_budget(
    interrupted: dict[str, tuple[RealChain, dict[str, Any]]],
) -> None:
    """kill -9 of the job's model server (demo stack) with 8 requests in flight: the link restarts
    it in place, the same link finishes with every rollout once and 0 counted failures."""
    chain, _ = interrupted["model_kill9"]
    report = chain.finished(timeout=400)
    coverage = chain.companion(0, "_coverage.json")
    assert report["shards"][0]["verdict"] == "DONE"
    assert (coverage["successful"], coverage["counted_failures"]) == (TASKS, 0), json.dumps(coverage)
    assert set(chain.rollout_ids(0).values()) == {1}
    assert [d["decision"] for d in chain.decisions()] == ["DONE"]
    assert report["shards"][0]["server_restarts"] == "policy:1"
