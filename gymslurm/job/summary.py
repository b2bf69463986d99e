"""The job that ends a run writes ``summary.json``: how it ended and what it cost (launcher/run_cost.py).

Called after the aggregation's final decision, and (the aggregation disabled) after each link's
final decision: it writes only when every chain has finished (the run's tally says so in one line,
then the ledgers confirm), so the link that finished the last one writes it. It asks the scheduler
nothing: Slurm's own GPU figure (one ``sacct`` of every job of the run) is for ``status`` and
``report``, the run-wide views, so ``gpu_hours_slurm`` is null in the summary a job writes.
Two links finishing together may both write it; each writes the whole document
atomically from the ledgers, so the file is always one of two equal summaries. Never fails the
job: a summary that cannot be written is said in the log; the ledgers hold the truth.
"""

from __future__ import annotations

import time

from gymslurm.clock import utc_now_ms
from gymslurm.errors import GymslurmError, StoreError
from gymslurm.job.heartbeat import log
from gymslurm.launcher.ledger import Record, summarize
from gymslurm.launcher.links import gpu_budget
from gymslurm.launcher.run_cost import final_metrics, run_summary, write_run_summary
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.site.backend import Backend
from gymslurm.store.files import read_coverage
from gymslurm.store.paths import RunPaths


def write_summary_if_ended(
    run: RunDir, settings: BenchmarkSettings, backend: Backend, written_by: str
) -> None:
    """Write ``summary.json`` when every chain has finished (and the aggregation, when there is one)."""
    try:
        _write_if_ended(run, settings, backend, written_by)
    except (GymslurmError, OSError) as error:
        log(f"could not write {run.root / 'summary.json'}: {error} (the ledgers hold the same figures)")


def _write_if_ended(run: RunDir, settings: BenchmarkSettings, backend: Backend, written_by: str) -> None:
    aggregate = run.aggregate_ledger.read()
    if settings.aggregation.enabled and not summarize(aggregate).finished:
        return
    info = run.read_info()
    if not settings.aggregation.enabled and run.tally.read().finished < info.shards:
        return  # one line read: a chain is still going (the tally counts each finished one)
    array = run.read_array()
    chains: list[list[Record]] = []
    for shard in range(info.shards):  # stops at the first chain still going
        records = run.chain_records(shard, array)
        if not summarize(records).finished:
            return
        chains.append(records)
    coverages = []
    for shard in range(info.shards):
        try:
            coverages.append(read_coverage(RunPaths.for_output(run.shard_output(shard, info.output_stem))))
        except StoreError:
            coverages.append(None)
    summary = run_summary(
        info,
        chains,
        aggregate,
        coverages,
        now=time.time(),
        written_at=utc_now_ms(),
        written_by=written_by,
        metrics=final_metrics(run, info.output_stem),
        slurm_gpu_s=None,  # a job asks no run-wide sacct: status and report show Slurm's figure
        budget=gpu_budget(info.gpu_budget, aggregate),
    )
    log(f"the run ended: wrote {write_run_summary(run, summary)}")
