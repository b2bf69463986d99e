"""Benchmark: ``gymslurm status`` over 1,000 chains of 3 jobs each.

Builds a run whose 1,000 shard ledgers hold 3 decided links each plus a pending successor, with
a coverage file per shard, on a cluster without accounting (as the sandbox), puts a fake
``squeue``/``sacct`` on PATH that prints the 4,000 rows Slurm would (and counts its calls), then
measures ``status`` in-process (the document, and the table rendered as ``status`` prints it) and
as the whole CLI (``python -m gymslurm status RUN --json`` and the table, start-up included).
Targets (issue 14): ≤ 0.5 s for the document and the table, one Slurm query; checked on CPU time,
wall time printed beside it. The CLI's CPU time is
reported beside its wall time (on a loaded shared machine the wall time of a fresh Python mostly
measures the other users). Prints the figures and their ratio to the limit; exits 1 when a target
is missed.

Run from the repository root: ``python bench/status.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omegaconf import OmegaConf

from gymslurm.launcher.backend import SlurmBackend
from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.ledger import BudgetsRecord, DecisionRecord, Started, Submitted
from gymslurm.launcher.rundir import RunDir, RunInfo, atomic_write
from gymslurm.launcher.views.status import print_table, run_status

CHAINS, JOBS, LIMIT_S, LIMIT_QUERIES = 1000, 3, 0.5, 1


def build_run(root: Path) -> tuple[RunDir, list[str]]:
    """A run with CHAINS ledgers of JOBS links each; returns it and the squeue lines."""
    run = RunDir(root / "bench-run")
    info = RunInfo(name=run.name, benchmark="bench", overrides=[], created_at="2026-01-01T00:00:00+00:00",
                   backend="slurm", shards=CHAINS, workdir=str(root), output_stem="rollouts",
                   infra_retry_limit=3, max_walltime_s=86400.0, accounting=False)  # fmt: skip
    atomic_write(run.info_path, info.model_dump_json().encode())
    config = {
        "name": "bench",
        "dataset": "d.jsonl",
        "shards": CHAINS,
        "slurm": {"max_walltime": "1-00:00:00"},
    }
    atomic_write(run.config_path, OmegaConf.to_yaml(OmegaConf.create(config)).encode())
    lines, job = [], 1000
    for shard in range(CHAINS):
        ledger, budgets = run.ledger(shard), Budgets()
        for link in range(JOBS):
            job += 1
            ledger.append(Submitted(job_id=str(job), after=str(job - 1) if link else None))
            ledger.append(Started(job_id=str(job)))
            after = Budgets(budgets.jobs + 1, budgets.walltime_s + 600, budgets.infra_retries_used)
            ledger.append(DecisionRecord(
                job_id=str(job), end="t", elapsed_s=600, slurm_state="RUNNING", exit_code=75,
                decision=Decision.CONTINUE, reason="collector exit 75",
                budgets_before=BudgetsRecord.of(budgets), budgets_after=BudgetsRecord.of(after),
            ))  # fmt: skip
            budgets = after
            lines.append(
                f"{job}|gs-bench-s{shard:03d}|COMPLETED|None|(null)|10:00|1:00:00|2026-01-01T00:00:00"
            )
        job += 1
        ledger.append(Submitted(job_id=str(job), after=str(job - 1)))
        coverage = {"format_version": 1, "expected": 100, "successful": 60, "failed": 1,
                    "intentionally_omitted": 0, "written_at": "2026-01-01T00:00:00+00:00",
                    "failed_by_class": {"timeout": 1}}  # fmt: skip
        atomic_write(run.shard_output(shard, "rollouts").with_name("rollouts_coverage.json"),
                     json.dumps(coverage).encode())  # fmt: skip
        lines.append(
            f"{job}|gs-bench-s{shard:03d}|PENDING|Dependency|afterany:{job - 1}(unfulfilled)|0:00|1:00:00|N/A"
        )
    return run, lines


def fake_slurm(bin_dir: Path, lines: list[str], counter: Path) -> None:
    """squeue printing ``lines`` and sacct saying accounting is disabled; both count their calls."""
    bin_dir.mkdir()
    (bin_dir / "squeue.txt").write_text("\n".join(lines) + "\n")
    for name, body in (("squeue", f"cat {bin_dir / 'squeue.txt'}"),
                       ("sacct", "echo 'Slurm accounting storage is disabled' >&2; exit 1")):  # fmt: skip
        script = bin_dir / name
        script.write_text(f"#!/bin/bash\necho {name} >> {counter}\n{body}\n")
        script.chmod(0o755)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the fake squeue)."""
    mine, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + kids.ru_utime + kids.ru_stime


def _cli(run: RunDir, *extra: str) -> tuple[float, float]:
    """Wall and CPU seconds of ``python -m gymslurm status RUN [extra]``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gymslurm", "status", str(run.root), *extra], check=True,
                   capture_output=True, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    """Measure and print; 1 when a target is missed."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run, lines = build_run(root)
        counter = root / "calls.txt"
        fake_slurm(root / "bin", lines, counter)
        os.environ["PATH"] = f"{root / 'bin'}:{os.environ['PATH']}"
        run_status(run, SlurmBackend())  # warm the file cache, as a second look at a run would be
        backend = SlurmBackend()
        cpu0, t0 = _cpu(), time.perf_counter()
        report = run_status(run, backend)
        in_process, doc_cpu = time.perf_counter() - t0, _cpu() - cpu0
        queries = backend.queries
        assert len(report["shards"]) == CHAINS and {r["verdict"] for r in report["shards"]} == {"WAITING"}
        cpu0, t0 = _cpu(), time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            print_table(run_status(run, SlurmBackend()))
        table, table_cpu = time.perf_counter() - t0, _cpu() - cpu0
        counter.unlink()
        cli_json, cli_json_cpu = _cli(run, "--json")
        cli_queries = len(counter.read_text().splitlines())
        cli_table, cli_table_cpu = _cli(run)
    load = os.getloadavg()[0]
    print(f"status over {CHAINS} chains x {JOBS} jobs ({CHAINS * (JOBS + 1)} squeue rows); load {load:.1f}")
    print(f"  document:   {in_process:.3f} s wall, {doc_cpu:.3f} s CPU ({doc_cpu / LIMIT_S:.2f} of the "
          f"{LIMIT_S} s limit), {queries} Slurm queries (limit {LIMIT_QUERIES})")  # fmt: skip
    print(f"  table:      {table:.3f} s wall, {table_cpu:.3f} s CPU ({table_cpu / LIMIT_S:.2f} of the "
          "limit), document included")  # fmt: skip
    print(f"  CLI --json: {cli_json:.3f} s wall, {cli_json_cpu:.3f} s CPU, {cli_queries} Slurm queries")
    print(f"  CLI table:  {cli_table:.3f} s wall, {cli_table_cpu:.3f} s CPU (Python start-up included)")
    # CPU, not wall: on the shared 2-core machine (load ~10) wall time mostly measures the others.
    ok = (
        doc_cpu <= LIMIT_S
        and table_cpu <= LIMIT_S
        and queries <= LIMIT_QUERIES
        and cli_queries <= LIMIT_QUERIES
    )
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
