"""Benchmark of `gymslurm collect` against the zero-latency demo server, limits measured in the same run.

Prints, for N rollouts (default 100,000):

1. the rate of a minimal raw HTTP/1.1 keep-alive client (asyncio streams, same concurrency) sending
   the same ``POST /run`` requests to the same demo server — the ceiling on this machine right now;
2. the collector's rate (its dispatch loop, from its own last progress line) and whole-process wall
   time for the fresh run, with every durable reservation and saved outcome;
3. the wall time of a whole ``gymslurm collect +resume_from_cache=true`` process on the finished run,
   against a raw *parse-and-diff* client measured in the same run (a fresh process that parses the
   dataset and the results file and finds no rollout left to do: the least a resume can cost); it is
   answered from the run's seal (docs/collector.md), so the same resume without the seal, the full
   path a changed run takes, is measured too;
4. the peak RSS (the collector process's own VmHWM) of the fresh collection and of its full resume, and per
   rollout, so that runs of several sizes (``--n 100000,300000``) show whether it stays flat;
5. the same resume after removing the second half of the results file (re-dispatched).

Targets: collector >= 60 % of the raw client and >= 4,000 rollouts/s (issue 3); resume of the
finished run <= 1.2x the parse-and-diff client; peak RSS of a 1,000,000-rollout collection <= 500 MB
fresh and <= 300 MB resumed, flat per rollout (issue 17). Run from the repository root:
python bench/collect.py [--n 100000[,300000]] [--concurrency 64] [--skip-half]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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


EXTRA: list[str] = []  # more overrides for every collection (--no-aggregation)


def run_collect(
    dataset: Path, output: Path, url: str, concurrency: int, resume: bool
) -> tuple[float, str, float]:
    """Wall seconds, stderr and peak RSS (MB) of one whole ``gymslurm collect`` process."""
    command = [
        sys.executable,
        "-c",
        PEAK_WRAPPER,
        "collect",
        f"+input_jsonl_fpath={dataset}",
        f"+output_jsonl_fpath={output}",
        f"+environment_server_url={url}",
        f"+concurrency={concurrency}",
        "+progress=plain",
        "+progress_interval_s=3600",
        "+summary=false",
        f"+resume_from_cache={str(resume).lower()}",
        *EXTRA,
    ]
    wall, code, stderr, rss = _run_measured(command)
    if code != 0:
        raise SystemExit(f"collect failed ({code}):\n{stderr}")
    return wall, stderr, rss


# Runs ``gymslurm ARGS`` and prints the process's own peak RSS (VmHWM) last on stderr: the child's
# ru_maxrss would include this (large) bench process's pages, copied at fork and kept across exec.
PEAK_WRAPPER = """
import runpy, sys
sys.argv = ["gymslurm", *sys.argv[1:]]
try:
    runpy.run_module("gymslurm", run_name="__main__")
finally:
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
    print(f"VMHWM_KB={hwm}", file=sys.stderr)
"""


def _run_measured(command: list[str]) -> tuple[float, int, str, float]:
    """Run a child; its wall seconds, exit status, stderr and peak RSS in MB (its own VmHWM if it says)."""
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stderr is not None
    stderr = child.stderr.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    said = re.findall(r"VMHWM_KB=(\d+)", stderr)
    peak_kb = int(said[-1]) if said else usage.ru_maxrss
    return time.perf_counter() - started, child.returncode, stderr, peak_kb / 1024


RAW_DIFF = """
import sys, orjson
dataset, results = sys.argv[1], sys.argv[2]
done = set()
with open(results, "rb") as handle:
    for line in handle:
        done.add(orjson.loads(line)["_ng_rollout_id"])
todo = 0
with open(dataset, "rb") as handle:
    for line in handle:
        task = orjson.loads(line)["task_id"]
        todo += f"{task['taskset']}-{task['task_id']}" not in done
print(todo)
"""


def raw_resume_wall(dataset: Path, output: Path) -> float:
    """Wall seconds of a fresh process that parses dataset and results and diffs them (the floor)."""
    wall, code, stderr, _ = _run_measured([sys.executable, "-c", RAW_DIFF, str(dataset), str(output)])
    if code != 0:
        raise SystemExit(f"the raw parse-and-diff client failed:\n{stderr}")
    return wall


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
    parser.add_argument("--n", default="100000", help="rollouts; several sizes comma-separated")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--skip-half", action="store_true", help="skip the half-removed resume")
    parser.add_argument(
        "--no-aggregation",
        action="store_true",
        help="+disable_aggregation=true: no POST /aggregate_metrics (its body passes 64 MB near 1M rollouts)",
    )
    args = parser.parse_args()
    if args.no_aggregation:
        EXTRA.append("+disable_aggregation=true")
    server, url = start_server()
    try:
        for n in (int(size) for size in args.n.split(",")):
            with tempfile.TemporaryDirectory(prefix="gymslurm-bench-") as tmp:
                one_size(Path(tmp), n, url, args.concurrency, args.skip_half)
    finally:
        server.terminate()
        server.wait()
    return 0


def one_size(folder: Path, n: int, url: str, concurrency: int, skip_half: bool) -> None:
    dataset = folder / "arith.jsonl"
    write_dataset(dataset, n)
    output = folder / "run" / "out.jsonl"
    print(f"--- N = {n:,} rollouts")
    raw = raw_client_rate(url, dataset, n, concurrency)
    print(f"raw HTTP client:             {raw:10,.0f} requests/s ({n:,} requests, {concurrency} in flight)")
    wall, stderr, fresh_rss = run_collect(dataset, output, url, concurrency, resume=False)
    rate = loop_rate(stderr)
    print(
        f"collector (dispatch loop):   {rate:10,.0f} rollouts/s   whole process {wall:.2f} s "
        f"({n / wall:,.0f} rollouts/s incl. start-up)"
    )
    print(f"  ratio collector / raw:     {rate / raw:10.2f}   (target >= 0.60)")
    print(f"  ratio collector / 4,000/s: {rate / 4000:10.2f}   (target >= 1.00)")
    resume_wall, _, sealed_rss = run_collect(dataset, output, url, concurrency, resume=True)
    raw_wall = raw_resume_wall(dataset, output)
    print(f"resume, finished run:        {resume_wall:10.2f} s whole process; raw diff {raw_wall:.2f} s")
    print(f"  ratio resume / raw diff:   {resume_wall / raw_wall:10.2f}   (target <= 1.20; from the seal)")
    seal = output.with_name(output.stem + "_finished.json")
    if not seal.exists():  # e.g. a metrics body over the demo server's 64 MB: asked again each resume
        print("  (no seal: the fresh run did not end settled; see its warnings. --no-aggregation seals it)")
    seal.unlink(missing_ok=True)  # the full path: what a changed run costs
    full_wall, _, resume_rss = run_collect(dataset, output, url, concurrency, resume=True)
    print(
        f"  without the seal (full):   {full_wall:10.2f} s, {full_wall / raw_wall:.2f}x the raw diff "
        f"(peak RSS {resume_rss:,.0f} MB; from the seal {sealed_rss:,.0f} MB)"
    )
    for name, rss, limit in (("fresh", fresh_rss, 500), ("resume", resume_rss, 300)):
        print(
            f"peak RSS, {name:6}:          {rss:10,.0f} MB  ({rss * 2**20 / n:,.0f} bytes/rollout; "
            f"1M target <= {limit} MB = {limit * 2**20 / 1e6:,.0f} bytes/rollout)"
        )
    if not skip_half:
        removed = drop_second_half(output)
        half_wall, half_err, _ = run_collect(dataset, output, url, concurrency, resume=True)
        print(
            f"resume, {removed:,} results removed: {half_wall:6.2f} s whole process "
            f"(re-dispatched at {loop_rate(half_err):,.0f} rollouts/s)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
