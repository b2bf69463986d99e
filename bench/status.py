"""Benchmark: ``gymslurm status`` of a 10,000-shard array run, mid-way, and of every shard busy.

Builds a run of ``SHARDS`` shards in ``ceil(SHARDS / 1001)`` job arrays, as a throttled run looks
mid-way: ``DONE`` shards (two links each: a CONTINUE and a DONE, coverage written), ``RUNNING``
shards (one link decided, the next running with a queued successor, a heartbeat and a live
progress record) and the rest still pending array tasks (no ledger yet), on a cluster without
accounting (as the sandbox). A fake ``squeue``/``sacct`` on PATH prints the rows Slurm would (with
``-r`` every pending task is its own row) and counts its calls. It measures ``status`` in-process
(the document, and the table as ``status`` prints it) and as the whole CLI (``--json`` and the
table, start-up included), each beside a bare loop in the same run: the same files opened and
read with plain ``open``/``orjson`` and the same ``squeue`` output split into rows, nothing else.
Then the same with every shard busy (three links each, coverage each), for scale (no target).
Targets (issue 19): the CLI table and ``--json`` ≤ 1 s with one scheduler query, judged on the
CLI's CPU seconds (on a shared machine wall time is mostly the other processes'; both are printed,
with a bare interpreter's start in the same run). Prints the figures, the ratios, and exits 1 when
a target is missed.

Run from the repository root: ``python bench/status.py``.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
from omegaconf import OmegaConf

from gymslurm.coverage import Coverage
from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.ledger import BudgetsRecord, DecisionRecord, Started, Submitted
from gymslurm.launcher.rundir import ArrayPart, ArrayRecord, RunDir, RunInfo, atomic_write
from gymslurm.launcher.views.status import run_status
from gymslurm.launcher.views.table import print_table
from gymslurm.site.backend import SlurmBackend
from gymslurm.store import live

SHARDS, CHUNK, DONE, RUNNING, LIMIT_S, LIMIT_QUERIES = 10_000, 1001, 2_000, 200, 1.0, 1
AT = "2026-01-01T00:00:00+00:00"


def _line(record: object) -> bytes:
    return orjson.dumps(record.model_dump(mode="json")) + b"\n"  # type: ignore[attr-defined]


def _decision(job: str, before: Budgets, decision: Decision, code: int) -> tuple[DecisionRecord, Budgets]:
    after = Budgets(before.jobs + 1, before.walltime_s + 600, before.infra_retries_used)
    record = DecisionRecord(
        job_id=job,
        end=AT,
        elapsed_s=600,
        slurm_state="RUNNING",
        exit_code=code,
        decision=decision,
        reason=f"collector exit {code}",
        budgets_before=BudgetsRecord.of(before),
        budgets_after=BudgetsRecord.of(after),
    )
    return record, after


def build_run(root: Path, busy: bool) -> tuple[RunDir, list[str]]:
    """The run (``busy``: every shard has three links and coverage) and the squeue lines of it."""
    run = RunDir(root / ("busy-run" if busy else "mid-run"))
    info = RunInfo(
        name=run.name,
        benchmark="bench",
        overrides=[],
        created_at=AT,
        backend="slurm",
        shards=SHARDS,
        workdir=str(root),
        output_stem="rollouts",
        infra_retry_limit=3,
        max_walltime_s=86400.0,
        accounting=False,
        array=True,
    )
    atomic_write(run.info_path, info.model_dump_json().encode())
    config = {
        "name": "bench",
        "dataset": "d.jsonl",
        "shards": SHARDS,
        "slurm": {"max_walltime": "1-00:00:00"},
    }
    atomic_write(run.config_path, OmegaConf.to_yaml(OmegaConf.create(config)).encode())
    parts = [
        ArrayPart(job_id=str(100 + i), base=base, size=min(CHUNK, SHARDS - base))
        for i, base in enumerate(range(0, SHARDS, CHUNK))
    ]
    record = ArrayRecord(
        job_id=parts[0].job_id, shards=SHARDS, max_running=None, at=AT, chunk=CHUNK, parts=parts
    )
    atomic_write(run.array_path, record.model_dump_json().encode())
    lines, job = [], 100_000
    for shard in range(SHARDS):
        first = record.task(shard)
        kind = (
            "busy" if busy else "done" if shard < DONE else "running" if shard < DONE + RUNNING else "pending"
        )
        if kind == "pending":
            lines.append(f"{first}|gs-bench|PENDING|JobArrayTaskLimit|(null)|0:00|1:00:00|N/A")
            continue
        data, budgets, jobs = b"", Budgets(), [first]
        links = 3 if busy else 2
        for link in range(links):
            if link:
                job += 1
                jobs.append(f"{job}_{shard % CHUNK}")
                data += _line(Submitted(job_id=jobs[-1], after=jobs[-2], by=jobs[-2]))
            data += _line(Started(job_id=jobs[-1], at=AT))
            last = kind == "done" and link == links - 1
            if kind == "running" and link == links - 1:
                break
            decision, budgets = _decision(
                jobs[-1], budgets, Decision.DONE if last else Decision.CONTINUE, 0 if last else 75
            )
            data += _line(decision)
        state = "COMPLETED" if kind == "done" else "RUNNING" if kind == "running" else "COMPLETED"
        lines += [f"{j}|gs-bench|COMPLETED|None|(null)|10:00|1:00:00|{AT[:19]}" for j in jobs[:-1]]
        lines.append(f"{jobs[-1]}|gs-bench|{state}|None|(null)|10:00|1:00:00|{AT[:19]}")
        for j in jobs:  # each link's job output, as Slurm leaves it: logs/ holds a file per link
            log = run.root / "logs" / f"shard-{shard:03d}-{j}.out"
            log.parent.mkdir(exist_ok=True)
            log.touch()
        if kind != "done":
            job += 1
            successor = f"{job}_{shard % CHUNK}"
            data += _line(Submitted(job_id=successor, after=jobs[-1], by=jobs[-1]))
            lines.append(
                f"{successor}|gs-bench|PENDING|Dependency|afterany:{jobs[-1]}(unfulfilled)|0:00|1:00:00|N/A"
            )
        atomic_write(run.ledger(shard).path, data)
        ok = 100 if kind == "done" else 60
        output = run.shard_output(shard, "rollouts")
        atomic_write(output.with_name("rollouts_coverage.json"), _coverage(ok).model_dump_json().encode())
        if kind == "running":  # a live link: its heartbeat and its collector's progress record, fresh
            now = time.time()
            live.write_heartbeat(
                run.heartbeat(shard),
                live.Heartbeat(
                    job_id=jobs[-1],
                    start=AT,
                    at=AT,
                    epoch=now,
                    interval_s=3600,
                    pid=1,
                    collector_pid=2,
                    collector_started=now,
                    stall_window_s=None,
                ),
            )
            live.write_progress(
                live.progress_path(output),
                live.LiveProgress(
                    written_at=AT,
                    epoch=now,
                    job_id=jobs[-1],
                    pid=2,
                    expected=100,
                    successful=70,
                    failed=0,
                    intentionally_omitted=0,
                    in_flight=4,
                    new_outcomes=10,
                    started_epoch=now - 60,
                    rate_per_s=0.2,
                ),
            )
    return run, lines


def _coverage(ok: int) -> Coverage:
    """The coverage a collector writes after ``ok`` of 100 rollouts succeeded (the rest not started)."""
    return Coverage(
        run_id="bench",
        expected=100,
        successful=ok,
        measured=ok,
        masked=0,
        unscored=0,
        failed=0,
        intentionally_omitted=0,
        not_started=100 - ok,
        missing=0,
        complete=ok == 100,
        reconciled=True,
        scored=ok,
        attempts=ok,
        counted_failures=0,
        failure_budget_exhausted=0,
        max_rollout_attempts=3,
        retry_terminal_timeouts=False,
        retryable=0,
        progress_outcomes_recorded=ok,
        failed_by_class={},
        historical_failed_attempts=0,
        identity_verified=True,
        written_at=AT,
    )


def bare_loop(run: RunDir, squeue_text: Path) -> float:
    """Seconds to open and read the same files (ledger, coverage, live record, heartbeat) with plain
    open/orjson and to split the same squeue output into rows: the floor any status pays."""
    t0 = time.perf_counter()
    rows = [line.split("|") for line in squeue_text.read_text().splitlines()]
    assert rows
    for shard in range(SHARDS):
        for path in (
            run.ledger(shard).path,
            run.shard_output(shard, "rollouts").with_name("rollouts_coverage.json"),
            run.shard_output(shard, "rollouts").with_name("rollouts_progress.json"),
            run.heartbeat(shard),
        ):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            if path.suffix == ".jsonl":  # the ledger: a record a line; the others are one JSON document
                for raw in data.splitlines():
                    orjson.loads(raw)
            else:
                orjson.loads(data)
    return time.perf_counter() - t0


def fake_slurm(bin_dir: Path, lines: list[str], counter: Path) -> None:
    """squeue printing ``lines`` and sacct saying accounting is disabled; both count their calls."""
    bin_dir.mkdir()
    (bin_dir / "squeue.txt").write_text("\n".join(lines) + "\n")
    for name, body in (
        ("squeue", f"cat {bin_dir / 'squeue.txt'}"),
        ("sacct", "echo 'Slurm accounting storage is disabled' >&2; exit 1"),
    ):
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
    subprocess.run(
        [sys.executable, "-m", "gymslurm", "status", str(run.root), *extra],
        check=True,
        capture_output=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _interpreter() -> tuple[float, float]:
    """Wall and CPU seconds of a bare ``python -c pass``: the floor under any CLI figure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(root: Path, busy: bool) -> dict[str, float]:
    """Every figure of one run shape."""
    run, lines = build_run(root, busy)
    counter = root / f"calls-{busy}.txt"
    bin_dir = root / f"bin-{busy}"
    fake_slurm(bin_dir, lines, counter)
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}:{path}"
    try:
        run_status(run, SlurmBackend(accounting=False))  # warm the file cache, as a second look would be
        bare = bare_loop(run, bin_dir / "squeue.txt")
        backend = SlurmBackend(accounting=False)
        cpu0, t0 = _cpu(), time.perf_counter()
        report = run_status(run, backend)
        doc, doc_cpu = time.perf_counter() - t0, _cpu() - cpu0
        queries = backend.queries
        assert len(report.shards) == SHARDS
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            print_table(run_status(run, SlurmBackend(accounting=False)))
        table = time.perf_counter() - t0
        counter.unlink()
        cli_json, cli_json_cpu = _cli(run, "--json")
        cli_queries = len(counter.read_text().splitlines())
        assert not (run.root / "report.html").exists(), "status --json renders no page"
        cli_fresh, cli_fresh_cpu = _cli(run)  # no page yet: rendered and written
        cli_table, cli_table_cpu = _cli(run)  # the page the last look wrote: kept (same data)
    finally:
        os.environ["PATH"] = path
    verdicts = " ".join(f"{n} {v}" for v, n in sorted(report.summary.verdicts.items()))
    return {
        "doc": doc,
        "doc_cpu": doc_cpu,
        "queries": queries,
        "table": table,
        "cli_json": cli_json,
        "cli_json_cpu": cli_json_cpu,
        "cli_queries": cli_queries,
        "cli_table": cli_table,
        "cli_table_cpu": cli_table_cpu,
        "cli_fresh": cli_fresh,
        "cli_fresh_cpu": cli_fresh_cpu,
        "bare": bare,
        "rows": len(lines),
        "verdicts": verdicts,
    }  # type: ignore[dict-item]


def main() -> int:
    """Measure and print; 1 when a target is missed."""
    with tempfile.TemporaryDirectory() as tmp:
        mid = measure(Path(tmp), busy=False)
        busy = measure(Path(tmp), busy=True)
    load = os.getloadavg()[0]
    ok = True
    for name, f in (("mid-way", mid), ("every shard busy (no target)", busy)):
        print(f"status of {SHARDS} shards, {name}: {f['verdicts']}; {f['rows']} squeue rows; load {load:.1f}")
        print(
            f"  CLI --json: {f['cli_json']:.3f} s wall ({f['cli_json'] / LIMIT_S:.2f} of the "
            f"{LIMIT_S:.0f} s limit), {f['cli_json_cpu']:.3f} s CPU, {f['cli_queries']:.0f} scheduler "
            f"queries (limit {LIMIT_QUERIES})"
        )
        print(
            f"  CLI --json renders no report.html; CLI table with the page unchanged (kept): "
            f"{f['cli_table']:.3f} s wall ({f['cli_table'] / LIMIT_S:.2f} of the limit), "
            f"{f['cli_table_cpu']:.3f} s CPU (Python start-up included)"
        )
        print(
            f"  CLI table writing report.html anew: {f['cli_fresh']:.3f} s wall, "
            f"{f['cli_fresh_cpu']:.3f} s CPU "
            f"({f['cli_fresh_cpu'] / LIMIT_S:.2f} of the limit)"
        )
        print(
            f"  in-process: document {f['doc']:.3f} s ({f['doc_cpu']:.3f} s CPU, {f['queries']:.0f} "
            "queries), "
            f"table {f['table']:.3f} s; bare loop over the same files and rows {f['bare']:.3f} s: "
            f"document {f['doc'] / f['bare']:.1f}x"
        )
    bare_wall, bare_cpu = _interpreter()
    print(
        f"bare interpreter (python -c pass, this machine's site hooks included): {bare_wall:.3f} s wall, "
        f"{bare_cpu:.3f} s CPU; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    # The verdict is on CPU seconds: on a shared machine (load above its CPUs) wall time is mostly
    # the other processes' (see the figures printed), CPU time is what status itself costs.
    ok = all(mid[key] <= LIMIT_S for key in ("cli_json_cpu", "cli_table_cpu", "cli_fresh_cpu"))
    ok = ok and mid["cli_queries"] <= LIMIT_QUERIES and mid["queries"] <= LIMIT_QUERIES
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
