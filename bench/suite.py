"""A suite on one allocation against five separate runs, the limits measured in the same run (issue 30).

Everything is real: ``gymslurm submit --backend local --wait`` (real links, real servers, real
collectors, the aggregation job), the demo model server with a capacity (``--slots 8 --latency-ms
250``: a batching server, a FIFO queue past its slots, its vLLM-named ``/metrics``) and a model
load stood in for by ``--slow-start-s`` (a real model server loads its weights for minutes; here
15 s by default). Five demo benchmarks of 40 tasks, one shard each.

Printed, each with its limit:

1. model-server start-ups per link of the suite (limit 1; five separate runs start five);
2. the suite's wall against five separate runs of the same benchmarks one after another (the same
   allocation used five times), limit 0.35;
3. the model server's throughput in the suite (model calls per second of the collectors' window,
   the model load left out: ``--slow-start-s 0``) against the best of fixed concurrencies
   (``+dispatch_adaptive=off``, the total in flight split over the five collectors), limit 0.9;
4. one benchmark 10x slower per rollout (its Environment Server asks the model 10 times per
   episode: ``demo-server --policy-turns 10``): the four others' end (their collectors' last exit,
   from the link's start of collection) against the same four as a suite without it, limit 1.2.

Run from the repository root (a few minutes on 2 cores): ``python bench/suite.py [--load-s 15]``;
the slow neighbour alone: ``--parts slow`` (``--tasks 120``: a collection longer than its start,
where the split of the server, not the first requests, decides; ``--slow-weight W``: the slow
benchmark's weight in the suite).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIDECAR = ["+route_failures_to_sidecar=true"]  # the demo benchmark's own collector override
MODEL = ["{python}", "-m", "gymslurm", "demo-model-server", "--host", "{host}", "--port", "{port}"]
ENV = [
    *["{python}", "-m", "gymslurm", "demo-server", "--host", "{host}", "--port", "{port}"],
    *["--policy-url", "{servers.policy.url}"],
]


def model_command(load_s: float, slots: int, latency_ms: float) -> list[str]:
    """The demo model server with a capacity and a model load of ``load_s``."""
    return [*MODEL, "--slots", str(slots), "--latency-ms", str(latency_ms), "--slow-start-s", str(load_s)]


def quoted(items: list[str]) -> str:
    """A list as a Hydra override value (every item quoted)."""
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def gymslurm(*argv: str, cwd: Path) -> None:
    """Run the CLI; fail loudly."""
    done = subprocess.run(
        [sys.executable, "-m", "gymslurm", *argv], check=False, cwd=cwd, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"gymslurm {' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")


def write_suite(
    root: Path,
    name: str,
    members: list[tuple[str, int]],
    model: list[str],
    extra: list[str],
    *,
    weights: dict[str, float] | None = None,
) -> Path:
    """A suite file: one shard each; ``members`` (name, policy turns); ``extra`` overrides each;
    ``weights``: a member's ``weight`` in the suite (default 1)."""
    lines = [
        f"run_root: {root / 'runs'}",
        "shards: 1",
        "stack:",
        "  - name: policy",
        f"    command: {json.dumps(model)}",
        "    probe: chat_completions",
        "    startup_timeout_s: 300",
        "    collector_override: null",
        "benchmarks:",
    ]
    for member, turns in members:
        overrides = list(extra)
        if turns > 1:
            env = quoted([*ENV, "--policy-turns", str(turns)])
            overrides.append(f"servers.1.command={env}")
        weight = (weights or {}).get(member)
        lines.append(
            f"  - {{name: {member}, benchmark: demo, dataset: {root / 'data.jsonl'},"
            + ("" if weight is None else f" weight: {weight},")
            + f" overrides: {json.dumps(overrides)}}}"
        )
    path = root / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def newest_run(root: Path, prefix: str) -> Path:
    """The run directory just made."""
    return max((root / "runs").glob(f"{prefix}-*/run.json"), key=lambda p: p.stat().st_mtime).parent


def collection(run: Path) -> tuple[float, dict[str, float]]:
    """When the first collector of the suite began dispatching, and when each benchmark's ended
    (its collector's live progress, written as dispatch ends: collector start-up and exit left out)."""
    begun, ended = [], {}
    for path in (run / "benchmarks").glob("*/output/shard-000/rollouts_progress.json"):
        progress = json.loads(path.read_text())
        assert progress["ended"], path
        begun.append(progress["started_epoch"])
        ended[path.parents[2].name] = progress["epoch"]
    return min(begun), ended


def policy_starts(run: Path) -> tuple[int, int]:
    """Model-server start-ups and links over every chain of ``run``."""
    starts = links = 0
    for ledger in (run / "shards").glob("*/ledger.jsonl"):
        for line in ledger.read_text().splitlines():
            record = json.loads(line)
            links += record["kind"] == "start"
            starts += (
                record["kind"] == "server" and record["name"] == "policy" and record["event"] == "started"
            )
    return starts, links


def overlap(run: Path) -> tuple[float, float]:
    """Seconds from the suite link's start (its ledger's ``start``) to the model server healthy (its
    ``server started`` record) and to the last collector ready to dispatch (its live progress
    record's ``started_epoch``, written when dispatch begins): the collectors' start-up hidden
    behind the model's load when the second is not past the first."""
    from datetime import datetime

    records = [json.loads(line) for line in (run / "shards/000/ledger.jsonl").read_text().splitlines()]
    start = min(datetime.fromisoformat(r["at"]).timestamp() for r in records if r["kind"] == "start")
    healthy = min(
        datetime.fromisoformat(r["at"]).timestamp()
        for r in records
        if r["kind"] == "server" and r["name"] == "policy" and r["event"] == "started"
    )
    progress = (run / "benchmarks").glob("*/output/shard-000/rollouts_progress.json")
    ready = max(json.loads(path.read_text())["started_epoch"] for path in progress)
    return healthy - start, ready - start


def timed_suite(suite: Path) -> tuple[float, Path]:
    """Wall seconds of ``submit SUITE --wait`` and its run, for a suite file :func:`write_suite` wrote
    (``ROOT/NAME.yaml``: its runs are ``ROOT/runs/NAME-*``)."""
    root = suite.parent
    t0 = time.perf_counter()
    gymslurm("submit", str(suite), "--backend", "local", "--wait", cwd=root)
    return time.perf_counter() - t0, newest_run(root, suite.stem)


def rows_of(run: Path, member: str) -> int:
    """Rows merged for one benchmark of a suite run."""
    merged = run / "benchmarks" / member / "output/merged/rollouts.jsonl"
    return sum(1 for line in merged.read_text().splitlines() if line.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--load-s", type=float, default=15.0, help="the model server's load time (default 15)"
    )
    parser.add_argument("--tasks", type=int, default=40, help="tasks per benchmark (default 40)")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=250.0)
    parser.add_argument(
        "--slow-weight",
        type=float,
        default=None,
        help="the slow benchmark's weight in the suite (default: none set, 1)",
    )
    parser.add_argument(
        "--parts",
        default="wall,throughput,slow",
        help="which measurements (default all: wall,throughput,slow)",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    five = [(f"b{i}", 1) for i in range(5)]
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        root = Path(tmp)
        gymslurm("demo-server", "--write-dataset", str(root / "data.jsonl"), "--n", str(args.tasks), cwd=root)
        loaded = model_command(args.load_s, args.slots, args.latency_ms)
        cold = model_command(0.0, args.slots, args.latency_ms)

        if "wall" in parts:
            wall(root, five, loaded)
        if "throughput" in parts:
            throughput(root, five, cold, args.tasks, args.slots)
        if "slow" in parts:
            slow(root, five[:4], cold, args.slow_weight)


def wall(root: Path, five: list[tuple[str, int]], loaded: list[str]) -> None:
    """Model-server start-ups per link, and the suite's wall against five separate runs."""
    suite_wall, run = timed_suite(write_suite(root, "five", five, loaded, []))
    starts, links = policy_starts(run)
    separate = 0.0
    for i in range(5):
        overrides = [f"dataset={root / 'data.jsonl'}", f"run_root={root / 'runs'}", "shards=1"]
        t0 = time.perf_counter()
        model = f"servers.0.command={quoted(loaded)}"
        gymslurm("submit", "demo", *overrides, model, "--backend", "local", "--wait", cwd=root)
        separate += time.perf_counter() - t0
        print(f"  separate run {i + 1}/5: {time.perf_counter() - t0:.1f}s", flush=True)
    print(f"model-server start-ups per link: {starts / links:.2f} (limit 1; five separate runs: 5)")
    healthy, ready = overlap(run)
    print(
        f"suite link: the model server healthy {healthy:.1f}s after the link started, the five "
        f"collectors ready to dispatch at {ready:.1f}s (they start while it loads)"
    )
    print(
        f"suite wall {suite_wall:.1f}s vs five separate runs {separate:.1f}s: "
        f"{suite_wall / separate:.2f}x (limit 0.35); {load_average()}",
        flush=True,
    )


def throughput(root: Path, five: list[tuple[str, int]], cold: list[str], tasks: int, slots: int) -> None:
    """Model calls per second of the collectors' window: the suite's adaptive shares against the
    best of three fixed totals in flight (split over the five collectors)."""

    def measured(extra: list[str]) -> float:
        _, run = timed_suite(write_suite(root, "tput", five, cold, extra))
        begun, ended = collection(run)
        assert all(rows_of(run, m) == tasks for m, _ in five)
        return len(five) * tasks / (max(ended.values()) - begun)

    adaptive = measured([])
    print(f"  adaptive, shared: {adaptive:.1f} calls/s", flush=True)
    fixed = {}
    for total in (slots, 2 * slots, 4 * slots):
        per = max(1, total // len(five))
        off = [*SIDECAR, "+dispatch_adaptive=off", f"+concurrency={per}"]
        fixed[total] = measured([f"collector.overrides={quoted(off)}"])
        print(f"  fixed concurrency {per}x{len(five)}: {fixed[total]:.1f} calls/s", flush=True)
    best = max(fixed.values())
    print(
        f"server throughput adaptive {adaptive:.1f} calls/s vs best fixed {best:.1f}: "
        f"{adaptive / best:.2f} (limit 0.9); {load_average()}",
        flush=True,
    )


def slow(root: Path, four: list[tuple[str, int]], cold: list[str], weight: float | None) -> None:
    """The four fast benchmarks' end beside a 10x slower one, against the four as a suite alone."""
    _, alone_run = timed_suite(write_suite(root, "four", four, cold, []))
    begun, ended = collection(alone_run)
    alone = max(ended.values()) - begun
    print(f"  four alone: {alone:.1f}s ({load_average()})", flush=True)
    weights = None if weight is None else {"slow": weight}
    _, mixed_run = timed_suite(write_suite(root, "slow", [*four, ("slow", 10)], cold, [], weights=weights))
    begun, ended = collection(mixed_run)
    beside = max(t for m, t in ended.items() if m != "slow") - begun
    print(
        f"four benchmarks beside one 10x slower: end at {beside:.1f}s vs {alone:.1f}s alone: "
        f"{beside / alone:.2f}x (limit 1.2); the slow one ended at {ended['slow'] - begun:.1f}s"
        + ("" if weight is None else f" (its weight {weight:g})")
        + f"; {load_average()}",
        flush=True,
    )


def load_average() -> str:
    """The machine's load average now (figures on a shared machine are read with it)."""
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return f"load average {one} {five} {fifteen}"


if __name__ == "__main__":
    main()
