"""NeMo Gym's own ``gym eval`` commands against a started stack, and the setup of the tests that run
the repository's NeMo Gym benchmark (configs/nemo_gym), spelled once for the compat modules.

nemogym.py starts and stops the stack (and is at the module size limit); what the tests ask of it
lives here, so ``gym eval aggregate``'s arguments and the file it writes are read the same way in each,
and the benchmark tests (local, Slurm, a ``gym eval run`` line) get NeMo Gym and the fake policy model
the same way.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.compat.nemogym import HEAD_PORT, HERE, NemoGymSetupError, Stack, ensure_nemo_gym, stop_session

# NeMo Gym's way to reach a running head server (``+head_server.host/port``) from ``gym eval``.
HEAD_SERVER = ["+head_server.host=127.0.0.1", f"+head_server.port={HEAD_PORT}"]


def gym_aggregate(stack: Stack, input_glob: Path, output: Path) -> list[dict[str, Any]]:
    """NeMo Gym's ``gym eval aggregate`` on ``input_glob``: its ``ng_aggregate_metrics.json`` entries."""
    done = stack.gym_command(
        "eval", "aggregate", *HEAD_SERVER, f"+input_glob={input_glob}", f"+output_jsonl_fpath={output}"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    entries: list[dict[str, Any]] = json.loads((output.parent / "ng_aggregate_metrics.json").read_text())
    return entries


def nemo_gym_or_fail() -> Path:
    """NeMo Gym's venv (installed on first use); the test fails, saying why, when it cannot be had."""
    try:
        return ensure_nemo_gym()
    except NemoGymSetupError as error:
        pytest.fail(f"NeMo Gym could not be installed: {error}", pytrace=False)


@contextmanager
def fake_policy(python: Path | str, host: str = "127.0.0.1") -> Iterator[str]:
    """The suite's fake OpenAI endpoint (fake_openai.py, run by ``python``) on a free port of ``host``,
    in a session of its own: its base URL while the block runs; every process of it stopped after."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port = int(sock.getsockname()[1])
    fake = subprocess.Popen(
        [str(python), str(HERE / "fake_openai.py"), str(port), host],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        stop_session(fake.pid)


def benchmark_env(venv: Path, policy_url: str) -> dict[str, str]:
    """What configs/nemo_gym's stack takes from its environment: NeMo Gym's venv and the policy
    model's address; Ray's usage report off (no network beyond the machine)."""
    return {"NEMO_GYM_VENV": str(venv), "POLICY_BASE_URL": policy_url, "RAY_USAGE_STATS_ENABLED": "0"}
