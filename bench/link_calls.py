"""Benchmark: what one link asks of Slurm, at 1, 100, 1,000 and 10,000 shards (issue 32).

A real link (``run_link``, the stand-in collector, exit 75: it continues) of an array run whose
first links and spare arrays are queued in a scripted Slurm (tests/unit/scripted_slurm.py: Slurm
22.05's text, read by the client's own parsers, which count the calls and the rows they return).
Beside each, in the same run, the limit it is measured against: the rows of the whole-queue
``squeue -u $USER -r -t all`` a link ran before issue 32 (every pending array task is a row), and
the 1-shard link's own figures. Targets: queries (squeue, sacct, scontrol) ≤ 3 and rows ≤ 10 per
link, the same at every size. Prints the table and the ratios; exits 1 when a target is missed.

Run from the repository root: ``python bench/link_calls.py`` (~15 s; no real Slurm is asked).
The same figures from a real 10,000-shard run on the sandbox: bench/scale_sandbox.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gymslurm.job.link import run_link
from gymslurm.site.backend import SlurmBackend, this_job
from tests.unit.scripted_slurm import ScriptedSlurm, array_run, benchmark

SIZES = (1, 100, 1_000, 10_000)
QUERIES = ("squeue", "sacct", "scontrol")


def one_link(tmp: Path, shards: int) -> tuple[ScriptedSlurm, int]:
    """Run shard 0's first link; the client that served it and the whole queue's row count."""
    client = ScriptedSlurm()
    run = array_run(tmp, shards, client, [{"exit": 75, "progress": 1}])
    whole_queue = len(client.states)
    settings = benchmark(tmp, shards)
    run.shard_input(0).parent.mkdir(parents=True, exist_ok=True)
    run.shard_input(0).write_text('{"q": 1}\n')
    client.states["100_0"] = "RUNNING"
    os.environ["SLURM_JOB_ID"] = "100_0"
    backend = SlurmBackend(client, accounting=True)
    with contextlib.redirect_stderr(io.StringIO()):
        run_link(run, 0, settings, backend, this_job(backend))
    return client, whole_queue


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shards in SIZES:
            client, whole = one_link(Path(tmp) / str(shards), shards)
            queries = sum(client.calls[name] for name in QUERIES)
            rows.append((shards, queries, client.rows, dict(client.calls), whole))
    base_queries, base_rows = rows[0][1], rows[0][2]
    print(f"{'shards':>7} {'queries':>7} {'rows':>5} {'whole-queue rows (before)':>26}  calls by command")
    for shards, queries, read, calls, whole in rows:
        print(f"{shards:>7} {queries:>7} {read:>5} {whole:>26}  {calls}")
    large = rows[-1]
    print(
        f"\n10,000 shards vs 1: queries {large[1] / base_queries:.2f}x, rows {large[2] / base_rows:.2f}x; "
        f"rows vs the whole-queue squeue at 10,000: {large[2] / large[4]:.5f}x"
    )
    ok = all(q <= 3 and r <= 10 and (q, r) == (base_queries, base_rows) for _, q, r, _, _ in rows)
    print("targets (queries <= 3, rows <= 10, the same at every size):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
