"""Benchmark: ``gymslurm status`` over 50 chains of 10 jobs each.

Builds a run whose 50 shard ledgers hold 10 decided links each plus a pending successor, puts a
fake ``squeue``/``sacct`` on PATH that prints the 550 rows Slurm would (and counts its calls), then
measures ``status`` in-process and as the whole CLI (``python -m gymslurm status RUN --json``,
start-up included). Targets (issue 5): under 1 s, at most 2 Slurm queries. Prints the figures and
their ratio to the limit; exits 1 when a target is missed.

Run from the repository root: ``python bench/status.py``.
"""

from __future__ import annotations

import os
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
from gymslurm.launcher.status import run_status

CHAINS, JOBS, LIMIT_S, LIMIT_QUERIES = 50, 10, 1.0, 2


def build_run(root: Path) -> tuple[RunDir, list[str]]:
    """A run with CHAINS ledgers of JOBS links each; returns it and the squeue lines."""
    run = RunDir(root / "bench-run")
    info = RunInfo(name=run.name, benchmark="bench", overrides=[], created_at="2026-01-01T00:00:00+00:00",
                   backend="slurm", shards=CHAINS, workdir=str(root), output_stem="rollouts",
                   infra_retry_limit=3, max_walltime_s=86400.0)  # fmt: skip
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


def main() -> int:
    """Measure and print; 1 when a target is missed."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run, lines = build_run(root)
        counter = root / "calls.txt"
        fake_slurm(root / "bin", lines, counter)
        os.environ["PATH"] = f"{root / 'bin'}:{os.environ['PATH']}"
        backend = SlurmBackend()
        t0 = time.perf_counter()
        report = run_status(run, backend)
        in_process = time.perf_counter() - t0
        queries = backend.queries
        assert len(report["shards"]) == CHAINS and {r["verdict"] for r in report["shards"]} == {"WAITING"}
        counter.unlink()
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gymslurm", "status", str(run.root), "--json"], check=True,
                       capture_output=True, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
        cli = time.perf_counter() - t0
        cli_queries = len(counter.read_text().splitlines())
    print(f"status over {CHAINS} chains x {JOBS} jobs ({CHAINS * (JOBS + 1)} squeue rows)")
    print(f"  in-process: {in_process:.3f} s  ({in_process / LIMIT_S:.2f} of the {LIMIT_S:.0f} s limit), "
          f"{queries} Slurm queries (limit {LIMIT_QUERIES})")  # fmt: skip
    print(f"  whole CLI:  {cli:.3f} s  ({cli / LIMIT_S:.2f} of the limit, Python start-up included), "
          f"{cli_queries} Slurm queries")  # fmt: skip
    ok = in_process < LIMIT_S and cli < LIMIT_S and queries <= LIMIT_QUERIES and cli_queries <= LIMIT_QUERIES
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
