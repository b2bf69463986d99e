"""The run-level line of ``status`` (pure): the summary over every shard's row and its counts, and
whether an aggregation nothing will queue is owed; views/status.py makes the rows."""

from __future__ import annotations

from collections.abc import Sequence

from gymslurm.launcher.ledger import ChainState
from gymslurm.launcher.run_cost import NO_COST, CostSummary
from gymslurm.launcher.verdicts import ChainVerdict
from gymslurm.launcher.views.counts import Counts, human_duration
from gymslurm.launcher.views.document import ShardRow, StatusSummary, jobs_busy


def summary_of(
    rows: Sequence[ShardRow], cost: CostSummary = NO_COST, counted: Sequence[Counts] | None = None
) -> StatusSummary:
    """The run-level line over every shard: rollouts done of expected (``counted_shards`` of ``shards``
    have reported a count yet), ETA at the summed rate of running links, failures, interruptions;
    then the run's ``cost`` (none when not given). ``counted``: the rows' counts when the caller has
    them (status: the rows of one template share theirs), or where the rollouts are when not in the
    rows' own shards (a suite's are in its benchmarks' shards: status's ``member_counts``); the
    verdicts and walltime stay the rows' (the suite's chains)."""
    counts = [row_counts(row) for row in rows] if counted is None else list(counted)
    expected = sum(c.expected or 0 for c in counts)
    finished = sum(c.successful + c.failed + c.omitted for c in counts)
    rate = sum(c.rate_per_s or 0.0 for c in counts)
    by_class: dict[str, int] = {}
    for c in counts:
        for name, n in c.failed_by_class.items():
            by_class[name] = by_class.get(name, 0) + n
    verdicts: dict[str, int] = {}
    for row in rows:
        word = str(row.verdict)  # a plain str: orjson writes no enum as a key
        verdicts[word] = verdicts.get(word, 0) + 1
    reported = sum(1 for c in counts if c.expected is not None)
    eta = (
        (expected - finished) / rate if rate > 0 and expected > finished and reported == len(counts) else None
    )
    return StatusSummary(
        expected=expected,
        successful=sum(c.successful for c in counts),
        failed=sum(c.failed for c in counts),
        omitted=sum(c.omitted for c in counts),
        interrupted=sum(c.interrupted for c in counts),
        shards=len(counts),
        counted_shards=reported,
        rate_per_s=round(rate, 3),
        eta_s=None if eta is None else round(eta, 1),
        eta=human_duration(eta),
        failed_by_class=dict(sorted(by_class.items())),
        verdicts=dict(sorted(verdicts.items())),
        walltime_used_s=round(sum(row.walltime_used_s for row in rows), 1),
        gpu_hours=cost.gpu_hours,
        gpu_hours_idle=cost.gpu_hours_idle,
        gpu_hours_slurm=cost.gpu_hours_slurm,
        slurm_accounting=cost.slurm_accounting,
        gpu_budget=cost.gpu_budget,
        budget_fraction=cost.budget_fraction,
        budget_warning=cost.budget_warning,
        faults=cost.faults,
    )


def row_counts(row: ShardRow) -> Counts:
    """A shard row's counts; its rate only while its chain is HEALTHY."""
    rate = row.rate_per_s if row.verdict == ChainVerdict.HEALTHY else None
    return Counts(
        row.expected,
        row.successful,
        row.failed,
        row.omitted,
        rate_per_s=rate,
        failed_by_class=row.failed_by_class,
        interrupted=row.interrupted,
    )


def never_queued(rows: Sequence[ShardRow], aggregate: ChainState) -> bool:
    """Every shard DONE, no job of theirs busy and no aggregation job ever queued (pure): when the run
    has an aggregation, every link that could have queued it died before counting its chain in the
    run's tally, so nothing will; ``resubmit`` recounts and queues it."""
    done = bool(rows) and all(row.verdict == ChainVerdict.DONE for row in rows)
    return done and not aggregate.epoch_jobs and not jobs_busy(rows)
