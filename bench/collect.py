"""Benchmark of `gymslurm collect` against the zero-latency demo server, limits measured in the same run.

Prints, for N rollouts (default 100,000):

1. the rate of a minimal raw HTTP/1.1 keep-alive client (asyncio streams, same concurrency) sending
   the same ``POST /run`` requests to the same demo server — the ceiling on this machine right now;
2. the collector's rate (its dispatch loop, from its own last progress line) and whole-process wall
   time for the fresh run, with every durable reservation and saved outcome;
3. the wall time of a whole ``gymslurm collect +resume_from_cache=true`` process on the finished run;
4. the same after removing the second half of the results file (those rollouts are re-dispatched).

Targets (issue 3): collector >= 60 % of the raw client and >= 4,000 rollouts/s; resume of the finished
run < 1.5 s. Run from the repository root:  python bench/collect.py [--n 100000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LISTENING = "gymslurm demo-server listening on "


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "gymslurm", "demo-server", "--port", "0", "--accuracy", "1.0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode().strip()
    if not line.startswith(LISTENING):
        process.kill()
        raise SystemExit(f"demo server did not start: {line!r}")
    return process, line[len(LISTENING) :]


def write_dataset(path: Path, n: int) -> None:
    subprocess.run(
        [sys.executable, "-m", "gymslurm", "demo-server", "--write-dataset", str(path), "--n", str(n)],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )


async def _raw_worker(host: str, port: int, bodies: list[bytes], start: int, step: int) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    done = 0
    for index in range(start, len(bodies), step):
        body = bodies[index]
        writer.write(
            b"POST /run HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port, len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
        await reader.readexactly(length)
        done += 1
    writer.close()
    return done


def raw_client_rate(url: str, dataset: Path, n: int, concurrency: int) -> float:
    """Requests per second of a minimal keep-alive client, same requests, same concurrency."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    bodies = []
    for number, line in enumerate(dataset.read_text().splitlines()[:n]):
        task = json.loads(line)
        episode = {"rollout_id": f"raw-{number}", "attempt": 0}
        bodies.append(json.dumps({"episode_id": episode, "task": task}, separators=(",", ":")).encode())

    async def main() -> int:
        workers = [_raw_worker(host, int(port), bodies, i, concurrency) for i in range(concurrency)]
        return sum(await asyncio.gather(*workers))

    started = time.perf_counter()
    sent = asyncio.run(main())
    return sent / (time.perf_counter() - started)


def run_collect(dataset: Path, output: Path, url: str, concurrency: int, resume: bool) -> tuple[float, str]:
    command = [
        sys.executable, "-m", "gymslurm", "collect", f"+input_jsonl_fpath={dataset}",
        f"+output_jsonl_fpath={output}", f"+environment_server_url={url}", f"+concurrency={concurrency}",
        "+progress=plain", "+progress_interval_s=3600", "+summary=false",
        f"+resume_from_cache={str(resume).lower()}",
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"collect failed ({done.returncode}):\n{done.stderr}")
    return wall, done.stderr


def loop_rate(stderr: str) -> float:
    """The rate the collector reported on its last progress line (outcomes of this invocation / s)."""
    rates = re.findall(r"rate=([\d.]+)/s", stderr)
    return float(rates[-1]) if rates else float("nan")


def drop_second_half(output: Path) -> int:
    lines = output.read_bytes().splitlines(keepends=True)
    keep = len(lines) // 2
    output.write_bytes(b"".join(lines[:keep]))
    return len(lines) - keep


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    server, url = start_server()
    try:
        with tempfile.TemporaryDirectory(prefix="gymslurm-bench-") as tmp:
            folder = Path(tmp)
            dataset = folder / "arith.jsonl"
            write_dataset(dataset, args.n)
            output = folder / "run" / "out.jsonl"
            raw = raw_client_rate(url, dataset, args.n, args.concurrency)
            print(
                f"raw HTTP client:             {raw:10,.0f} requests/s "
                f"({args.n:,} requests, {args.concurrency} in flight)"
            )
            wall, stderr = run_collect(dataset, output, url, args.concurrency, resume=False)
            rate = loop_rate(stderr)
            print(
                f"collector (dispatch loop):   {rate:10,.0f} rollouts/s   whole process {wall:.2f} s "
                f"({args.n / wall:,.0f} rollouts/s incl. start-up)"
            )
            print(f"  ratio collector / raw:     {rate / raw:10.2f}   (target >= 0.60)")
            print(f"  ratio collector / 4,000/s: {rate / 4000:10.2f}   (target >= 1.00)")
            resume_wall, _ = run_collect(dataset, output, url, args.concurrency, resume=True)
            print(
                f"resume, finished run:        {resume_wall:10.2f} s whole process (target < 1.5 s; "
                f"ratio {resume_wall / 1.5:.2f} of the limit)"
            )
            removed = drop_second_half(output)
            half_wall, half_err = run_collect(dataset, output, url, args.concurrency, resume=True)
            print(
                f"resume, {removed:,} results removed: {half_wall:6.2f} s whole process "
                f"(re-dispatched at {loop_rate(half_err):,.0f} rollouts/s)"
            )
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
