"""Benchmark: peak memory of ``gymslurm collect`` when a server answers ``/run`` with a huge reply.

A loopback server (this process, asyncio) answers every ``POST /run`` with a valid result padded to
``--reply-mb`` megabytes (default 100). ``gymslurm collect`` runs ``--rollouts`` (default 3) of them,
all in flight at once, as a child process; its peak RSS (sampled every 10 ms) is printed with
what the collector did (results saved or ``gymslurm:reply_too_large`` failures). The limit is the
peak RSS allowed (``--limit-mb``, default 200): above it the script exits 1. Run it from a checkout
(``--checkout DIR`` runs another one, e.g. an export of main, for a before/after figure).
Usage: ``python bench/reply_size.py [--reply-mb 100] [--rollouts 3] [--limit-mb 200] [--checkout DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def serve(reply_mb: int, ready: threading.Event, port: list[int]) -> None:
    """Answer every request with a result padded to ``reply_mb`` MB (content-length framed)."""
    pad = b"x" * (reply_mb * 1024 * 1024)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))  # fmt: skip
                request = json.loads(await reader.readexactly(length))
                ids = [
                    json.dumps(request["episode_id"]).encode(),
                    json.dumps(request["task"]["task_id"]).encode(),
                ]
                body = b'{"episode_id": %s, "task_id": %s, "result": {"reward": 1.0, "pad": "%s"}}' % (
                    *ids,
                    pad,
                )
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        await server.serve_forever()

    asyncio.run(main())


def _peak_rss_mb(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int]:
    """Run ``command``; its peak RSS sampled every 10 ms (not ``ru_maxrss``: a child forked from this
    process, which holds the padded reply, starts with this process's resident pages)."""
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process, peak = psutil.Process(child.pid), 0
    while child.poll() is None:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, process.memory_info().rss)
        time.sleep(0.01)
    return peak / 2**20, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reply-mb", type=int, default=100)
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--limit-mb", type=float, default=200.0)
    parser.add_argument("--checkout", type=Path, default=ROOT)
    args = parser.parse_args()
    ready, port = threading.Event(), []
    threading.Thread(target=serve, args=(args.reply_mb, ready, port), daemon=True).start()
    ready.wait()
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "tasks.jsonl"
        dataset.write_text("".join(
            json.dumps({"task_id": {"taskset": "big", "task_id": str(i)}, "task_input": {"q": i}}) + "\n"
            for i in range(args.rollouts)))  # fmt: skip
        output = Path(tmp) / "out" / "o.jsonl"
        command = [
            sys.executable, "-m", "gymslurm", "collect", f"+input_jsonl_fpath={dataset}",
            f"+output_jsonl_fpath={output}", f"+environment_server_url=http://127.0.0.1:{port[0]}",
            "+environment_config={bench: reply_size}", "+progress=plain", "+summary=false",
            f"+concurrency={args.rollouts}", "+route_failures_to_sidecar=true",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(args.checkout), "NEMO_GYM_MAX_ROLLOUT_ATTEMPTS": "1"}
        peak_mb, returncode = _peak_rss_mb(command, args.checkout, env)
        results = output.read_text().count("\n") if output.exists() else 0
        sidecar = output.with_name("o_failures.jsonl")
        lines = sidecar.read_text().splitlines() if sidecar.exists() else []
        too_large = sum("reply_too_large" in line for line in lines)
        saved_mb = output.stat().st_size / 2**20 if output.exists() else 0.0
    print(f"checkout {args.checkout}: {args.rollouts} replies of {args.reply_mb} MB, exit {returncode}")
    print(f"  results saved {results} ({saved_mb:.1f} MB), reply_too_large failures {too_large}")
    print(f"  peak RSS of collect: {peak_mb:.0f} MB (limit {args.limit_mb:.0f} MB)")
    return 0 if peak_mb <= args.limit_mb else 1


if __name__ == "__main__":
    raise SystemExit(main())
