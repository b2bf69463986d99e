"""Which HTTP client setup should the collector use to reach an Environment Server? Measure it.

A benchmark, not a test: it prints figures against a limit measured in the same run. It starts a
minimal raw-asyncio HTTP/1.1 keep-alive server in a child process (so client and server each get a
core of the two), which answers ``POST /run`` the way an Environment Server does (parses the JSON
body, echoes ``episode_id`` and ``task_id``, adds a result), and then drives it at 1, 32 and 128
requests in flight with:

- ``raw``: a minimal asyncio HTTP/1.1 client, one keep-alive connection per slot (the physical limit
  of this machine for a Python client: no HTTP library at all);
- ``httpx-shared``: one ``httpx.AsyncClient`` with default limits (what most code does);
- ``httpx-shared-tuned``: one ``httpx.AsyncClient`` whose pool allows ``concurrency`` keep-alive
  connections;
- ``httpx-per-worker``: one ``httpx.AsyncClient`` per concurrency slot, each with one keep-alive
  connection (what :class:`gymslurm.dispatch.EnvironmentClient` does);
- ``dispatch``: ``EnvironmentClient.run`` itself (per-worker clients plus JSON encoding and the reply's
  classification), to see what the collector's own transport costs end to end.

When ``gymslurm/demo/`` exists (here, or in the checkout given by ``--demo-root``), the same clients
are also measured against ``python -m gymslurm demo-server --port 0``.

Run: ``python bench/transport.py [--seconds 1.5] [--rounds 3] [--levels 1,32,128] [--demo-root PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# ---------------------------------------------------------------------------------------------------
# The raw server


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = orjson.loads(await reader.readexactly(length))
            reply = orjson.dumps(
                {
                    "episode_id": body["episode_id"],
                    "task_id": body["task"]["task_id"],
                    "result": {"reward": 1.0, "response": {"output_text": "42"}},
                }
            )
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (len(reply), reply)
            )
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def _server_process(port_queue: mp.Queue) -> None:
    async def main() -> None:
        server = await asyncio.start_server(_serve_connection, "127.0.0.1", 0, backlog=1024)
        port_queue.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------------
# Clients: each is a factory (url, concurrency) -> (one request per slot, close)

Request = Callable[[int, int], Awaitable[None]]


def _payload(slot: int, n: int) -> dict:
    return {
        "episode_id": {"rollout_id": f"bench-{slot}-{n}", "attempt": 0},
        "task": {
            "task_id": {"taskset": "bench", "task_id": str(n)},
            "task_input": {"a": 6, "b": 7, "op": "*"},
        },
    }


async def _raw_client(url: str, concurrency: int) -> tuple[Request, Callable[[], Awaitable[None]]]:
    host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()  # type: ignore[union-attr]
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(concurrency)]

    async def request(slot: int, n: int) -> None:
        reader, writer = conns[slot]
        body = orjson.dumps(_payload(slot, n))
        writer.write(
            b"POST /run HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (host.encode(), len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
        orjson.loads(await reader.readexactly(length))

    async def close() -> None:
        for _, writer in conns:
            writer.close()

    return request, close


async def _httpx_shared(
    url: str, concurrency: int, tuned: bool
) -> tuple[Request, Callable[[], Awaitable[None]]]:
    limits = (
        httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        if tuned
        else httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx.AsyncClient's default
    )
    client = httpx.AsyncClient(limits=limits, timeout=30.0)

    async def request(slot: int, n: int) -> None:
        reply = await client.post(url + "/run", content=orjson.dumps(_payload(slot, n)))
        orjson.loads(reply.content)

    return request, client.aclose


async def _httpx_per_worker(url: str, concurrency: int) -> tuple[Request, Callable[[], Awaitable[None]]]:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [httpx.AsyncClient(limits=limits, timeout=30.0) for _ in range(concurrency)]

    async def request(slot: int, n: int) -> None:
        reply = await clients[slot].post(url + "/run", content=orjson.dumps(_payload(slot, n)))
        orjson.loads(reply.content)

    async def close() -> None:
        for client in clients:
            await client.aclose()

    return request, close


async def _dispatch_client(url: str, concurrency: int) -> tuple[Request, Callable[[], Awaitable[None]]]:
    from gymslurm.dispatch import Completed, EnvironmentClient
    from gymslurm.records import EpisodeId

    client = EnvironmentClient(concurrency=concurrency, route_failures=True, run_id="run-bench")

    async def request(slot: int, n: int) -> None:
        payload = _payload(slot, n)
        episode = EpisodeId(rollout_id=payload["episode_id"]["rollout_id"], attempt=0)
        outcome = await client.run(url, episode, payload["task"])
        assert isinstance(outcome, Completed), outcome

    return request, client.aclose


CLIENTS: dict[str, Callable[[str, int], Awaitable[tuple[Request, Callable[[], Awaitable[None]]]]]] = {
    "raw": _raw_client,
    "httpx-shared": lambda url, c: _httpx_shared(url, c, tuned=False),
    "httpx-shared-tuned": lambda url, c: _httpx_shared(url, c, tuned=True),
    "httpx-per-worker": _httpx_per_worker,
    "dispatch": _dispatch_client,
}


Figures = tuple[float, float, float, float]


async def _measure(name: str, url: str, concurrency: int, seconds: float) -> Figures:
    """(req/s, p50 ms, p99 ms, client CPU µs per request) after a 0.3 s warm-up."""
    request, close = await CLIENTS[name](url, concurrency)
    latencies: list[float] = []
    deadline = time.perf_counter() + 0.3  # warm-up: open the connections, then measure
    counting = False
    cpu_start = 0.0

    async def worker(slot: int) -> None:
        n = 0
        while time.perf_counter() < deadline or not counting:
            start = time.perf_counter()
            await request(slot, n)
            if counting:
                latencies.append(time.perf_counter() - start)
            n += 1

    async def clock() -> None:
        nonlocal deadline, counting, cpu_start
        await asyncio.sleep(0.3)
        counting, cpu_start = True, time.process_time()
        deadline = time.perf_counter() + seconds

    started = time.perf_counter()
    await asyncio.gather(clock(), *(worker(slot) for slot in range(concurrency)))
    elapsed = time.perf_counter() - started - 0.3
    cpu_us = (time.process_time() - cpu_start) / len(latencies) * 1e6
    await close()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return len(latencies) / elapsed, statistics.median(latencies) * 1e3, p99 * 1e3, cpu_us


ROW = "{:<20} {:>9} {:>9} {:>8} {:>8} {:>7} {:>10}"


def _run_suite(url: str, levels: list[int], seconds: float, rounds: int, title: str) -> None:
    """Measure every client at every level; rounds interleave the clients, the best round counts.

    The machine may be shared: interleaving and taking each client's best round keeps a burst of
    foreign load from landing on one client only. The client's CPU time per request (the server runs
    in another process) is the figure least disturbed by foreign load.
    """
    print(f"\n## {title} ({url}), best of {rounds} interleaved rounds of {seconds} s")
    print(ROW.format("client", "in flight", "req/s", "p50 ms", "p99 ms", "vs raw", "CPU µs/req"))
    for concurrency in levels:
        best: dict[str, Figures] = {}
        for _ in range(rounds):
            for name in CLIENTS:
                figures = asyncio.run(_measure(name, url, concurrency, seconds))
                if figures[0] > best.get(name, (0.0, 0.0, 0.0, 0.0))[0]:
                    best[name] = figures
        for name, (rate, p50, p99, cpu) in best.items():
            ratio = rate / best["raw"][0]
            cells = (f"{rate:.0f}", f"{p50:.2f}", f"{p99:.2f}", f"{ratio:.2f}", f"{cpu:.0f}")
            print(ROW.format(name, concurrency, *cells), flush=True)


def _start_demo_server(root: Path) -> tuple[subprocess.Popen[str], str] | None:
    if not (root / "gymslurm" / "demo" / "server.py").is_file():
        return None
    proc = subprocess.Popen(
        [sys.executable, "-m", "gymslurm", "demo-server", "--port", "0"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if found:
            return proc, f"http://127.0.0.1:{found.group(1)}"
        if not line and proc.poll() is not None:
            break
    proc.kill()
    print("demo server did not announce its address; skipping it")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="measured time per client, level, round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each client's best counts")
    parser.add_argument("--levels", default="1,32,128", help="requests in flight, comma-separated")
    parser.add_argument("--demo-root", type=Path, default=ROOT, help="checkout whose demo server to run")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="which clients, comma-separated")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    for name in set(CLIENTS) - set(args.clients.split(",")) - {"raw"}:
        del CLIENTS[name]

    queue: mp.Queue = mp.Queue()
    server = mp.Process(target=_server_process, args=(queue,), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{queue.get(timeout=10)}"
        _run_suite(url, levels, args.seconds, args.rounds, "raw asyncio server")
    finally:
        server.terminate()
        server.join()

    demo = _start_demo_server(args.demo_root)
    if demo is not None:
        proc, url = demo
        try:
            _run_suite(url, levels, args.seconds, args.rounds, "gymslurm demo-server")
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
