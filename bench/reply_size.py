"""Benchmark: peak memory of ``gymslurm collect`` against hostile replies, at concurrency 64.

A loopback server (this process, asyncio) answers every ``POST /run`` according to a case:

- ``small``: a valid result of a few bytes (the baseline, measured in the same run);
- ``declared-100mb``: a result padded to 100 MB, content-length framed (over ``max_reply_bytes``);
- ``tiny-keys-60mb``: 60 MB of ``"kN":1`` entries (under ``max_reply_bytes``, ~700 MB once parsed);
- ``deep-nesting-60mb``: 60 MB of lists nested 500 deep (under orjson's depth limit), repeated: no
  ``,`` or ``:`` inside a group, ~2.4 GB once parsed (40 x the body);
- ``endless-chunked`` / ``endless-close``: a body that never ends, chunked or close-framed;
- ``slow-endless``: an endless body trickled 64 KiB every 20 ms;
- ``many-5mb``: every reply a legitimate 5 MB result (64 of them, 320 MB, arrive together over a
  256 MiB budget): every one must complete (0 failures: a reply that fits alone waits for room);
- ``wide-5mb``: the same with one emoji in each reply's string (parsed, 4 bytes a character: about
  25 MB each): every one must complete, within the bound;
- ``wide-60mb``: one emoji in a 60 MB string (300 MB decoded, over the budget even alone): refused
  as ``reply_too_large`` naming the setting, within the bound.

``gymslurm collect`` runs ``--rollouts`` (default 64) of them with ``+concurrency`` as many, all in
flight at once, as a child process; its peak RSS (sampled every 10 ms) is printed per case with
what the collector did. The bound is the documented one: the baseline plus 1.5 x
``max_inflight_reply_bytes`` (the budget every reply in flight shares, bodies and parse estimate;
docs/security.md); a case above it, or a ``many-``/``wide-5mb`` case with a failure, fails the bench
(exit 1). For the cases of legitimate replies, a raw ``httpx`` client (64 concurrent ``POST``, each
reply read and parsed with orjson, nothing kept) reads the same replies in the same run: its peak is
printed and the collector's ratio to it. ``--checkout DIR`` runs another checkout (e.g. an export of
main, for a before/after figure).
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

import httpx
import orjson
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
    "many-5mb",
    "wide-5mb",
    "wide-60mb",
]
MUST_COMPLETE = ("many-5mb", "wide-5mb")  # legitimate replies that fit alone: 0 failures
RAW_CLIENT_CASES = ("many-5mb", "wide-5mb")  # compared with a raw httpx client (64 x 60 MB would not fit)
ENDLESS_CAP = 96 * 1024 * 1024  # an endless body stops here per connection (the bench ends by itself)
PIECE = b"x" * (1 << 20)
HUNDRED_MB = b', "pad": "' + b"x" * (100 << 20) + b'"'
EMOJI = "\U0001f600".encode()


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
    pads = {
        "small": b"",
        "declared-100mb": HUNDRED_MB,
        "tiny-keys-60mb": keys,
        "deep-nesting-60mb": nested,
        "many-5mb": b', "text": "' + b"x" * (5 << 20) + b'"',
        "wide-5mb": b', "text": "' + b"x" * (5 << 20) + EMOJI + b'"',
        "wide-60mb": b', "text": "' + b"x" * (60 << 20) + EMOJI + b'"',
    }

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


def run_case(args: argparse.Namespace, port: int, tmp: Path) -> tuple[float, str, int]:
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
    said = f"exit {returncode}, {results} results ({saved_mb:.1f} MB), {too_large} reply_too_large"
    return peak_mb, said, args.rollouts - results


async def _raw_client(url: str, requests: int) -> str:
    """What a driver with plain httpx does: ``requests`` concurrent POSTs, each reply read and parsed."""

    async def one(client: httpx.AsyncClient, i: int) -> bool:
        task = {"task_id": {"taskset": "big", "task_id": str(i)}, "task_input": {"q": i}}
        body = {"episode_id": {"rollout_id": str(i), "attempt": 1}, "task": task}
        response = await client.post(url + "/run", json=body)
        return "result" in orjson.loads(response.content)

    limits = httpx.Limits(max_connections=requests)
    async with httpx.AsyncClient(timeout=None, limits=limits, trust_env=False) as client:
        parsed = await asyncio.gather(*(one(client, i) for i in range(requests)))
    return f"{sum(parsed)} parsed"


def run_raw_client(args: argparse.Namespace, port: int) -> float:
    """The raw client's peak RSS reading the current case's replies (a child process, as the collector)."""
    command = [
        sys.executable,
        __file__,
        "--raw-client",
        f"http://127.0.0.1:{port}",
        "--rollouts",
        str(args.rollouts),
    ]
    peak_mb, returncode = _peak_rss_mb(command, ROOT, dict(os.environ))
    if returncode:
        raise SystemExit(f"the raw client failed (exit {returncode})")
    return peak_mb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--budget-mb", type=int, default=None, help="+max_inflight_reply_bytes in MiB")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--checkout", type=Path, default=ROOT)
    parser.add_argument("--raw-client", metavar="URL", help=argparse.SUPPRESS)  # the child's mode
    args = parser.parse_args()
    if args.raw_client:
        print(asyncio.run(_raw_client(args.raw_client, args.rollouts)))
        return 0
    wanted = ["small", *(c for c in args.cases.split(",") if c != "small")]
    current, ready = ["small"], threading.Event()
    port: list[int] = []
    threading.Thread(target=serve, args=(current, ready, port), daemon=True).start()
    ready.wait()
    budget_mb = args.budget_mb if args.budget_mb is not None else 256
    peaks: dict[str, float] = {}
    raw: dict[str, float] = {}
    lost = 0
    for case in wanted:
        current[0] = case
        with tempfile.TemporaryDirectory() as tmp:
            peaks[case], what, failed = run_case(args, port[0], Path(tmp))
        if case in MUST_COMPLETE:
            lost += failed
        print(f"{case:>16}: peak RSS {peaks[case]:7.0f} MB; {what}", flush=True)
        if case in RAW_CLIENT_CASES:
            raw[case] = run_raw_client(args, port[0])
            ratio = peaks[case] / raw[case]
            print(
                f"{'':>16}  raw httpx client, same replies: peak RSS {raw[case]:7.0f} MB; "
                f"collector/raw {ratio:.2f}"
            )
    bound = peaks["small"] + 1.5 * budget_mb
    print(
        f"checkout {args.checkout}, concurrency {args.rollouts}: bound = baseline {peaks['small']:.0f} MB "
        f"+ 1.5 x max_inflight_reply_bytes {budget_mb} MiB = {bound:.0f} MB"
    )
    worst = max(peaks.values())
    print(f"worst case {worst:.0f} MB = {worst / bound:.2f} x the bound")
    for case, raw_mb in raw.items():
        said = f"collector {peaks[case]:.0f} MB = {peaks[case] / bound:.2f} x the bound"
        print(f"{case}: {said}; raw client {raw_mb:.0f} MB = {raw_mb / bound:.2f} x the bound")
    if lost:
        print(f"{lost} legitimate reply(ies) failed in {', '.join(c for c in MUST_COMPLETE if c in wanted)}")
    return 0 if worst <= bound and not lost else 1


if __name__ == "__main__":
    raise SystemExit(main())
