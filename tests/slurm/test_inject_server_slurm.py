"""``gymslurm inject RUN 0 --kind server-crash`` on the real Slurm, on an array task (issue 19): the
SIGKILL reaches the link's Environment Server (through ``srun --overlap`` to the task's numeric job
id), the link restarts that server in place (a ``server`` record ``restarted`` of the same job), no
retry is spent, and the chain goes on to DONE. The other kinds are in ``test_launcher_hostile.py``;
this one needs a link with a server of its own, so it has its own scenario.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import wait_until

from .helpers import SlurmCluster, submitted_up_front
from .launcher_chains import Chain

pytestmark = pytest.mark.slurm

# Alive until its fault (or the USR1 at 12 min - 90 s); the link's second run ends at once.
SLEEPER = [{"exit": 0, "sleep": 900, "on_signal": 75, "progress": 1}, {"exit": 0}]


def _server_yaml(python: Path) -> str:
    command = [str(python), "-m", "gymslurm", "demo-server", "--host", "{host}", "--port", "{port}"]
    return (
        "servers:\n  - name: env\n"
        f"    command: {json.dumps(command)}\n"
        "    host: 127.0.0.1\n    port: 0\n    health_path: /health\n"
        "    probe_interval_s: 0.5\n    probe_timeout_s: 2\n    startup_timeout_s: 120\n"
    )


@pytest.fixture(scope="module")
def chain(slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path) -> Iterator[Chain]:
    """One array run whose link starts the demo Environment Server and then sleeps (cancelled at the end)."""
    spec = dict(
        steps=SLEEPER,
        overrides=["aggregation.enabled=false"],
        slurm_yaml="  time: '00:12:00'\n",
        extra_yaml=_server_yaml(slurm_python),
    )
    for chains in submitted_up_front(
        slurm_session_dir,
        "inject-server",
        {"server_crash": spec},
        lambda user, spec: Chain(user, slurm_python, **spec).submit(),  # type: ignore[arg-type]
    ):
        yield chains["server_crash"]


def _servers(chain: Chain, job: str) -> list[dict[str, object]]:
    return [r for r in chain.ledger() if r["kind"] == "server" and r["job_id"] == job]


def test_an_injected_server_crash_on_an_array_task_restarts_the_server_in_place(chain: Chain) -> None:
    """inject --kind server-crash kills the live array task's server (its recorded pid); the same link
    restarts it (a new pid, ``restarted``), no decision and no retry spent; the chain then ends DONE."""
    job = chain.wait_for_calls(1)  # the collector runs: its servers are up
    assert "_" in job, f"every link is an array task, not {job}"
    (started,) = [r for r in _servers(chain, job) if r["event"] == "started"]
    out = chain.gymslurm("inject", str(chain.run), "0", "--kind", "server-crash")
    assert f"server-crash sent to job {job}" in out and f"kill -KILL {started['pid']}" in out, out
    wait_until(
        lambda: any(r["event"] == "restarted" for r in _servers(chain, job)),
        120,
        lambda: f"a restart of the server in {job}: {_servers(chain, job)}",
        every_s=1,
    )
    (restarted,) = [r for r in _servers(chain, job) if r["event"] == "restarted"]
    assert restarted["pid"] != started["pid"] and restarted["name"] == "env", restarted
    assert chain.decisions() == [], "the link went on: the crash ended nothing"
    (record,) = [r for r in chain.ledger() if r["kind"] == "injected"]
    assert (record["job_id"], record["fault"]) == (job, "server-crash")
    row = chain.status()["shards"][0]
    assert row["retries"] == "0/3" and row["injected"] and row["injected"][0].startswith("server-crash"), row
    chain.gymslurm("inject", str(chain.run), "0", "--kind", "timeout")  # end the sleeper: the chain goes on
    report = chain.wait(timeout=240, aggregation=False)
    first, last = chain.decisions()
    assert (first["job_id"], first["decision"], last["decision"]) == (job, "CONTINUE", "DONE"), (first, last)
    assert report["shards"][0]["retries"] == "0/3"
