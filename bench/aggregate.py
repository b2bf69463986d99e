"""Benchmark: aggregate 64 shards totalling 1,000,000 rollouts, against a bare parse of the same files.

Builds manifest-backed shards (manifest, materialized inputs and reservation table through the store;
outcome lines written in bulk with the collector's stamps): ~90% first-try results, ~4% a retryable
failure then a result, ~3% omissions, ~2% terminal failures, ~1% interrupted after a result. Then,
in the same process:

- *floor*: ``orjson.loads`` of every line of the files aggregation must read — each shard's results,
  failure sidecar and materialized inputs (the rollout ids are there), in one process;
- *aggregate*: ``gymslurm.aggregate.aggregate`` (open and validate each run, reconcile, select, write
  the merged projection, metrics and aggregate coverage), shards read by one worker process per CPU.

Each is measured ``--repeat`` times (default 2) and the best wall time kept, because the machine is
shared; prints both wall times and their ratio (the limit applies to it) and, for information, the
CPU seconds of each (aggregation's worker processes included). Exits 1 when the wall ratio exceeds
``--limit`` (default 3.0).
Usage: ``python bench/aggregate.py [--rollouts 1000000] [--shards 64] [--limit 3.0] [--keep DIR] [--glob]``
(``--glob``: the inputs are one glob, as the launcher's aggregation job passes them; issue 14's
target is ``--shards 1000 --glob``).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gymslurm.aggregate import AggregateOptions, aggregate
from gymslurm.store import RunPaths, RunSpec, RunStore
from gymslurm.store.reservations import create_table

DIGEST = "sha256:" + "0" * 64


def _stamps(run_id: str, rid: str, index: int, attempt: int) -> dict[str, Any]:
    return {
        "_ng_run_id": run_id,
        "_ng_rollout_id": rid,
        "_ng_attempt": attempt,
        "_ng_task_index": index,
        "_ng_rollout_index": 0,
        "task_id": {"taskset": "arith", "task_id": str(index)},
    }


def _failure(run_id: str, rid: str, index: int, attempt: int, terminal: bool) -> bytes:
    kind = "agent_command_not_allowed" if terminal else "session_lost"
    record = {
        "schema_version": 1,
        "episode_id": {"rollout_id": rid, "attempt": attempt},
        "run_id": run_id,
        "source": "environment",
        "delivery": "delivered",
        "failure": {"failure_reason": f"{kind} in episode", "terminal": terminal, "failure_kind": kind},
    }
    row = {
        **_stamps(run_id, rid, index, attempt),
        "_ng_failure_record": record,
        "_ng_failure_class": kind,
        "_ng_failure_terminal": terminal,
        "_ng_failure_message": record["failure"]["failure_reason"],  # type: ignore[index]
    }
    return orjson.dumps(row) + b"\n"


def _result(run_id: str, rid: str, index: int, attempt: int, rng: random.Random) -> bytes:
    answer = rng.randint(0, 200)
    row = {
        **_stamps(run_id, rid, index, attempt),
        "reward": float(rng.random() < 0.7),
        "response": {
            "output": [{"type": "message", "content": f"The answer is {answer}."}],
            "status": "completed",
        },
        "expected_answer": answer,
    }
    return orjson.dumps(row) + b"\n"


def build_shard(output: Path, first: int, count: int, seed: int) -> None:
    """One run of ``count`` rollouts with a realistic mix of histories."""
    rng = random.Random(seed)
    ids = [f"arith-{first + i}" for i in range(count)]
    inputs = [
        {
            "_ng_rollout_id": rid,
            "_ng_task_index": i,
            "_ng_rollout_index": 0,
            "task_id": {"taskset": "arith", "task_id": str(i)},
            "task_input": {"a": i, "b": i + 1, "op": "+"},
        }
        for i, rid in enumerate(ids)
    ]
    paths = RunPaths.for_output(output)
    store = RunStore.create_fresh(
        paths,
        RunSpec(
            source_path="tasks.jsonl",
            source_digest=DIGEST,
            inputs=inputs,
            identity={"m": 1},
            config_digest=DIGEST,
            max_rollout_attempts=3,
        ),
    )
    run_id = store.run_id
    store.close()
    results, failures, reserved = [], [], []
    for i, rid in enumerate(ids):
        draw = rng.random()
        if draw < 0.90:
            results.append(_result(run_id, rid, i, 0, rng))
            reserved.append(1)
        elif draw < 0.94:
            failures.append(_failure(run_id, rid, i, 0, terminal=False))
            results.append(_result(run_id, rid, i, 1, rng))
            reserved.append(2)
        elif draw < 0.97:
            failures.append(orjson.dumps({**_stamps(run_id, rid, i, 0), "_ng_omitted": True}) + b"\n")
            reserved.append(1)
        elif draw < 0.99:
            failures.append(_failure(run_id, rid, i, 0, terminal=True))
            reserved.append(1)
        else:
            results.append(_result(run_id, rid, i, 0, rng))
            reserved.append(2)  # a newer reservation without outcome: the result is superseded
    paths.results.write_bytes(b"".join(results))
    paths.failures.write_bytes(b"".join(failures))
    create_table(paths.reservations, run_id, reserved)


def bare_parse(files: list[Path]) -> int:
    """The floor: parse every line of the outcome files."""
    loads = orjson.loads
    rows = 0
    for path in files:
        with open(path, "rb", buffering=1 << 20) as handle:
            for raw in handle:
                loads(raw)
                rows += 1
    return rows


def _read_files(output: Path) -> tuple[Path, Path, Path]:
    paths = RunPaths.for_output(output)
    return paths.results, paths.failures, paths.materialized_inputs


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (the aggregation's worker processes)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _best(repeat: int, work: Any) -> tuple[float, float, Any]:
    """The best wall time and best CPU time of ``repeat`` runs of ``work``, and the last result."""
    best, best_cpu, value = float("inf"), float("inf"), None
    for _ in range(max(repeat, 1)):
        gc.collect()
        started, cpu = time.perf_counter(), _cpu()
        value = work()
        best = min(best, time.perf_counter() - started)
        best_cpu = min(best_cpu, _cpu() - cpu)
    return best, best_cpu, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--limit", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--workers", type=int, default=None, help="aggregation worker processes (default: CPUs)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="build (or reuse) shards in this folder")
    parser.add_argument(
        "--glob",
        action="store_true",
        help="give aggregation one glob of the shard outputs, not one path each",
    )
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="gymslurm-bench-aggregate-"))
    try:
        outputs = [root / f"shard{s:04d}" / "out.jsonl" for s in range(args.shards)]
        per = args.rollouts // args.shards
        started = time.perf_counter()
        for s, output in enumerate(outputs):
            if not output.exists():
                output.parent.mkdir(parents=True, exist_ok=True)
                count = per + (args.rollouts - per * args.shards if s == args.shards - 1 else 0)
                build_shard(output, s * per, count, seed=s)
        print(
            f"built {args.shards} shards, {args.rollouts} rollouts in {time.perf_counter() - started:.1f} s"
        )
        files = [p for o in outputs for p in _read_files(o)]
        bare_parse(files)  # warm the page cache for both measurements
        floor, floor_cpu, rows = _best(args.repeat, lambda: bare_parse(files))
        inputs = (str(root / "shard*" / "out.jsonl"),) if args.glob else tuple(map(str, outputs))
        options = AggregateOptions(inputs=inputs, output=root / "merged.jsonl", workers=args.workers)
        print(f"inputs:     {'one glob, ' + inputs[0] if args.glob else f'{len(inputs)} paths'}")
        took, took_cpu, result = _best(args.repeat, lambda: aggregate(options, written_at="bench"))
        ratio = took / floor
        lines = f"{rows} lines (results, sidecars, materialized inputs)"
        print(f"bare parse: {lines} in {floor:.2f} s (cpu {floor_cpu:.2f} s)")
        merged = f"{result.coverage['expected']} rollouts, {result.merged_rows} merged"
        print(f"aggregate:  {merged} in {took:.2f} s (cpu {took_cpu:.2f} s, worker processes included)")
        print(f"cpu ratio:  {took_cpu / floor_cpu:.2f}x (the work done, whatever the parallelism)")
        verdict = "OK" if ratio <= args.limit else "OVER LIMIT"
        print(f"ratio:      {ratio:.2f}x wall (limit {args.limit}x) -> {verdict}")
        return 0 if ratio <= args.limit else 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
