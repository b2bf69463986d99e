"""A suite run in ``status``: one line per benchmark (coverage, ETA, verdict, GPU-hours share,
headline, its run folder).

The suite's chains are shown by the run's table as any run's; these lines say, for each benchmark,
how far its shards got (outcomes of expected rollouts, from each shard's coverage file), its verdict
over its shards (suite_run.benchmark_verdict), its headline from ``suite_metrics.json`` once
the suite's aggregation wrote it, and the folder that is its own run (status, aggregate, reverify
read it alone). The ETA is its rollouts left at its running collectors' rate; its GPU-hours are the
suite's split by its share of the model server's busy time (``busy_s`` of its decision records).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gymslurm.errors import GymslurmError, StoreError
from gymslurm.launcher.ledger import DecisionRecord
from gymslurm.launcher.links import human_gpu_hours
from gymslurm.launcher.rundir import RunDir, is_suite
from gymslurm.launcher.suite_rules import eta_s, gpu_hours_split
from gymslurm.launcher.suite_run import benchmark_verdict, member_run, read_suite_record
from gymslurm.launcher.views.counts import human_duration
from gymslurm.launcher.views.document import SuiteRow
from gymslurm.launcher.views.status import shard_coverage
from gymslurm.store import live
from gymslurm.store.suite_metrics import read_suite_metrics


def suite_rows(run: RunDir, gpu_hours: float | None = None) -> list[SuiteRow]:
    """Each benchmark of a suite run as ``status --json`` gives it ([] for a run of one benchmark);
    ``gpu_hours``: the suite's, split over the benchmarks by their busy time."""
    if not is_suite(run):
        return []
    record = read_suite_record(run)
    try:
        metrics = read_suite_metrics(run.root)
    except GymslurmError:
        metrics = None
    scores = {s.name: s for s in metrics.benchmarks} if metrics is not None else {}
    rows, busy = [], {}
    for entry in record.benchmarks:
        sub = member_run(run, entry.name)
        done = expected = 0
        rate, running, busy[entry.name] = 0.0, False, 0.0
        for shard in range(entry.shards):
            output = sub.shard_output(shard, entry.output_stem)
            coverage, _ = shard_coverage(output)
            if coverage is not None:
                expected += coverage.expected
                done += coverage.successful + coverage.failed + coverage.intentionally_omitted
            progress = _live_progress(output)
            if progress is not None and not progress.ended:
                rate, running = rate + progress.rate_per_s, True
            busy[entry.name] += sum(
                r.busy_s or 0.0 for r in sub.ledger(shard).read() if isinstance(r, DecisionRecord)
            )
        score = scores.get(entry.name)
        rows.append(
            SuiteRow(
                benchmark=entry.name,
                shards=entry.shards,
                verdict=benchmark_verdict(run, entry),
                outcomes=done,
                expected=expected or None,
                eta_s=eta_s((expected - done) if expected else 1, rate, running),
                busy_s=round(busy[entry.name], 1),
                headline=None if score is None else score.model_dump(),
                run=str(sub.root),
            )
        )
    shares = gpu_hours_split(busy, gpu_hours).values()
    return [replace(row, gpu_hours=share) for row, share in zip(rows, shares, strict=True)]


def _live_progress(output: Path) -> live.LiveProgress | None:
    """The collector's live progress beside ``output`` (None: none, or unreadable)."""
    try:
        return live.read_progress(live.progress_path(output))
    except StoreError:
        return None


def suite_lines(rows: list[SuiteRow]) -> list[str]:
    """The lines a person reads (pure)."""
    if not rows:
        return []
    lines = [
        f"{'benchmark':<24} {'shards':>6} {'verdict':<10} {'coverage':>13} {'ETA':>8} {'GPU-hours':>11}"
        f"  {'headline':<28} run"
    ]
    for row in rows:
        coverage = f"{row.outcomes}/{row.expected or '?'}"
        headline = headline_text(row.headline)
        eta = "-" if row.eta_s is None else human_duration(row.eta_s)
        gpu = human_gpu_hours(row.gpu_hours)
        name, shards, verdict = row.benchmark, row.shards, row.verdict
        cells = f"{name:<24} {shards:>6} {verdict:<10} {coverage:>13} {eta:>8} {gpu:>11}"
        lines.append(f"{cells}  {headline:<28} {row.run}")
    return lines


def headline_text(score: dict[str, Any] | None) -> str:
    """A benchmark's headline, its standard error, 95% interval and task count (``-``: none yet)."""
    if score is None or score["value"] is None:
        return "-"
    low, high = score["ci95"] or (score["value"], score["value"])
    stderr = "" if score["stderr"] is None else f" ±{score['stderr']:.3f}"
    return f"{score['value']:.3f}{stderr} [{low:.2f},{high:.2f}] n={score['tasks']}"
