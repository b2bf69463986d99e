"""A suite run in ``status``: one line per benchmark (coverage, verdict, headline, its run folder).

The suite's chains are shown by the run's table as any run's; these lines say, for each benchmark,
how far its shards got (outcomes of expected rollouts, from each shard's coverage file), its verdict
over its shards (suite_aggregation.benchmark_verdict), its headline from ``suite_metrics.json`` once
the suite's aggregation wrote it, and the folder that is its own run (status, aggregate, reverify
read it alone).
"""

from __future__ import annotations

from gymslurm.errors import GymslurmError
from gymslurm.job.collector_files import saved_coverage
from gymslurm.job.suite_aggregation import benchmark_verdict
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.suite_run import is_suite, member_run, read_suite_record
from gymslurm.launcher.views.document import SuiteRow
from gymslurm.store.suite_metrics import read_suite_metrics


def suite_rows(run: RunDir) -> list[SuiteRow]:
    """Each benchmark of a suite run as ``status --json`` gives it ([] for a run of one benchmark)."""
    if not is_suite(run):
        return []
    record = read_suite_record(run)
    try:
        metrics = read_suite_metrics(run.root)
    except GymslurmError:
        metrics = None
    scores = {s.name: s for s in metrics.benchmarks} if metrics is not None else {}
    rows = []
    for entry in record.benchmarks:
        sub = member_run(run, entry.name)
        done = expected = 0
        for shard in range(entry.shards):
            coverage = saved_coverage(sub.shard_output(shard, entry.output_stem))
            if coverage is not None:
                expected += coverage.expected
                done += coverage.successful + coverage.failed + coverage.intentionally_omitted
        score = scores.get(entry.name)
        rows.append(
            SuiteRow(
                benchmark=entry.name,
                shards=entry.shards,
                verdict=benchmark_verdict(run, entry),
                outcomes=done,
                expected=expected or None,
                headline=None if score is None else score.model_dump(),
                run=str(sub.root),
            )
        )
    return rows


def suite_lines(rows: list[SuiteRow]) -> list[str]:
    """The lines a person reads (pure)."""
    if not rows:
        return []
    lines = [f"{'benchmark':<24} {'shards':>6} {'verdict':<10} {'coverage':>13}  {'headline':<28} run"]
    for row in rows:
        coverage = f"{row.outcomes}/{row.expected or '?'}"
        score = row.headline
        headline = "-"
        if score is not None and score["value"] is not None:
            low, high = score["ci95"] or (score["value"], score["value"])
            headline = (
                f"{score['value']:.3f} ±{score['stderr']:.3f} [{low:.2f},{high:.2f}] n={score['tasks']}"
            )
        name, shards, verdict = row.benchmark, row.shards, row.verdict
        lines.append(f"{name:<24} {shards:>6} {verdict:<10} {coverage:>13}  {headline:<28} {row.run}")
    return lines
