"""gymslurm against NeMo Gym 0.7.0's own servers, unchanged (issue 11; docs/nemo-gym.md).

The stack (tests/compat/nemogym.py) is NeMo Gym's head server, the ``example_single_tool_call`` weather
resources server, ``simple_agent`` and ``openai_model`` in front of a loopback fake model, with three
Environment Servers in front: the typed ``single_agent_turn``, the ``legacy_agent`` relay (435 of the
438 environment servers NeMo Gym ships) and the ``single_agent_turn_legacy`` adapter. gymslurm's own
``collect`` and ``aggregate`` drive them as subprocesses; NeMo Gym's ``gym eval aggregate`` reads
gymslurm's outputs. Every answer of the fake model is right, so every rollout earns reward 1.0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.compat.nemogym import ADAPTER, RELAY, TYPED, Stack
from tests.e2e.helpers import collect_args, gymslurm

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

ROWS = 5


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def collect(stack: Stack, output: Path, server: str, *overrides: str) -> Any:
    """``gymslurm collect`` of NeMo Gym's example dataset through one of the stack's Environment Servers."""
    args = collect_args(stack.dataset, output, stack.urls[server], "+taskset=weather", *overrides)
    return gymslurm(*args, timeout=600)


def test_the_typed_environment_server_runs_every_task(nemo_gym_stack: Stack, tmp_path: Path) -> None:
    """single_agent_turn, driven unchanged with the typed protocol: 5/5 results, reward 1.0 each."""
    output = tmp_path / "typed.jsonl"
    done = collect(nemo_gym_stack, output, TYPED)
    assert done.returncode == 0, done.stderr
    results = rows(output)
    assert len(results) == ROWS and {row["reward"] for row in results} == {1.0}


def test_the_legacy_agent_relay_runs_every_task(nemo_gym_stack: Stack, tmp_path: Path) -> None:
    """legacy_agent (the relay of 435 shipped benchmarks): the flat row out, the verify response back, 5/5."""
    output = tmp_path / "relay.jsonl"
    done = collect(nemo_gym_stack, output, RELAY, "+environment_protocol=legacy_agent")
    assert done.returncode == 0, done.stderr
    results = rows(output)
    assert len(results) == ROWS and {row["reward"] for row in results} == {1.0}
    assert not (tmp_path / "relay_failures.jsonl").exists() or not rows(tmp_path / "relay_failures.jsonl")


def test_the_legacy_adapter_runs_every_task(nemo_gym_stack: Stack, tmp_path: Path) -> None:
    """single_agent_turn_legacy: the typed request answered flat is read as a legacy result, 5/5."""
    output = tmp_path / "adapter.jsonl"
    done = collect(nemo_gym_stack, output, ADAPTER, "+environment_protocol=legacy_reply")
    assert done.returncode == 0, done.stderr
    results = rows(output)
    assert len(results) == ROWS and {row["reward"] for row in results} == {1.0}
    assert {row["agent_ref"]["name"] for row in results} == {"weather_agent"}
