"""One replica of three killed mid-run: how fast throughput recovers, and what it costs the rollouts.

The whole job runs as it would on a node: ``gymslurm submit --backend local`` starts a link with three
``gymslurm demo-model-server`` replicas (each with a capacity: ``--slots S --latency-ms L``, so each
replica carries a third of the load), vLLM's router in front of them (``vllm-router``), the demo
Environment Server calling the router, and the real collector. This script samples the number of
saved results every 0.1 s, SIGKILLs one replica once ``--before`` seconds of steady throughput were
seen, and reports:

- the throughput before the kill (results per second over the ``--window`` seconds before it);
- the throughput in the window that starts two probe intervals after the kill;
- their ratio against the limit 0.6 (issue 22: ">= 0.6 of before within two probe intervals"),
  the limit being a fraction of the rate measured in the same run;
- the counted failures (budget spent; must be 0) and whether the same link finished.

Run from the repository root (needs ``pip install '.[router]'``):
    python bench/replicas.py [--rows 600] [--slots 4] [--latency-ms 1000] [--probe-interval 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def gymslurm(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gymslurm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return done.stdout


def benchmark(tmp: Path, marker: str, args: argparse.Namespace) -> Path:
    dataset = tmp / "data.jsonl"
    gymslurm("demo-server", "--write-dataset", str(dataset), "--n", str(args.rows), cwd=tmp)
    py = sys.executable
    model = (
        f"[{py}, -m, gymslurm, demo-model-server, --host, '{{host}}', --port, '{{port}}', --model-name, "
        f"{marker}, --slots, '{args.slots}', --latency-ms, '{args.latency_ms}']"
    )
    path = tmp / "bench.yaml"
    path.write_text(
        f"dataset: {dataset}\nrun_root: {tmp / 'runs'}\nshards: 1\nservers:\n"
        f"  - name: policy\n    command: {model}\n    replicas: 3\n    probe: chat_completions\n"
        f"    probe_interval_s: {args.probe_interval}\n    probe_timeout_s: {args.probe_interval * 2}\n"
        f"    startup_timeout_s: 60\n    collector_override: null\n"
        f"    router: {{command: [{py}, -m, vllm_router.launch_router]}}\n"
        f"  - name: env\n    command: [{py}, -m, gymslurm, demo-server, --host, '{{host}}',"
        " --port, '{port}', --policy-url, '{servers.policy.url}',"
        f" --model-name, {marker}]\n    health_path: /health\n"
        f"collector:\n  command: [{py}, -m, gymslurm, collect]\n"
        f"  overrides: [+route_failures_to_sidecar=true, +concurrency={args.concurrency}, +progress=none]\n"
        f"slurm:\n  python: {py}\naggregation:\n  enabled: false\n"
    )
    return path


def replica_pids(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "demo-model-server" in cmdline and marker in cmdline:
            found.append(proc.info["pid"])
    return sorted(found)


def rate(samples: list[tuple[float, int]], start: float, end: float) -> float:
    inside = [(t, n) for t, n in samples if start <= t <= end]
    if len(inside) < 2:
        return 0.0
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


def _ledger_summary(run: Path) -> tuple[list[str], list[str], dict[str, int]]:
    """The link decisions, their reasons, and how often replicas went down, were restarted or retired."""
    records = [json.loads(line) for line in (run / "shards/000/ledger.jsonl").read_text().splitlines()]
    decisions = [r["decision"] for r in records if r.get("kind") == "decision"]
    reasons = [r["reason"][:200] for r in records if r.get("kind") == "decision"]
    events: dict[str, int] = {}
    for record in records:
        if record.get("kind") == "server":
            events[record["event"]] = events.get(record["event"], 0) + 1
    return decisions, reasons, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--latency-ms", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--probe-interval", type=float, default=1.0)
    parser.add_argument("--before", type=float, default=12.0, help="seconds of results before the kill")
    parser.add_argument("--window", type=float, default=6.0, help="seconds each throughput is measured over")
    args = parser.parse_args()
    marker = f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        gymslurm("submit", str(benchmark(tmp, marker, args)), "--backend", "local", cwd=tmp)
        run = next((tmp / "runs").iterdir())
        results = run / "output/shard-000/rollouts.jsonl"
        samples: list[tuple[float, int]] = []
        first = killed = None
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            count = len(results.read_bytes().splitlines()) if results.exists() else 0
            now = time.monotonic()
            samples.append((now, count))
            if count and first is None:
                first = now
            if first is not None and killed is None and now - first >= args.before:
                pids = replica_pids(marker)
                os.kill(pids[1], signal.SIGKILL)
                killed = now
            if count >= args.rows or (killed and now - killed > 2 * args.probe_interval + args.window + 5):
                break
            time.sleep(0.1)
        assert killed is not None, "the run ended before the kill: raise --rows"
        before = rate(samples, killed - args.window, killed)
        recovered_at = killed + 2 * args.probe_interval
        after = rate(samples, recovered_at, recovered_at + args.window)
        while not (run / "output/shard-000/rollouts_coverage.json").exists() or _live(run):
            time.sleep(0.5)
            if time.monotonic() > deadline:
                break
        coverage = json.loads((run / "output/shard-000/rollouts_coverage.json").read_text())
        decisions, reasons, downs = _ledger_summary(run)
        gymslurm("cancel", str(run), cwd=tmp) if _live(run) else None
    limit = 0.6
    print(
        f"load average {os.getloadavg()[0]:.1f}; 3 replicas x {args.slots} slots x {args.latency_ms} ms, "
        f"concurrency {args.concurrency}, probe interval {args.probe_interval:g} s"
    )
    print(f"before the kill: {before:.2f} results/s (over {args.window:g} s)")
    print(f"from two probe intervals after it: {after:.2f} results/s (over {args.window:g} s)")
    ratio = after / before if before else 0.0
    print(
        f"ratio {ratio:.2f} (limit {limit}: {'met' if ratio >= limit else 'NOT met'}); "
        f"counted failures {coverage['counted_failures']}; successful {coverage['successful']} of "
        f"{coverage['expected']}; decisions {decisions}"
    )
    print(f"replica events: {downs or 'none'}; decision reasons: {reasons}")


def _live(run: Path) -> bool:
    path = run / "shards/000/ledger.jsonl"
    return '"decision"' not in (path.read_text() if path.exists() else "")


if __name__ == "__main__":
    main()
