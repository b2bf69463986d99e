"""The NeMo Gym benchmark from a fresh checkout, in one command, on the local backend (issue 21).

``gymslurm submit configs/benchmarks/nemo_gym_weather.yaml --backend local --wait`` in a fresh clone
of the repository: the job's server command (configs/nemo_gym/start_stack.sh) prepares what NeMo Gym's
``gym env start`` needs (the per-server venv links; NeMo Gym's venv from ``$NEMO_GYM_VENV``, the
compat suite's cached one here), every port is chosen for the job (the head server's by gymslurm,
the others by NeMo Gym), and the collector finds the relay by its name. The policy model is the
compat suite's loopback fake (tests/compat/fake_openai.py) behind NeMo Gym's own ``openai_model``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.gym_eval import benchmark_env, fake_policy, nemo_gym_or_fail
from tests.e2e.helpers import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]


def test_the_nemo_gym_benchmark_runs_from_a_fresh_checkout_in_one_command(tmp_path: Path) -> None:
    """A fresh clone, one `gymslurm submit ... --backend local --wait`: exit 0, 5/5 rows, reward 1.0."""
    venv = nemo_gym_or_fail()
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(checkout)], check=True, timeout=120)
    with fake_policy(venv / "bin/python") as policy_url:
        env = {**os.environ, **benchmark_env(venv, policy_url), "PYTHONPATH": str(checkout)}

        def submit(*args: str) -> subprocess.CompletedProcess[str]:
            """``gymslurm submit ARGS --backend local --wait`` (run root last) in the fresh checkout."""
            *what, run_root = args
            argv = [sys.executable, "-m", "gymslurm", "submit", *what]
            argv += ["--backend", "local", "--wait", run_root]
            return subprocess.run(
                argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=1500, check=False
            )

        done = submit("configs/benchmarks/nemo_gym_weather.yaml", f"run_root={tmp_path / 'runs'}")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (merged,) = (tmp_path / "runs").glob("*/output/merged/weather.jsonl")
        rows = [json.loads(line) for line in merged.read_text().splitlines() if line.strip()]
        assert len(rows) == 5 and {row["reward"] for row in rows} == {1.0}
        assert {row["_ng_environment_server"] for row in rows} == {"weather_legacy_env"}
        # Judge-only re-grading as jobs, the grader named the NeMo Gym way (issue 21): the job starts
        # the stack again and finds the relay's resources server through the head server; nothing
        # ended in a judge failure, so the completed results are carried, all 5.
        source = merged.parents[2]
        regrade = submit("--reverify", str(source), f"--run-root={tmp_path / 'runs'}")
    assert regrade.returncode == 0, regrade.stdout[-3000:] + regrade.stderr[-3000:]
    (carried,) = (tmp_path / "runs").glob("*-reverify*/output/merged/weather.jsonl")
    again = [json.loads(line) for line in carried.read_text().splitlines() if line.strip()]
    assert sorted(r["_ng_rollout_id"] for r in again) == sorted(r["_ng_rollout_id"] for r in rows)
