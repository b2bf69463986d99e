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
from typing import Any

import pytest

from tests.compat.nemogym import HERE, NemoGymSetupError, ensure_nemo_gym, free_port, stop_session
from tests.compat.test_nemo_gym_shipped import GYMSLURM_STAMPS, _differences, _without_per_call
from tests.e2e.helpers import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

# The servers of configs/nemo_gym/weather_stack.yaml, each run in NeMo Gym's one venv.
SERVERS = (
    "responses_api_models/openai_model",
    "resources_servers/example_single_tool_call",
    "responses_api_agents/simple_agent",
    "environment_servers/legacy_agent",
)


def test_the_nemo_gym_benchmark_runs_from_a_fresh_checkout_in_one_command(tmp_path: Path) -> None:
    """A fresh clone, one `gymslurm submit ... --backend local --wait`: exit 0, 5/5 rows, reward 1.0."""
    try:
        venv = ensure_nemo_gym()
    except NemoGymSetupError as error:
        pytest.fail(f"NeMo Gym could not be installed: {error}", pytrace=False)
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(checkout)], check=True, timeout=120)
    port = free_port()
    fake = subprocess.Popen(
        [str(venv / "bin/python"), str(HERE / "fake_openai.py"), str(port)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        **os.environ,
        "NEMO_GYM_VENV": str(venv),
        "POLICY_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": str(checkout),
    }
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "gymslurm",
                "submit",
                "configs/benchmarks/nemo_gym_weather.yaml",
                "--backend",
                "local",
                "--wait",
                f"run_root={tmp_path / 'runs'}",
            ],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (merged,) = (tmp_path / "runs").glob("*/output/merged/weather.jsonl")
        rows = [json.loads(line) for line in merged.read_text().splitlines() if line.strip()]
        assert len(rows) == 5 and {row["reward"] for row in rows} == {1.0}
        assert {row["_ng_environment_server"] for row in rows} == {"weather_legacy_env"}
        # Judge-only re-grading as jobs, the grader named the NeMo Gym way (issue 21): the job starts
        # the stack again and finds the relay's resources server through the head server; nothing
        # ended in a judge failure, so the completed results are carried, all 5.
        source = merged.parents[2]
        regrade = subprocess.run(
            [
                sys.executable,
                "-m",
                "gymslurm",
                "submit",
                "--reverify",
                str(source),
                "--backend",
                "local",
                "--wait",
                f"--run-root={tmp_path / 'runs'}",
            ],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    finally:
        stop_session(fake.pid)
    assert regrade.returncode == 0, regrade.stdout[-3000:] + regrade.stderr[-3000:]
    (carried,) = (tmp_path / "runs").glob("*-reverify*/output/merged/weather.jsonl")
    again = [json.loads(line) for line in carried.read_text().splitlines() if line.strip()]
    assert sorted(r["_ng_rollout_id"] for r in again) == sorted(r["_ng_rollout_id"] for r in rows)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_gym_eval_run_line_that_starts_servers_gets_nemo_gyms_rows_under_gymslurm(tmp_path: Path) -> None:
    """One `gym eval run` line without --no-serve (configs, --split validation over the wheel's shipped
    weather rows, --output), run by NeMo Gym and by `gymslurm submit --backend local --wait gym eval run
    LINE`: gymslurm's split, prepared by NeMo Gym's code into gymslurm's own file, holds NeMo Gym's
    prepared rows (each with the agent NeMo Gym's collector resolves for it), and the rows are NeMo
    Gym's own, field by field but for the ids made anew on each reply (issue 34)."""
    try:
        venv = ensure_nemo_gym()
    except NemoGymSetupError as error:
        pytest.fail(f"NeMo Gym could not be installed: {error}", pytrace=False)
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
    ]  # fmt: skip
    port = free_port()
    fake = subprocess.Popen(
        [str(venv / "bin/python"), str(HERE / "fake_openai.py"), str(port)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        **os.environ,
        "NEMO_GYM_VENV": str(venv),
        "POLICY_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    theirs, ours = tmp_path / "nemo_gym", tmp_path / "gymslurm"
    theirs.mkdir(), ours.mkdir()
    log = (tmp_path / "gym-eval-run.log").open("w")
    try:  # both at once (each its own stack and Ray, on free ports): the test's wall time is the longer
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
    finally:
        stop_session(fake.pid)
        log.close()
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
    assert sorted(gymslurm) == sorted(nemo_gym) and len(nemo_gym) == 5
    for index, row in nemo_gym.items():
        mine = gymslurm[index]
        assert set(mine) - set(row) <= GYMSLURM_STAMPS, sorted(set(mine) - set(row))
        differ = _differences(_without_per_call(row), _without_per_call({k: mine[k] for k in row}))
        assert not differ, (index, differ[:5])
