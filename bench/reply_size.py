"""Benchmark: peak memory of ``gymslurm collect`` against hostile replies, at concurrency 64.

A loopback server (this process, asyncio) answers every ``POST /run`` according to a case:

- ``small``: a valid result of a few bytes (the baseline, measured in the same run);
- ``declared-100mb``: a result padded to 100 MB, content-length framed (over ``max_reply_bytes``);
- ``tiny-keys-60mb``: 60 MB of ``"kN":1`` entries (under ``max_reply_bytes``, ~700 MB once parsed);
- ``deep-nesting-60mb``: 60 MB of lists nested 500 deep (under orjson's depth limit), repeated: no
  ``,`` or ``:`` inside a group, ~2.4 GB once parsed (40 x the body);
- ``endless-chunked`` / ``endless-close``: a body that never ends, chunked or close-framed;
- ``slow-endless``: an endless body trickled 64 KiB every 20 ms.

``gymslurm collect`` runs ``--rollouts`` (default 64) of them with ``+concurrency`` as many, all in
flight at once, as a child process; its peak RSS (sampled every 10 ms) is printed per case with
what the collector did. The bound is the documented one: the baseline plus 1.5 x
``max_inflight_reply_bytes`` (the budget every reply in flight shares, bodies and parse estimate;
docs/security.md); a case above it fails the bench (exit 1). ``--checkout DIR`` runs another
checkout (e.g. an export of main, for a before/after figure).
Usage: ``python bench/reply_size.py [--rollouts 64] [--budget-mb 256] [--cases a,b] [--checkout DIR]``.
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
CASES = [
    "small",
    "declared-100mb",
    "tiny-keys-60mb",
    "deep-nesting-60mb",
    "endless-chunked",
    "endless-close",
    "slow-endless",
]
ENDLESS_CAP = 96 * 1024 * 1024  # an endless body stops here per connection (the bench ends by itself)
PIECE = b"x" * (1 << 20)
HUNDRED_MB = b', "pad": "' + b"x" * (100 << 20) + b'"'


def _result(request: dict, pad: bytes = b"") -> bytes:
    ids = json.dumps(request["episode_id"]).encode(), json.dumps(request["task"]["task_id"]).encode()
    return b'{"episode_id": %s, "task_id": %s, "result": {"reward": 1.0%s}}' % (*ids, pad)


async def _write_sliced(writer: asyncio.StreamWriter, data: bytes) -> None:
    view = memoryview(data)
    for start in range(0, len(data), len(PIECE)):
        writer.write(view[start : start + len(PIECE)])
        await writer.drain()


async def _answer(case: str, request: dict, writer: asyncio.StreamWriter, pads: dict[str, bytes]) -> bool:
    """Write the case's answer; False when the connection must close afterwards."""
    if "episode_id" not in request:  # not a /run request (the end-of-run metrics): an empty answer
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
        return True
    if case in pads:
        pad = pads[case]
        head, tail = _result(request).rsplit(b"}}", 1)[0], b"}}"
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (len(head) + len(pad) + len(tail)) + head
        )
        await _write_sliced(writer, pad)  # the shared pad is never copied per request
        writer.write(tail)
        await writer.drain()
        return True
    chunked = case == "endless-chunked"
    start = b'{"result": {"reward": 1.0, "pad": "'
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" if chunked else b"HTTP/1.0 200 OK\r\n\r\n"
    writer.write(head + (b"%x\r\n%s\r\n" % (len(start), start) if chunked else start))
    piece = PIECE[: 64 * 1024] if case == "slow-endless" else PIECE
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
    sent = 0
    while sent < ENDLESS_CAP:
        writer.write(chunk)
        await writer.drain()
        sent += len(piece)
        if case == "slow-endless":
            await asyncio.sleep(0.02)
    return False


def serve(case: list[str], ready: threading.Event, port: list[int]) -> None:
    """Answer every request as the current case (``case[0]``, changed between runs) says."""
    keys = (
        b', "junk": {'
        + b",".join(b'"k%d":1' % i for i in range(5_500_000))[: 60 << 20].rsplit(b",", 1)[0]
        + b"}"
    )
    nested = b', "junk": [' + b",".join([b"[" * 500 + b"]" * 500] * (60 << 10)) + b"]"
    pads = {"small": b"", "declared-100mb": HUNDRED_MB, "tiny-keys-60mb": keys, "deep-nesting-60mb": nested}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                request = json.loads(await reader.readexactly(length))
                if not await _answer(case[0], request, writer, pads):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, limit=1 << 20)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        await server.serve_forever()

    asyncio.run(main())


def _peak_rss_mb(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int]:
    """Run ``command``; its peak RSS sampled every 10 ms (not ``ru_maxrss``: a child forked from this
    process, which holds the padded replies, starts with this process's resident pages)."""
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process, peak = psutil.Process(child.pid), 0
    while child.poll() is None:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, process.memory_info().rss)
        time.sleep(0.01)
    return peak / 2**20, child.returncode


def run_case(args: argparse.Namespace, port: int, tmp: Path) -> tuple[float, str]:
    dataset = tmp / "tasks.jsonl"
    dataset.write_text(
        "".join(
            json.dumps({"task_id": {"taskset": "big", "task_id": str(i)}, "task_input": {"q": i}}) + "\n"
            for i in range(args.rollouts)
        )
    )
    output = tmp / "out" / "o.jsonl"
    command = [
        sys.executable,
        "-m",
        "gymslurm",
        "collect",
        f"+input_jsonl_fpath={dataset}",
        f"+output_jsonl_fpath={output}",
        f"+environment_server_url=http://127.0.0.1:{port}",
        "+environment_config={bench: reply_size}",
        "+progress=plain",
        "+summary=false",
        f"+concurrency={args.rollouts}",
        "+route_failures_to_sidecar=true",
    ]
    if args.budget_mb is not None:
        command.append(f"+max_inflight_reply_bytes={args.budget_mb << 20}")
    env = {**os.environ, "PYTHONPATH": str(args.checkout), "NEMO_GYM_MAX_ROLLOUT_ATTEMPTS": "1"}
    peak_mb, returncode = _peak_rss_mb(command, args.checkout, env)
    results = output.read_text().count("\n") if output.exists() else 0
    sidecar = output.with_name("o_failures.jsonl")
    lines = sidecar.read_text().splitlines() if sidecar.exists() else []
    too_large = sum("reply_too_large" in line for line in lines)
    saved_mb = output.stat().st_size / 2**20 if output.exists() else 0.0
    return peak_mb, f"exit {returncode}, {results} results ({saved_mb:.1f} MB), {too_large} reply_too_large"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--budget-mb", type=int, default=None, help="+max_inflight_reply_bytes in MiB")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--checkout", type=Path, default=ROOT)
    args = parser.parse_args()
    wanted = ["small", *(c for c in args.cases.split(",") if c != "small")]
    current, ready = ["small"], threading.Event()
    port: list[int] = []
    threading.Thread(target=serve, args=(current, ready, port), daemon=True).start()
    ready.wait()
    budget_mb = args.budget_mb if args.budget_mb is not None else 256
    peaks: dict[str, float] = {}
    for case in wanted:
        current[0] = case
        with tempfile.TemporaryDirectory() as tmp:
            peaks[case], what = run_case(args, port[0], Path(tmp))
        print(f"{case:>16}: peak RSS {peaks[case]:7.0f} MB; {what}", flush=True)
    bound = peaks["small"] + 1.5 * budget_mb
    print(
        f"checkout {args.checkout}, concurrency {args.rollouts}: bound = baseline {peaks['small']:.0f} MB "
        f"+ 1.5 x max_inflight_reply_bytes {budget_mb} MiB = {bound:.0f} MB"
    )
    worst = max(peaks.values())
    print(f"worst case {worst:.0f} MB = {worst / bound:.2f} x the bound")
    return 0 if worst <= bound else 1


if __name__ == "__main__":
    raise SystemExit(main())
