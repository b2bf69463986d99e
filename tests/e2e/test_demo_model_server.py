"""The demo model server as a process on loopback: capacity, vLLM-named /metrics, /v1/responses."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gymslurm.demo.model_server import LISTENING


@pytest.fixture
def model_server() -> Iterator[str]:
    """``gymslurm demo-model-server --slots 2 --latency-ms 300`` on a free port; yields its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gymslurm", "demo-model-server", "--port", "0", "--slots", "2",
         "--latency-ms", "300", "--accuracy", "1"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith(LISTENING), line
    try:
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(timeout=30)


def _gauge(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return float(next(li for li in text.splitlines() if li.startswith(name + "{")).rsplit(" ", 1)[1])


def test_requests_past_its_slots_queue_and_metrics_show_the_queue(model_server: str) -> None:
    """Six concurrent requests on 2 slots: 2 running and up to 4 waiting on /metrics, then all 200."""
    body = {"model": "demo-policy", "messages": [{"role": "user", "content": "What is 3 * 4?"}]}
    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(httpx.post, f"{model_server}/v1/chat/completions", json=body, timeout=30)
                   for _ in range(6)]  # fmt: skip
        deadline, seen = time.monotonic() + 20, (0.0, 0.0)
        while time.monotonic() < deadline and seen[1] == 0.0:
            seen = (_gauge(model_server, "vllm:num_requests_running"),
                    _gauge(model_server, "vllm:num_requests_waiting"))  # fmt: skip
        replies = [future.result() for future in futures]
    assert seen[0] == 2.0 and 1.0 <= seen[1] <= 4.0
    assert [reply.status_code for reply in replies] == [200] * 6
    assert _gauge(model_server, "vllm:request_success_total") == 6.0


def test_the_responses_endpoint_answers_over_http(model_server: str) -> None:
    """``POST /v1/responses`` answers in the Responses shape over real HTTP."""
    request = {"model": "demo-policy", "input": "What is 3 * 4?"}
    reply = httpx.post(f"{model_server}/v1/responses", json=request, timeout=30)
    assert reply.status_code == 200
    assert reply.json()["output"][0]["content"][0]["text"] == "12"
