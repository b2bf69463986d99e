"""A suite's aggregation: each benchmark merged as its own run, then ``suite_metrics.json``.

Run by the suite's aggregation job (aggregation.py) once every suite chain ended. Each benchmark is
merged exactly as the same benchmark submitted alone is (its own ``on_failed_shard``, its own
command, into ``benchmarks/<name>/output/merged/``); a benchmark that cannot be merged (a shard that
did not finish, ``on_failed_shard: fail``) is listed with its verdict and no headline, and does not
stop the others'. The suite's aggregation is DONE when every benchmark whose shards all finished
DONE merged.
"""

from __future__ import annotations

from collections.abc import Callable

from gymslurm.exitcodes import ExitCode
from gymslurm.job.heartbeat import Signals, log
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.launcher.suite_run import benchmark_verdict, load_member_settings, member_run, read_suite_record
from gymslurm.store.suite_metrics import BenchmarkScore, read_task_values, score, write_suite_metrics

MergeRun = Callable[[RunDir, BenchmarkSettings, Signals], tuple[int | None, str]]


def merge_suite(run: RunDir, signals: Signals, merge_run: MergeRun) -> tuple[int | None, str]:
    """Merge every benchmark with ``merge_run`` (aggregation.merge_run: each as the benchmark alone),
    write ``suite_metrics.json``: the exit code and what happened."""
    record = read_suite_record(run)
    scores: list[BenchmarkScore] = []
    said, failed = [], []
    for entry in record.benchmarks:
        sub = member_run(run, entry.name)
        settings = load_member_settings(run, entry.name)
        verdict = benchmark_verdict(run, entry)
        code, reason = merge_run(sub, settings, signals)
        said.append(f"{entry.name}: {reason}")
        if code != ExitCode.DONE and verdict == "DONE":
            failed.append(entry.name)
        merged = sub.merged_output(settings.output_stem) if code == ExitCode.DONE else None
        values = read_task_values(merged, entry.metric) if merged is not None else {}
        run_path = str(sub.root.relative_to(run.root))
        scores.append(
            score(entry.name, entry.metric, values, verdict=verdict, weight=entry.weight, run=run_path)
        )
    metrics = write_suite_metrics(run.root, record.suite, scores)
    log(f"suite metrics: {', '.join(f'{s.name} {s.value}' for s in metrics.benchmarks)}")
    code = ExitCode.STOP if failed else ExitCode.DONE
    return code, "; ".join(said) + (f"; merge failed for {', '.join(failed)}" if failed else "")
