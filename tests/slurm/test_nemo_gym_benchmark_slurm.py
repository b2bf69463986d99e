"""The NeMo Gym benchmark from a fresh checkout, in one command, on the Slurm sandbox (issue 21).

``gymslurm submit configs/benchmarks/nemo_gym_weather.yaml --wait``, run as the job user
(``slurmtest``) in a fresh clone it owns: the job, on one of the nodes a1..a4 (each its own network
namespace), starts NeMo Gym's whole stack with NeMo Gym's own ``gym env start`` through
configs/nemo_gym/start_stack.sh, collects through the ``legacy_agent`` relay found by name, and the
aggregation job merges the shard. The config is used unchanged; what differs from the local run is
the environment a user on a cluster gives it: ``NEMO_GYM_VENV``, a NeMo Gym venv the job user can
run (tests/slurm/nemo_gym_venv.py makes one from the compat suite's cached install), and
``POLICY_BASE_URL``, the policy model's address, here the compat suite's fake OpenAI endpoint
(tests/compat/fake_openai.py) listening on the host's bridge address, which every node reaches.

Markers ``slurm`` and ``nemogym``: it needs both the sandbox and NeMo Gym, and runs in the xdist
group ``nemogym`` (tests/conftest.py), beside ``machine``: its stack is in a node's own network
namespace, so its ports are never the host's. About 90 s with the venvs made.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.gym_eval import benchmark_env, fake_policy, nemo_gym_or_fail

from .helpers import REPO_ROOT, SlurmCluster, SlurmUser
from .nemo_gym_venv import job_nemo_gym_venv

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]
CONTROLLER = "ctl-a"  # /etc/hosts maps it to the host's bridge address (docs/slurm-sandbox.md)


def test_the_nemo_gym_benchmark_runs_on_slurm_from_a_fresh_checkout_in_one_command(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_user: SlurmUser
) -> None:
    """Fresh clone, one `gymslurm submit configs/benchmarks/nemo_gym_weather.yaml --wait` on the
    sandbox as the job user: exit 0, the shard DONE on a node, 5/5 merged rows with reward 1.0."""
    venv = job_nemo_gym_venv(nemo_gym_or_fail(), slurm_user.name)
    checkout = slurm_user.workdir / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(checkout)], check=True, timeout=120)
    if slurm_user.as_root:
        subprocess.run(["chown", "-R", f"{slurm_user.name}:", str(checkout)], check=True, timeout=120)
    runs = slurm_user.workdir / "runs"
    argv = [
        str(slurm_python),
        "-m",
        "gymslurm",
        "submit",
        "configs/benchmarks/nemo_gym_weather.yaml",
        "--wait",
        f"run_root={runs}",
    ]
    with fake_policy(sys.executable, socket.gethostbyname(CONTROLLER)) as policy_url:
        env = {**benchmark_env(venv, policy_url), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        done = subprocess.run(
            ["runuser", "-u", slurm_user.name, "--", "env", *[f"{k}={v}" for k, v in env.items()], *argv]
            if slurm_user.as_root
            else argv,
            cwd=checkout,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^0\s+DONE\s", done.stdout, re.MULTILINE), done.stdout[-3000:]
    made = sorted(runs.iterdir())
    assert len(made) == 1, f"one submit made {made}"
    run = made[0]
    starts = [
        record
        for record in map(json.loads, (run / "shards/000/ledger.jsonl").read_text().splitlines())
        if record["kind"] == "start"
    ]
    # A link may be retried under load (a stack slow to start is retryable): every link counts.
    hosts = [start["host"] for start in starts]
    assert hosts and set(hosts) <= set(slurm_cluster.nodes), hosts  # on compute nodes, not the host
    merged = run / "output/merged/weather.jsonl"
    rows = [json.loads(line) for line in merged.read_text().splitlines() if line.strip()]
    assert len(rows) == 5 and {row["reward"] for row in rows} == {1.0}
    assert {row["_ng_environment_server"] for row in rows} == {"weather_legacy_env"}
