"""The GPU-budget gate's figures, from the run's tally and the link's own chain only.

Why: the gate (``decide.start_gate`` and rule 3b) needs what the run spent. Folding every shard's
ledger for it, twice per link, made each link's work grow with the run. Here what the decided links
held is summed in the run's tally (``store/tally.py``: each link adds the GPU-hours of the
decisions it writes, its own and those it accounts for), and the calling link adds its own chain's
open runs until now. A link still running in another chain is counted once it decides: the figure
is what the ended links spent, which reaches the budget at most one link per chain late.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gymslurm.launcher.ledger import DecisionRecord, Record
from gymslurm.launcher.links import gpu_budget, iso_epoch, link_gpu_hours, links_of
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings


def run_spend(
    run: RunDir, settings: BenchmarkSettings, own: tuple[int, list[Record]] | None = None
) -> tuple[float | None, float]:
    """The run's GPU-hours budget (with every resubmit raise) and what the run spent until now: the
    tally's decided links, plus the open runs of ``own`` (the calling link's shard and records)."""
    if settings.budget.gpu_hours is None:  # no budget, no raise (resubmit refuses one): nothing to read
        return None, 0.0
    budget = gpu_budget(settings.budget.gpu_hours, run.aggregate_ledger.read())
    return budget, run.tally.read().gpu_hours + open_gpu_hours(own[1] if own else [], time.time())


def open_gpu_hours(records: Sequence[Record], now_epoch: float) -> float:
    """GPU-hours the chain's runs without a decision held until ``now_epoch`` (pure)."""
    return sum(
        link_gpu_hours(link, now_epoch, iso_epoch(link.get("start")))
        for link in links_of(records)
        if link["decision"] is None
    )


def decided_gpu_hours(records: Sequence[Record], decisions: Sequence[Record]) -> float:
    """GPU-hours of the links these decision records ended (pure; other records are ignored)."""
    keys = {(r.job_id, r.restart_count) for r in decisions if isinstance(r, DecisionRecord)}
    return sum(link_gpu_hours(link) for link in links_of(records) if (link["job"], link["restart"]) in keys)


def tally_spend(
    run: RunDir,
    settings: BenchmarkSettings,
    shard: int,
    records: Sequence[Record],
    decisions: Sequence[Record],
) -> None:
    """Add to the run's tally what the links ``decisions`` ended held (a run with a budget only)."""
    if settings.budget.gpu_hours is None or not any(isinstance(r, DecisionRecord) for r in decisions):
        return
    run.tally.spent(shard, decided_gpu_hours(records, decisions))
