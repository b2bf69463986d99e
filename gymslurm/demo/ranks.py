"""The demo model server across nodes: a head rank that serves, worker ranks that each compute a part.

Multi-node vLLM and SGLang start one process per node (``--nnodes``, ``--node-rank``, the head's
address); the head serves the HTTP API and every generation needs every rank (tensor or pipeline
parallel), so a rank lost is the engine lost. The demo does the same on CPUs, so that placement
(launcher/server_placement.py) is proven with traffic that crosses nodes:

- a **worker** (``--node-rank R``, R >= 1) listens on its own node (``{host}:{port}``), answers
  ``POST /rank/part`` with its part of a completion (a BLAKE2b digest over the prompt and its rank),
  and registers with the head (``POST /ranks/register``), again until the head takes it;
- the **head** (rank 0 of ``--nodes N``) answers ``GET /health`` 503 until all N - 1 workers
  registered (a probe sees a server not ready yet, as vLLM's waits for its Ray workers), then asks
  every worker for its part of each completion and answers only with all of them; a worker that
  does not answer is the engine dead: the head exits (``die``), and the job's supervision restarts
  the instance, every rank again.

Each rank counts the parts it computed and says so when it stops, so a test reads from the logs
that the other node served. :class:`RankGroup` is the head's registry (pure apart from the
requests it sends); :func:`serve_worker` runs a worker.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import sys
from dataclasses import dataclass, field

import httpx
import orjson

from gymslurm.demo.http import start_server
from gymslurm.demo.messages import Reply, json_reply
from gymslurm.errors import ConfigError

PART_TIMEOUT_S = 10.0
REGISTER_EVERY_S = 0.5


def part_of(prompt: str, rank: int) -> str:
    """One rank's part of a completion: what it "computed" (deterministic, checkable by the head)."""
    return hashlib.blake2b(f"{rank}\x1f{prompt}".encode(), digest_size=4).hexdigest()


@dataclass
class RankGroup:
    """The head's view of its worker ranks: who registered, and the parts they computed."""

    nodes: int
    workers: dict[int, str] = field(default_factory=dict)  # rank -> http://host:port
    parts_asked: int = 0
    _client: httpx.AsyncClient | None = None

    @property
    def ready(self) -> bool:
        """Every worker rank registered."""
        return len(self.workers) == self.nodes - 1

    def waiting_for(self) -> list[int]:
        return [rank for rank in range(1, self.nodes) if rank not in self.workers]

    def register(self, body: bytes) -> Reply:
        """``POST /ranks/register {"rank": R, "url": U}``: a worker says where it listens."""
        try:
            found = orjson.loads(body)
            rank, url = int(found["rank"]), str(found["url"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return json_reply(400, {"error": 'register with {"rank": R, "url": "http://HOST:PORT"}'})
        if not 1 <= rank < self.nodes:
            return json_reply(400, {"error": f"rank {rank} is not a worker of {self.nodes} nodes"})
        self.workers[rank] = url.rstrip("/")
        return json_reply(200, {"registered": rank})

    async def parts(self, prompt: str) -> list[str] | None:
        """Every worker's part of one completion, in rank order; None when one does not answer."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=PART_TIMEOUT_S, trust_env=False)
        client, body = self._client, orjson.dumps({"prompt": prompt})

        async def one(rank: int) -> str | None:
            try:
                reply = await client.post(f"{self.workers[rank]}/rank/part", content=body)
                part = reply.json().get("part") if reply.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                return None
            return part if part == part_of(prompt, rank) else None

        found = await asyncio.gather(*(one(rank) for rank in sorted(self.workers)))
        self.parts_asked += 1
        return None if any(part is None for part in found) else [p for p in found if p is not None]


@dataclass
class WorkerApp:
    """A worker rank's HTTP side: its health and its part of each completion."""

    rank: int
    parts: int = 0

    def handle(self, method: bytes, target: bytes, body: bytes) -> Reply:
        path = target.split(b"?", 1)[0]
        if method == b"GET" and path == b"/health":
            return json_reply(200, {"status": "ok", "rank": self.rank})
        if method == b"POST" and path == b"/rank/part":
            try:
                prompt = str(orjson.loads(body)["prompt"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                return json_reply(400, {"error": 'ask with {"prompt": TEXT}'})
            self.parts += 1
            return json_reply(200, {"rank": self.rank, "part": part_of(prompt, self.rank)})
        return json_reply(404, {"error": f"rank {self.rank} serves /health and /rank/part only"})


async def serve_worker(rank: int, host: str, port: int, head: str) -> int:
    """Run worker ``rank`` on ``host:port``, registered with the head at ``head``, until TERM/INT."""
    app = WorkerApp(rank)
    try:
        server, connections = await start_server(app.handle, host, port)
    except OSError as error:
        raise ConfigError(f"rank {rank} cannot listen on {host}:{port}: {error.strerror}") from None
    url = f"http://{host}:{server.sockets[0].getsockname()[1]}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"gymslurm demo-model-server rank {rank} listening on {url}, joining {head}", flush=True)
    registering = asyncio.ensure_future(_register(head, rank, url, stop))
    await stop.wait()
    registering.cancel()
    server.close()
    for connection in list(connections):
        connection.close()
    print(f"gymslurm demo-model-server rank {rank}: stopped after {app.parts} parts", file=sys.stderr)
    return 0


async def _register(head: str, rank: int, url: str, stop: asyncio.Event) -> None:
    """Register with the head until it takes this rank (it may start later, or be restarted)."""
    body = orjson.dumps({"rank": rank, "url": url})
    async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
        while not stop.is_set():
            try:
                reply = await client.post(f"{head}/ranks/register", content=body)
                if reply.status_code == 200:
                    print(f"gymslurm demo-model-server rank {rank}: joined {head}", flush=True)
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(REGISTER_EVERY_S)
