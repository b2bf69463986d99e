"""A suite's aggregation: each benchmark merged as its own run, then ``suite_metrics.json``.

Run by the suite's aggregation job (aggregation.py) once every suite chain ended. Each benchmark is
merged exactly as the same benchmark submitted alone is (its own ``on_failed_shard``, its own
command, into ``benchmarks/<name>/output/merged/``); a benchmark that cannot be merged (a shard that
did not finish, ``on_failed_shard: fail``) is listed with its verdict and no headline, and does not
stop the others'. The suite's aggregation is DONE when every benchmark whose shards all finished
DONE merged. A benchmark merged before whose files did not change since (its merge seal holds)
is not merged again: a resubmitted suite re-merges only what ran again.
"""

from __future__ import annotations

from collections.abc import Callable

from gymslurm.exitcodes import ExitCode
from gymslurm.job.heartbeat import Signals, log
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.launcher.suite_run import benchmark_verdict, load_member_settings, member_run, read_suite_record
from gymslurm.store.merge_seal import asks_a_server, seal_merge, seal_path, sealed_merge
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
        code, reason = merged_once(sub, settings, signals, merge_run)
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


def merged_once(
    sub: RunDir, settings: BenchmarkSettings, signals: Signals, merge_run: MergeRun
) -> tuple[int | None, str]:
    """A benchmark merged, unless its merge is sealed and nothing it depends on or wrote changed
    since (store/merge_seal.py: a resubmitted suite merges only what ran again); sealed after a
    merge that exited 0, unless its command asks a server."""
    if (said := sealed_merge(sub.root)) is not None:
        log(
            f"{sub.root.name}: merged before, unchanged since ({seal_path(sub.root)} holds): not merged again"
        )
        return ExitCode.DONE, f"{said} (sealed: merged before, unchanged since)"
    code, reason = merge_run(sub, settings, signals)
    if code == ExitCode.DONE and not asks_a_server(settings.aggregation.command):
        seal_merge(sub.root, reason)
    return code, reason
