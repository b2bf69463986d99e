"""Benchmark: ``status`` of a held 10,000-shard run on the Slurm sandbox against a bare ``squeue`` of its
jobs plus parsing (issue 32: ≤ 1.5×), and the code before a change beside it in the same minutes.

On cluster ``b``, as the sandbox's user: ``--shards`` shards of the stand-in's benchmark submitted
held (``--hold``: nothing runs; bench/status_foreign.py's held run: the first links' arrays and their
spares, every task one ``squeue -r`` row). Then, best of ``--repeat`` each, in turn:

- ``run_status`` in-process (wall and CPU, its squeue included; bench/scale_sandbox.py's
  ``status_in_process``, the garbage collector off as ``gymslurm status`` runs it) with its counts,
  which do not depend on noise: scheduler queries, queue rows typed, files opened (an audit hook on
  ``open``);
- the bare squeue of the run's jobs, a line per array task (``squeue -u USER -r -t all
  --name=gs-R,gs-R-agg``), plus splitting its rows: the limit, 1.5× it; and beside it (printed, not
  the limit) the same without ``-r``, an array's pending tasks on one line, the form status asks
  for since then, plus making the task ids of each such line;
- ``--after DIR``: the status of the code in DIR (default this checkout; a copy keeps edits made
  while the bench waits for the heavy lock out of it);
- with ``--before DIR`` (a checkout of the code before, e.g. ``git archive HEAD~1``): the same status
  run by that code in a child process, so before and after are measured in the same minutes.

Then the run is cancelled (its own job ids only) and its directory deleted. Heavy: run it alone,
``flock /work/heavy.lock nice -n -10 python bench/status_held.py [--shards 10000] [--before DIR]``, as
root with the sandbox up. On a machine loaded past its CPUs the verdict's figure is CPU. Exits 1 when
the target is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_sandbox import STATUS_LIMIT, bare_squeue, cleanup, counted_user, run_names, submit  # noqa: E402
from bench.status_foreign import held_benchmark  # noqa: E402

# One status in-process, by the code on sys.path[0], printed as JSON: wall, CPU, queries, counts.
MEASURE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from bench.status_held import measured
print(json.dumps(measured(sys.argv[2])))
"""


def measured(run: str) -> dict[str, Any]:
    """``run_status`` of ``run`` once (bench/scale_sandbox.py's ``status_in_process``): its wall and CPU
    seconds and queries, the files it opened and the rows of its document."""
    from bench.scale_sandbox import status_in_process
    from gymslurm.site import slurm

    opened = [0]

    def hook(event: str, _args: tuple[Any, ...]) -> None:
        if event == "open":
            opened[0] += 1

    sys.addaudithook(hook)  # (stays: each measure is its own process, or counts from its own start)
    typed = [0]
    parse = slurm.parse_squeue

    def counting(stdout: Any) -> list[slurm.QueueRow]:
        rows = parse(stdout)
        typed[0] += len(rows)
        return rows

    slurm.parse_squeue = counting  # counts the queue rows typed (the same parse, nothing skipped)
    start = opened[0]
    gc.disable()  # as `gymslurm status` runs it (commands/status.py: no collector passes over its rows)
    wall, cpu, queries = status_in_process(Path(run))
    return {"wall": wall, "cpu": cpu, "queries": queries, "opened": opened[0] - start, "typed": typed[0]}


def in_child(code: Path, run: Path) -> dict[str, Any]:
    """:func:`measured` run by the code in ``code`` (its own bench/status_held.py is this file's
    copy), in a fresh process."""
    mine = Path(__file__).resolve()
    if (code / "bench" / "status_held.py").resolve() != mine:
        shutil.copy(mine, code / "bench" / "status_held.py")
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(code), str(run)],
        capture_output=True,
        text=True,
        check=True,
        cwd=code,
        env={**os.environ, "PYTHONPATH": str(code)},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def best(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The sample of least CPU, with the least wall of all beside it."""
    low = min(samples, key=lambda s: s["cpu"])
    return {**low, "wall": min(s["wall"] for s in samples)}


def main() -> int:
    """Submit the held run, measure, cancel, print; 1 when the target is missed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout of the code before the change")
    parser.add_argument("--after", type=Path, default=ROOT, help="the code measured (default: this checkout)")
    args = parser.parse_args()
    python, user, _counter, bin_dir = counted_user("bench-held", "status-held")
    runs: list[Path] = []
    f: dict[str, Any] = {"load0": os.getloadavg()}
    try:
        run, f["submit_s"], _ = submit(
            user, python, held_benchmark(user, python, args.shards), bin_dir, f"shards={args.shards}"
        )
        runs.append(run)
        after, before, bare, compact = [], [], [], []
        for _ in range(args.repeat):  # interleaved: each figure sees the same minutes
            bare.append(bare_squeue(run_names(run)))
            compact.append(bare_squeue(run_names(run), per_task=False))
            after.append(in_child(args.after, run))
            if args.before:
                before.append(in_child(args.before, run))
        f["bare"] = min(bare)
        f["compact"] = min(compact)
        f["after"] = best(after)
        f["before"] = best(before) if before else None
    finally:
        f["remaining"] = cleanup(user, python, runs)
    f["load"] = os.getloadavg()
    return report(f, args.shards)


def report(f: dict[str, Any], shards: int) -> int:
    """Print the figures with their limit; 0 when the target is met."""
    load = f["load"]
    loaded = load[0] > (os.cpu_count() or 1)
    bare_s, bare_cpu, rows = f["bare"]
    print(
        f"held {shards}-shard run on cluster b; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"(at the start {f['load0'][0]:.1f}) on {os.cpu_count()} CPUs; the verdict on "
        f"{'CPU' if loaded else 'wall'}"
    )
    print(
        f"bare squeue of the run's jobs -r ({rows} rows) + split: {bare_s:.3f} s wall, {bare_cpu:.3f} s CPU"
    )
    compact_s, compact_cpu, _ = f["compact"]
    print(
        f"bare squeue of the run's jobs without -r (an array's pending tasks one line) + split + task ids: "
        f"{compact_s:.3f} s wall, {compact_cpu:.3f} s CPU (the query status runs since issue 32's compact "
        "form; not the limit)"
    )
    ok = True
    for key in ("before", "after"):
        m = f.get(key)
        if not m:
            continue
        met = (m["cpu"] if loaded else m["wall"]) <= STATUS_LIMIT * (bare_cpu if loaded else bare_s)
        ok = ok and met if key == "after" else ok
        print(
            f"status {key}: {m['wall']:.3f} s wall, {m['cpu']:.3f} s CPU: {m['wall'] / bare_s:.2f}x wall, "
            f"{m['cpu'] / bare_cpu:.2f}x CPU (limit {STATUS_LIMIT}x{'' if met else ': MISSED'}; "
            f"{m['wall'] / compact_s:.2f}x the wall without -r); "
            f"{m['queries']} queries, {m['typed']} queue rows typed, {m['opened']} files opened"
        )
    print(f"cleanup: {f['remaining']} job(s) of the run left in the queue; directory deleted")
    ok = ok and f["remaining"] == 0
    print("target met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
