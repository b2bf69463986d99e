"""The job that ends a run writes ``summary.json``: how it ended and what it cost (launcher/run_cost.py).

Called after the aggregation's final decision, and (the aggregation disabled) after each link's
final decision: it writes only when every chain has finished, so the link that finished the last
one writes it. Two links finishing together may both write it; each writes the whole document
atomically from the ledgers, so the file is always one of two equal summaries. Never fails the
job: a summary that cannot be written is said in the log; the ledgers hold the truth.
"""

from __future__ import annotations

import time

from gymslurm.clock import utc_now_ms
from gymslurm.errors import GymslurmError, SlurmError, StoreError
from gymslurm.launcher.job.heartbeat import log
from gymslurm.launcher.ledger import Record, Started, Submitted, summarize
from gymslurm.launcher.links import gpu_budget
from gymslurm.launcher.run_cost import final_metrics, run_summary, write_run_summary
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.launcher.site.backend import Backend
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
    array = run.read_array()
    chains: list[list[Record]] = []
    for shard in range(info.shards):  # stops at the first chain still going: one read, not every shard's,
        records = run.chain_records(shard, array)  # for each of the thousands of links that end early
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
        slurm_gpu_s=_slurm_gpu_s(info.accounting, info.gpus, chains, aggregate, backend),
        budget=gpu_budget(info.gpu_budget, aggregate),
    )
    log(f"the run ended: wrote {write_run_summary(run, summary)}")


def _slurm_gpu_s(
    accounting: bool | None, gpus: int, chains: list[list[Record]], aggregate: list[Record], backend: Backend
) -> dict[str, float] | None:
    """What Slurm recorded of a GPU run, by job (one ``sacct`` for every job of the run), else None."""
    if accounting is not True or gpus <= 0:
        return None
    jobs = list(
        dict.fromkeys(
            r.job_id
            for records in [*chains, aggregate]
            for r in records
            if isinstance(r, Submitted | Started)
        )
    )
    try:
        rows = backend.accounting(jobs, every_run=True)
    except SlurmError as error:
        log(f"sacct did not answer for the summary's Slurm figure: {error}")
        return None
    return None if rows is None else {job: row.gpu_s for job, row in rows.items()}
