"""The demo model server as a process on loopback: capacity, vLLM-named /metrics, /v1/responses."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gymslurm.demo.model import DEFAULT_MODEL
from gymslurm.demo.model_server import LISTENING


@pytest.fixture
def model_server() -> Iterator[str]:
    """``gymslurm demo-model-server --slots 2 --latency-ms 1000`` on a free port; yields its URL."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gymslurm",
            "demo-model-server",
            "--port",
            "0",
            "--slots",
            "2",
            "--latency-ms",
            "1000",
            "--accuracy",
            "1",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith(LISTENING), line
    try:
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(timeout=30)


def _gauges(url: str) -> dict[str, float]:
    """Every metric of one ``GET /metrics`` (one read: the gauges of one instant)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {li.split("{")[0]: float(li.rsplit(" ", 1)[1]) for li in text.splitlines() if "{" in li}


def test_requests_past_its_slots_queue_and_metrics_show_the_queue(model_server: str) -> None:
    """Six concurrent requests on 2 slots: never more than 2 running, some waiting, then all 200."""
    body = {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "What is 3 * 4?"}]}
    samples: list[dict[str, float]] = []
    with ThreadPoolExecutor(6) as pool:
        futures = [
            pool.submit(httpx.post, f"{model_server}/v1/chat/completions", json=body, timeout=60)
            for _ in range(6)
        ]
        while not all(future.done() for future in futures):
            samples.append(_gauges(model_server))
        replies = [future.result() for future in futures]
    running = [s["vllm:num_requests_running"] for s in samples]
    waiting = [s["vllm:num_requests_waiting"] for s in samples]
    assert max(running) == 2.0, "two slots: at most two served at once, and both used"
    assert max(waiting) >= 1.0, "the requests past the slots waited in the queue"
    assert [reply.status_code for reply in replies] == [200] * 6
    assert _gauges(model_server)["vllm:request_success_total"] == 6.0


def test_the_responses_endpoint_answers_over_http(model_server: str) -> None:
    """``POST /v1/responses`` answers in the Responses shape over real HTTP."""
    request = {"model": DEFAULT_MODEL, "input": "What is 3 * 4?"}
    reply = httpx.post(f"{model_server}/v1/responses", json=request, timeout=30)
    assert reply.status_code == 200
    assert reply.json()["output"][0]["content"][0]["text"] == "12"
