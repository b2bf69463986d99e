"""Benchmark of the run store: reservation+append cost per rollout, and reconciling 1,000,000 rollouts.

Run: ``python bench/store.py [--rollouts 1000000] [--sizes 10000,100000,1000000]``.

For each size N a run is created and filled: every rollout gets a reservation and a result, every
tenth first gets a reserved, failed execution. The cost of reserve+append must stay flat as N grows
(reservation is O(1)); it is sampled on each filled run in interleaved rounds, so that the load of a
shared machine hits every size alike. The largest run is reconciled in a fresh subprocess and, in
another, the same outcome files are parsed bare (``orjson.loads`` of every line), alternating, fastest
of each kept; then again with larger result rows. Each reconcile is measured twice: as the run's
writer left it (its outcome index covers every row: store/outcome_index.py) and with the index moved
aside (every row parsed, as after a writer killed before its first save). Targets, measured in this
run: reconcile <= 1.5x bare parse (issue 17; 2x before); peak RSS of the reconciling process < 500 MB.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DIGEST = "sha256:" + "3" * 64
SENTENCE = "The answer follows from the second paragraph of the task statement. "


def inputs(count: int) -> list[dict[str, object]]:
    return [
        {
            "_ng_rollout_id": f"bench-t{i}",
            "_ng_task_index": i,
            "_ng_rollout_index": 0,
            "task_id": {"taskset": "bench", "task_id": f"t{i}"},
            "task_input": {"question": f"q{i}"},
        }
        for i in range(count)
    ]


def fill(folder: Path, count: int, response_chars: int) -> tuple[Path, float]:
    """Create a run of ``count`` rollouts and write its history; return its path and seconds per rollout."""
    from gymslurm.records import EpisodeFailure, EpisodeId, RolloutFailureRecord
    from gymslurm.store import RunPaths, RunSpec, RunStore

    folder.mkdir(parents=True, exist_ok=True)
    paths = RunPaths.for_output(folder / f"run{count}.jsonl")
    store = RunStore.create_fresh(
        paths,
        RunSpec(
            source_path="d",
            source_digest=DIGEST,
            inputs=inputs(count),
            identity={},
            config_digest=DIGEST,
            max_rollout_attempts=3,
        ),
    )
    store.reconcile()
    ids = store.rollout_ids()
    text = (SENTENCE * (response_chars // len(SENTENCE) + 1))[:response_chars]
    failure = EpisodeFailure(
        failure_reason="upstream timed out", terminal=False, failure_kind="transport_timeout"
    )
    started = time.perf_counter()
    for index in range(count):
        if index % 10 == 0:
            attempt = store.reserve(index)
            record = RolloutFailureRecord(
                episode_id=EpisodeId(rollout_id=ids[index], attempt=attempt),
                run_id=store.run_id,
                source="collector",
                delivery="possibly_delivered",
                failure=failure,
            )
            store.append_failure(index, attempt, record)
        attempt = store.reserve(index)
        result = {
            "reward": (index % 7) / 6,
            "response": {"output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}]},
        }
        store.append_result(index, attempt, result)
    elapsed = time.perf_counter() - started
    store.close()
    return paths.output, elapsed / count


def child_reconcile(output: str) -> dict[str, float]:
    from gymslurm.store import RunPaths, RunStore

    started = time.perf_counter()
    store = RunStore.open(RunPaths.for_output(output), writable=False)
    opened = time.perf_counter()
    store.rollout_index  # noqa: B018  (scan the materialized inputs: the id → index map)
    indexed = time.perf_counter()
    cpu = time.process_time()
    recon = store.reconcile()
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    assert len(recon.states) == store.manifest.rollout_count
    return {
        "open_s": opened - started,
        "index_s": indexed - opened,
        "reconcile_s": done - indexed,
        "reconcile_cpu_s": cpu,
        "peak_rss_mb": peak_rss_mb(),
    }


def peak_rss_mb() -> float:
    """VmHWM of this process (ru_maxrss would include the forking parent's peak, kept across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def child_bare(output: str) -> dict[str, float]:
    import orjson

    from gymslurm.store import RunPaths

    paths = RunPaths.for_output(output)
    started, cpu = time.perf_counter(), time.process_time()
    lines = 0
    for path in (paths.failures, paths.results):
        with open(path, "rb") as handle:
            for line in handle:
                orjson.loads(line)
                lines += 1
    return {
        "bare_parse_s": time.perf_counter() - started,
        "bare_parse_cpu_s": time.process_time() - cpu,
        "lines": lines,
    }


def in_child(mode: str, output: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(output)], check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout)


def report_reconcile(output: Path, rollouts: int, label: str, rounds: int) -> None:
    """Reconcile ``output`` as its writer left it (with its outcome index), then with the index moved
    aside (a run whose writer was killed before its first save), each against a bare parse."""
    from gymslurm.store import RunPaths

    index = RunPaths.for_output(output).outcome_index
    assert index.exists(), f"the writer left no outcome index at {index}"
    report_one(output, rollouts, f"{label}, from the outcome index its writer left", rounds)
    aside = index.with_name("aside.bin")
    index.rename(aside)
    try:
        report_one(output, rollouts, f"{label}, every row parsed (no outcome index)", rounds)
    finally:
        aside.rename(index)


def report_one(output: Path, rollouts: int, label: str, rounds: int) -> None:
    """Reconcile ``output`` and parse it bare in fresh processes, alternating; keep the fastest of each."""
    bares, recs = [], []
    for _ in range(rounds):
        bares.append(in_child("bare", output))
        recs.append(in_child("reconcile", output))
    bare = min(bares, key=lambda r: r["bare_parse_s"])
    rec = min(recs, key=lambda r: r["reconcile_s"])
    cpu_ratio = min(r["reconcile_cpu_s"] for r in recs) / min(r["bare_parse_cpu_s"] for r in bares)
    size_mb = sum(p.stat().st_size for p in output.parent.glob(f"{output.stem}*.jsonl")) / 2**20
    ratio = rec["reconcile_s"] / bare["bare_parse_s"]
    whole = (rec["open_s"] + rec["index_s"] + rec["reconcile_s"]) / bare["bare_parse_s"]
    overhead = (rec["reconcile_s"] - bare["bare_parse_s"]) / rollouts * 1e6
    rss = rec["peak_rss_mb"]
    print(f"reconcile of N={rollouts:,}, {label} ({int(bare['lines']):,} outcome lines, {size_mb:,.0f} MB):")
    print(f"  bare parse (orjson.loads per line): {bare['bare_parse_s']:.2f} s")
    print(f"  open (manifest, table, inputs digest): {rec['open_s']:.2f} s")
    print(f"  rollout index (scan materialized inputs): {rec['index_s']:.2f} s")
    print(f"  reconcile (read history + select): {rec['reconcile_s']:.2f} s")
    print(f"  ratio reconcile / bare parse: {ratio:.2f}x (target <= 1.5x) {'OK' if ratio <= 1.5 else 'OVER'}")
    print(f"  same ratio in CPU time (fastest of each): {cpu_ratio:.2f}x")
    print(f"  ratio open+index+reconcile / bare parse: {whole:.2f}x")
    print(f"  reconcile overhead beyond parsing: {overhead:.1f} us/rollout")
    verdict = "OK" if rss < 500 else "OVER"
    print(f"  peak RSS of the reconciling process: {rss:.0f} MB (target < 500 MB) {verdict}")


def sample_costs(outputs: dict[int, Path], sample: int, rounds: int, contiguous: bool) -> dict[int, float]:
    """Seconds per reserve+append of a new execution, per run size: ``sample`` rollouts per round
    (random ones, or a contiguous block at a random start as a collector dispatching in index order
    touches them), sizes interleaved within each round, fastest round kept."""
    from gymslurm.store import RunPaths, RunStore

    rng = random.Random(0)
    stores = {size: RunStore.open(RunPaths.for_output(output)) for size, output in outputs.items()}
    for store in stores.values():
        store.reconcile()
    best = dict.fromkeys(stores, float("inf"))
    for _ in range(rounds):
        for size, store in stores.items():
            start = rng.randrange(size - sample)
            indices = list(range(start, start + sample)) if contiguous else rng.sample(range(size), sample)
            started = time.perf_counter()
            for index in indices:
                store.append_result(index, store.reserve(index), {"reward": 1.0, "response": "x" * 100})
            best[size] = min(best[size], (time.perf_counter() - started) / sample)
    for store in stores.values():
        store.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument(
        "--response-chars", type=int, default=2000, help="answer length in the reconciled run"
    )
    parser.add_argument(
        "--cost-response-chars", type=int, default=100, help="answer length of the small runs"
    )
    parser.add_argument("--rounds", type=int, default=3, help="repeats; the fastest of each is kept")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "OUTPUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, output = args.child
        print(json.dumps(child_bare(output) if mode == "bare" else child_reconcile(output)))
        return
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="gymslurm-bench-") as tmp:
        folder = Path(tmp)
        print(f"filling runs with {args.cost_response_chars}-char answers (every 10th rollout also reserves")
        print("and saves a failure first: 1.1 reservations and appends per rollout):")
        outputs = {}
        for size in sizes:
            outputs[size], cost = fill(folder / "small", size, args.cost_response_chars)
            print(f"  N={size:>9,}: {cost * 1e6:7.2f} us/rollout (mean over the whole fill; load-sensitive)")
        print("reserve+append of a new execution, 2,000 rollouts per round, sizes interleaved,")
        print(f"fastest of {args.rounds} rounds (same conditions for every size):")
        for contiguous in (True, False):
            best = sample_costs(outputs, 2000, args.rounds, contiguous)
            order = (
                "contiguous block (dispatch order)" if contiguous else "random rollouts (cache-unfriendly)"
            )
            print(f"  {order}:")
            for size in sizes:
                print(f"    N={size:>9,}: {best[size] * 1e6:7.2f} us/rollout")
            flat = max(best.values()) / min(best.values())
            print(f"    largest/smallest: {flat:.2f}x (target: flat) {'OK' if flat < 1.5 else 'NOT FLAT'}")
        report_reconcile(
            outputs[sizes[-1]], sizes[-1], f"{args.cost_response_chars}-char answers", args.rounds
        )
        shutil.rmtree(folder / "small")
        output, cost = fill(folder / "big", sizes[-1], args.response_chars)
        print(f"filling N={sizes[-1]:,} with {args.response_chars}-char answers: {cost * 1e6:.2f} us/rollout")
        report_reconcile(output, sizes[-1], f"{args.response_chars}-char answers", args.rounds)


if __name__ == "__main__":
    main()
