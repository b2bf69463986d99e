"""The demo model server across nodes (demo/ranks.py), as processes on loopback: the head serves only
once every worker rank joined, every completion takes every rank's part, and a rank lost is the
engine lost (the head exits, as vLLM's does)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gymslurm.demo.http import DIE_EXIT_CODE
from gymslurm.demo.model_server import LISTENING
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


QUESTION = {"messages": [{"role": "user", "content": "What is 2 + 3?"}]}


def _rank(rank: int, port: int, head_port: int, log: Path) -> subprocess.Popen[str]:
    extra = [] if rank == 0 else ["--head-node", "127.0.0.1", "--head-port", str(head_port)]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gymslurm",
            "demo-model-server",
            "--port",
            str(port),
            "--accuracy",
            "1",
            "--nodes",
            "2",
            "--node-rank",
            str(rank),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )


def _health(url: str) -> int:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code
    except httpx.HTTPError:
        return 0


def test_a_two_rank_model_serves_with_both_and_dies_without_its_worker(tmp_path: Path) -> None:
    """Head alone: /health 503 naming rank 1; worker joined: 200 and answers, the worker counting its
    parts; worker gone: the next completion ends the head with the engine-dead status."""
    head_port, worker_port = free_port(), free_port()
    head = _rank(0, head_port, head_port, tmp_path / "head.log")
    worker = None
    try:
        assert head.stdout is not None and head.stdout.readline().startswith(LISTENING)
        url = f"http://127.0.0.1:{head_port}"
        waiting = httpx.get(f"{url}/health", timeout=5)
        assert waiting.status_code == 503 and "[1]" in waiting.text
        worker = _rank(1, worker_port, head_port, tmp_path / "worker.log")
        wait_until(lambda: _health(url) == 200, 60, "the head to see its worker rank join", every_s=0.2)
        for _ in range(3):
            reply = httpx.post(f"{url}/v1/chat/completions", json=QUESTION, timeout=30)
            assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "5"
        worker.terminate()
        worker.wait(timeout=30)
        assert "stopped after 3 parts" in (tmp_path / "worker.log").read_text()
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"{url}/v1/chat/completions", json=QUESTION, timeout=30)
        assert head.wait(timeout=30) == DIE_EXIT_CODE
        assert "a worker rank did not answer" in (tmp_path / "head.log").read_text()
    finally:
        for process in (head, worker):
            if process is not None and process.poll() is None:
                process.kill()
