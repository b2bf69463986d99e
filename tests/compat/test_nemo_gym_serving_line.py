"""A ``gym eval run`` line that starts NeMo Gym's servers, run by NeMo Gym and by gymslurm (issue 34).

The line, unchanged for both: the repository's weather stack config and the wheel's shipped weather rows
declared as a ``validation`` split (tests/compat/weather_validation.yaml), ``--split validation
--output results/weather.jsonl``. NeMo Gym's ``gym eval run`` prepares the split, starts the stack and
collects; ``gymslurm submit --backend local --wait gym eval run LINE`` prepares the split with NeMo
Gym's code at submit and starts the stack with NeMo Gym's ``gym env start`` in its job.

Beside the 11000 stack (xdist group ``nemogym``, tests/conftest.py): neither stack can take port 11000
(the head servers are on free ports, and ``+port_range_low=11001`` keeps NeMo Gym's choice of the
others' off it, as the shipped stack does), and the run's identity must hold the configuration of the
job's own stack (its four servers), so a collector that lost its head server's port and asked the
11000 stack (the same server names) would fail here rather than pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.compat.gym_eval import benchmark_env, fake_policy, nemo_gym_or_fail
from tests.compat.nemogym import HEAD_PORT, HERE, free_port, stop_session
from tests.compat.test_nemo_gym_shipped import _assert_alike
from tests.e2e.helpers import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

# The servers of configs/nemo_gym/weather_stack.yaml, each run in NeMo Gym's one venv.
SERVERS = (
    "responses_api_models/openai_model",
    "resources_servers/example_single_tool_call",
    "responses_api_agents/simple_agent",
    "environment_servers/legacy_agent",
)
SERVER_TYPES = {"responses_api_models", "resources_servers", "responses_api_agents", "environment_servers"}


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_gym_eval_run_line_that_starts_servers_gets_nemo_gyms_rows_under_gymslurm(tmp_path: Path) -> None:
    """One `gym eval run` line without --no-serve (configs, --split validation over the wheel's shipped
    weather rows, --output), run by NeMo Gym and by `gymslurm submit --backend local --wait gym eval run
    LINE`: gymslurm's split, prepared by NeMo Gym's code into gymslurm's own file, holds NeMo Gym's
    prepared rows (each with the agent NeMo Gym's collector resolves for it), and the rows are NeMo
    Gym's own, field by field but for the ids made anew on each reply (issue 34)."""
    venv = nemo_gym_or_fail()
    venvs = tmp_path / "venvs"
    for server in SERVERS:  # gym env start +skip_venv_if_present=true: each server's venv is NeMo Gym's
        (venvs / server).mkdir(parents=True)
        (venvs / server / ".venv").symlink_to(venv)
    line = [
        "--config", str(REPO_ROOT / "configs/nemo_gym/weather_stack.yaml"),
        "--config", str(HERE / "weather_validation.yaml"),
        "--split", "validation", "--output", "results/weather.jsonl",
        "+head_server.host=127.0.0.1", f"+head_server.port={free_port()}",
        f"+uv_venv_dir={venvs}", "+skip_venv_if_present=true",
        f"+port_range_low={HEAD_PORT + 1}",  # NeMo Gym picks the servers' ports above 11000's stack
    ]  # fmt: skip
    theirs, ours = tmp_path / "nemo_gym", tmp_path / "gymslurm"
    theirs.mkdir(), ours.mkdir()
    with fake_policy(venv / "bin/python") as policy_url, (tmp_path / "gym-eval-run.log").open("w") as log:
        env = {**os.environ, **benchmark_env(venv, policy_url)}
        # both at once (each its own stack and Ray, on free ports): the test's wall time is the longer
        gym = subprocess.Popen(
            [str(venv / "bin/gym"), "eval", "run", *line],
            cwd=theirs,
            env=env,
            start_new_session=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            argv = [sys.executable, "-m", "gymslurm", "submit", "--backend", "local", "--wait"]
            argv += [f"run_root={ours / 'runs'}", "gym", "eval", "run", *line]
            done = subprocess.run(
                argv, cwd=ours, env=env, capture_output=True, text=True, timeout=900, check=False
            )
            gym.wait(timeout=600)
        finally:
            stop_session(gym.pid)  # Ray's helpers outlive gym eval run otherwise
    assert gym.returncode == 0, (tmp_path / "gym-eval-run.log").read_text()[-4000:]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not (ours / "results").exists()  # nothing under NeMo Gym's names: the rows are in the run
    (prepared,) = (ours / "runs" / "nemo_gym_prepared").glob("weather-*.jsonl")
    nemo_gyms = _rows(theirs / "results/weather/preprocessed_datasets/validation.jsonl")
    assert _rows(prepared) == [{**row, "agent_ref": {"name": "weather_agent"}} for row in nemo_gyms]
    (merged,) = (ours / "runs").glob("*/output/merged/weather.jsonl")
    nemo_gym = {
        (r["_ng_task_index"], r["_ng_rollout_index"]): r for r in _rows(theirs / "results/weather.jsonl")
    }
    gymslurm = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in _rows(merged)}
    identities = list((ours / "runs").glob("*/**/weather_identity.json"))
    for identity in identities:  # the configuration the collector read: its own job's stack's
        config = json.loads(identity.read_text())["environment_config"]
        servers = {
            name for name, value in config.items() if isinstance(value, dict) and SERVER_TYPES & set(value)
        }
        assert servers == {"policy_model", "weather", "weather_agent", "weather_legacy_env"}, servers
    assert identities
    assert sorted(gymslurm) == sorted(nemo_gym) and len(nemo_gym) == 5
    for index, row in nemo_gym.items():
        _assert_alike(index, row, gymslurm[index], set())
