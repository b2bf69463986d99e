"""How many requests per second the demo Environment Server answers, at concurrency 1, 32 and 128.

Why: in the end-to-end benchmarks the demo server shares two cores with a collector that must reach
several thousand rollouts per second, so the server must never be what limits them. This starts the
real server (``python -m gymslurm demo-server --port 0``) as a subprocess pinned to one core, drives
it from this process (pinned to the other core when there are two) with a minimal raw asyncio HTTP/1.1
client (keep-alive, one request in flight per connection), and prints for each concurrency:

- ``/run`` requests per second, on distinct rollouts of a generated dataset (validation, policy,
  grading, JSON encoding: the whole hot path);
- ``GET /health`` requests per second on the same server: the ceiling of the HTTP layer and this
  client on this machine, measured in the same run;
- the server's CPU use over the window and ``/run`` requests per server CPU-second: what one core
  of the server sustains. On two cores the client (as much Python as the server) usually saturates
  first, so wall-clock req/s understates the server; the per-core figure is the one to compare;
- the ratio ``/run`` / ``/health`` (how much of that ceiling the application costs) and the ratio
  per-core ``/run`` / TARGET (10,000 req/s on one core). A ratio under 1 prints ``BELOW TARGET``;
  at concurrency 1 every request pays a full event-loop wake-up, so that row is round-trip bound.

Usage: ``python bench/demo_server.py [--seconds 3] [--concurrency 1 32 128]``. The figures depend on
the machine; the ratios are what to compare across changes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gymslurm.demo.arith import dataset_rows  # noqa: E402

TARGET_RPS = 10_000.0
LISTENING = "gymslurm demo-server listening on http://"


def run_requests(count: int, host: str) -> list[bytes]:
    """``count`` distinct ``POST /run`` requests (one per rollout), as raw HTTP bytes."""
    requests = []
    for index, row in enumerate(dataset_rows(count, seed=1)):
        body = orjson.dumps(
            {"episode_id": {"rollout_id": f"arith-{index}", "attempt": 0}, "task": row},
        )
        head = f"POST /run HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        requests.append(head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return requests


class _Client(asyncio.Protocol):
    """One keep-alive connection sending requests one after the other until ``deadline``."""

    def __init__(
        self, requests: list[bytes], offset: int, deadline: float, done: asyncio.Future[None]
    ) -> None:
        self.requests, self.next, self.deadline, self.done = requests, offset, deadline, done
        self.buffer = bytearray()
        self.completed = 0
        self.errors = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        self.transport.write(self.requests[self.next % len(self.requests)])
        self.next += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end])
            start = head.find(b"Content-Length: ") + 16
            stop = head.find(b"\r\n", start)
            length = int(head[start : stop if stop >= 0 else len(head)])
            if len(self.buffer) < end + 4 + length:
                return
            if not head.startswith(b"HTTP/1.1 200"):
                self.errors += 1
            del self.buffer[: end + 4 + length]
            self.completed += 1
            if time.perf_counter() >= self.deadline:
                self._finish()
                return
            self._send()

    def _finish(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


class Server(NamedTuple):
    """The demo server under test: where it listens and its process (for its CPU time)."""

    host: str
    port: int
    process: psutil.Process


async def measure(
    server: Server, requests: list[bytes], concurrency: int, seconds: float
) -> tuple[float, float]:
    """Requests per second over ``seconds`` with ``concurrency`` connections (after a short warm-up),
    and the server's CPU seconds per wall second over the same window (1.0 = one core saturated)."""
    loop = asyncio.get_running_loop()
    for phase_seconds in (0.3, seconds):
        deadline = time.perf_counter() + phase_seconds
        clients = []
        for index in range(concurrency):
            done: asyncio.Future[None] = loop.create_future()
            offset = index * (len(requests) // concurrency)
            client = _Client(requests, offset, deadline, done)
            await loop.create_connection(lambda c=client: c, server.host, server.port)  # type: ignore[misc]
            clients.append(client)
        started, cpu_before = time.perf_counter(), _cpu_seconds(server.process)
        await asyncio.gather(*(client.done for client in clients))
        elapsed, cpu = time.perf_counter() - started, _cpu_seconds(server.process) - cpu_before
    errors = sum(client.errors for client in clients)
    if errors:
        raise SystemExit(f"{errors} replies were not HTTP 200: check the server's stderr")
    return sum(client.completed for client in clients) / elapsed, cpu / elapsed


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def start_server(core: int | None) -> tuple[subprocess.Popen[str], str, int]:
    """Start the demo server on a free loopback port, pinned to ``core``; return it, host and port."""
    command = [sys.executable, "-m", "gymslurm", "demo-server", "--host", "127.0.0.1", "--port", "0"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith(LISTENING):
        process.kill()
        raise SystemExit(f"the demo server did not start: first line {line!r}")
    if core is not None:
        os.sched_setaffinity(process.pid, {core})
    host, port = line.strip()[len(LISTENING) :].rsplit(":", 1)
    return process, host, int(port)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per figure")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32, 128])
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    server_core = cores[0] if len(cores) > 1 else None
    if server_core is not None:
        os.sched_setaffinity(0, set(cores[1:]))
    process, host, port = start_server(server_core)
    try:
        run = run_requests(10_000, host)
        health = [f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()]
        pinned = f"server pinned to core {server_core}" if server_core is not None else "not pinned"
        target = f"target {TARGET_RPS:,.0f} req/s per server core"
        print(f"demo server bench: {args.seconds:g} s per figure, {pinned}, {target}")
        server = Server(host, port, psutil.Process(process.pid))
        header = ("concurrency", "/run req/s", "server CPU", "/run per core-s", "/health req/s", "run/health")
        print("{:>11} {:>11} {:>10} {:>15} {:>13} {:>10}  run per core-s / target".format(*header))
        for concurrency in args.concurrency:
            run_rps, run_cpu = asyncio.run(measure(server, run, concurrency, args.seconds))
            health_rps, _ = asyncio.run(measure(server, health, concurrency, args.seconds))
            per_core = run_rps / max(run_cpu, 1e-9)
            verdict = "" if per_core >= TARGET_RPS else "  BELOW TARGET"
            if concurrency == 1:  # one request in flight: every request pays a full loop wake-up
                verdict += "  (round-trip bound: the server idles between requests)"
            figures = f"{concurrency:>11} {run_rps:>11,.0f} {run_cpu:>10.0%} {per_core:>15,.0f}"
            ratios = f"{health_rps:>13,.0f} {run_rps / health_rps:>10.2f}  {per_core / TARGET_RPS:.2f}"
            print(f"{figures} {ratios}{verdict}")
    finally:
        process.terminate()
        process.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
