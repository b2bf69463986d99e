"""``gymslurm status [RUN]``: a row per shard and a run summary, from the run's files and one ``squeue``.

What it reads: the ledgers (budgets, decisions, exit codes: written by the jobs), each running
link's heartbeat and its collector's live progress record (``store/live.py``), the collector's
coverage file, **one** ``squeue`` and at most one ``sacct`` (:func:`run_status`). The rows are
pure functions of what was read (:func:`shard_status`; the verdict rule is views/diagnosis.py);
the clock is passed in.

The result is the typed status document (views/document.py: ``status --json``, schema
``gymslurm.status``); the HTML report embeds the same document (docs/launcher.md, "The status
document").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from gymslurm.coverage import Coverage
from gymslurm.errors import StoreError
from gymslurm.launcher.decide import job_exit_code
from gymslurm.launcher.ledger import ChainState, Record, summarize
from gymslurm.launcher.links import BAD_NODE_FAILURES, bad_nodes, gpu_budget
from gymslurm.launcher.run_cost import NO_COST, Cost, CostSummary, cost_summary, final_metrics, link_costs
from gymslurm.launcher.run_site import run_jobs
from gymslurm.launcher.rundir import RunDir, RunInfo, folder_listing, is_suite
from gymslurm.launcher.verdicts import ChainVerdict
from gymslurm.launcher.views.cost import ask_accounting
from gymslurm.launcher.views.counts import Counts, counts_of, epoch_of, eta_s, human_duration, walltime_text
from gymslurm.launcher.views.diagnosis import RUNNING_STATES, beat_of, collector_stall, is_held, verdict
from gymslurm.launcher.views.document import (
    AggregationStatus,
    LinkedShardRow,
    ShardRow,
    StatusDocument,
    StatusSummary,
    jobs_busy,
    row_fields,
)
from gymslurm.launcher.views.liveness import link_lock_held, outlived_link, queuing_reason
from gymslurm.launcher.views.logs import LogIndex
from gymslurm.site.backend import LIVE_STATES, Backend
from gymslurm.site.slurm import AccountingRow, QueueRow
from gymslurm.store import live
from gymslurm.store.files import read_coverage
from gymslurm.store.paths import RunPaths


@dataclass(frozen=True)
class ShardFiles:
    """What a shard's files say (read once per shard by :func:`read_shard_files`)."""

    coverage: Coverage | None
    progress: live.LiveProgress | None
    heartbeat: live.Heartbeat | None
    problems: tuple[str, ...] = ()
    lock_held: bool | None = None  # the shard's link lock, asked only of a link the queue lost (liveness.py)


def shard_coverage(output: Path) -> tuple[Coverage | None, str | None]:
    """The collector's coverage of ``output``, read through the store, and any problem."""
    try:
        # The launcher made these folders under the (resolved) run root and never links them, so
        # the per-shard realpath of RunPaths.for_output (0.5 s at 1,000 shards) is not needed.
        coverage = read_coverage(RunPaths(output_as_given=output, output=output))
    except StoreError as error:
        return None, str(error)
    return coverage, None


NO_FILES = ShardFiles(None, None, None)


def read_shard_files(
    run: RunDir, shard: int, stem: str, running: bool, has_output: bool = True, *, lost: bool = False
) -> ShardFiles:
    """The shard's coverage file, live progress record and (while a link runs) heartbeat.

    An unreadable live file is named in the row's reason, not fatal. ``has_output`` False (the
    run's ``output/`` listing has no folder for the shard: its first link has not run yet) reads
    nothing, so the thousands of pending shards of a large array run cost no file opens. ``lost``: a
    run of the chain started and never decided, and the queue shows no job of it running: the
    heartbeat is read, and the link lock looked at (liveness.link_lock_held), in case its link
    outlived its job.
    """
    if not has_output and not running and not lost:
        return NO_FILES
    output = run.shard_output(shard, stem)
    problems: list[str] = []
    progress = heartbeat = None
    try:
        progress = live.read_progress(live.progress_path(output))
    except StoreError as error:
        problems.append(str(error))
    try:
        heartbeat = live.read_heartbeat(run.heartbeat(shard)) if running or lost else None
    except StoreError as error:
        problems.append(str(error))
    coverage, problem = shard_coverage(output)
    problems += [problem] if problem else []
    lock = link_lock_held(run, shard, heartbeat) if lost and not running else None
    return ShardFiles(coverage, progress, heartbeat, tuple(problems), lock)


def _job_state(
    job: str | None, queue: dict[str, QueueRow], accounting: dict[str, AccountingRow] | None
) -> str:
    if job is None:
        return "-"
    if job in queue:
        row = queue[job]
        return row.state if row.reason in ("None", "") else f"{row.state} ({row.reason})"
    if accounting and job in accounting:
        return accounting[job].state
    return "gone from squeue"


def _is_live(row: QueueRow | None) -> bool:
    return row is not None and row.state in LIVE_STATES


def _live_jobs(state: ChainState, queue: dict[str, QueueRow]) -> list[QueueRow]:
    return [queue[j] for j in state.epoch_jobs if j in queue and queue[j].state in LIVE_STATES]


def shard_status(
    shard: int,
    state: ChainState,
    queue: dict[str, QueueRow],
    accounting: dict[str, AccountingRow] | None,
    *,
    info: RunInfo,
    files: ShardFiles,
    now: float,
    logs: LogIndex,
    live: list[QueueRow] | None = None,
    cost: Cost | None = None,
    queuing: str | None = None,
    excluded: dict[str, int] | None = None,
) -> ShardRow:
    """One shard's row (pure: the files were read by the caller, ``now`` is the wall clock; ``live``:
    the chain's live jobs in the queue, when the caller found them already; ``cost``: its GPU-hours
    and interruptions, none when not given; ``queuing``: the run's first links are still being
    queued, and why a shard without a job gets one; ``excluded``: the bad nodes kept off its links)."""
    cost = cost or Cost(0.0, 0.0, None, {})
    live_jobs = _live_jobs(state, queue) if live is None else live
    running = next((row for row in live_jobs if row.state in RUNNING_STATES), None)
    beat = beat_of(state, running, files.heartbeat, now)
    heartbeat = files.heartbeat
    own = heartbeat if running and heartbeat and heartbeat.job_id == running.job_id else None
    outlived = None if running else outlived_link(state, files.heartbeat, files.lock_held, now)
    stall = collector_stall(own, files.progress, now)
    word, why = verdict(state, live_jobs, beat, stall, outlived=outlived, queuing=queuing)
    if files.problems:
        why = f"{why}; {'; '.join(files.problems)}"
    why += excluded_text(excluded or {})
    # The job that runs next: the running one, else the oldest live one (a requeued link pends before
    # its successor, which waits on it), else the chain's newest or deciding job. A finished chain
    # shows its deciding job: a spare link running then only finds the chain finished and exits.
    head = live_jobs[0].job_id if live_jobs and not state.finished else state.current_job
    job = running.job_id if running and not state.finished else head
    successor = state.successor_of.get(job) if job else None
    if successor == job or (successor is not None and not _is_live(queue.get(successor))):
        successor = None
    last = state.last_decision
    running_s = 0.0
    if running is not None:
        starts = [run for run in state.open_runs if run.job_id == running.job_id]
        running_s = max(now - epoch_of(starts[-1].at), 0.0) if starts else 0.0
    used, budget = state.total_walltime_s + running_s, state.budgets.walltime_s + running_s
    counts = counts_of(files.coverage, files.progress, running is not None)
    eta = eta_s(counts, running is not None and word == ChainVerdict.HEALTHY)
    return ShardRow(
        shard=shard,
        verdict=word,
        why=why,
        job=job,
        job_state=_job_state(job, queue, accounting),
        successor=successor,
        successor_state=_job_state(successor, queue, accounting) if successor else "-",
        jobs=len(state.decided),
        last_exit=job_exit_code(last.decision) if last and last.accounted_by is None else None,
        collector_exit=last.exit_code if last else None,
        last_decision=str(last.decision) if last else None,
        retries=f"{state.budgets.infra_retries_used}/{info.infra_retry_limit}",
        walltime=walltime_text(used, budget, info.max_walltime_s, state.epochs),
        walltime_used_s=round(used, 1),
        walltime_budget_s=round(budget, 1),
        walltime_cap_s=info.max_walltime_s,
        coverage=counts.text,
        expected=counts.expected,
        successful=counts.successful,
        failed=counts.failed,
        omitted=counts.omitted,
        in_flight=counts.in_flight,
        live=counts.live,
        rate_per_s=None if counts.rate_per_s is None else round(counts.rate_per_s, 3),
        eta_s=None if eta is None else round(eta, 1),
        eta=human_duration(eta),
        heartbeat_age_s=None if beat is None else round(beat.age_s, 1),
        log=logs.job_log(shard, job),
        server_logs=logs.server_logs(shard),
        failed_by_class=counts.failed_by_class,
        server_restarts=_restarts(state),
        injected=[f"{record.fault} (job {record.job_id}, {record.at[:19]})" for record in state.injected],
        interrupted=counts.interrupted,
        gpu_hours=round(cost.gpu_hours, 4),
        gpu_hours_idle=round(cost.idle, 4),
        gpu_hours_slurm=None if cost.slurm is None else round(cost.slurm, 4),
        gpu_text=cost.text,
        faults=cost.faults,
        excluded_nodes=excluded or {},
    )


def _restarts(state: ChainState) -> str:
    """Each supervised server's restarts over the chain (ledger ``server`` records), e.g. ``policy:2``."""
    if not state.server_restarts:
        return "-"
    return ", ".join(f"{name}:{count}" for name, count in sorted(state.server_restarts.items()))


def summary_of(
    rows: Sequence[ShardRow], cost: CostSummary = NO_COST, counted: Sequence[Counts] | None = None
) -> StatusSummary:
    """The run-level line over every shard: rollouts done of expected (``counted_shards`` of ``shards``
    have reported a count yet), ETA at the summed rate of running links, failures, interruptions;
    then the run's ``cost`` (none when not given). ``counted``: where the rollouts are when not in
    the rows' own shards (a suite's are in its benchmarks' shards: :func:`member_counts`); the
    verdicts and walltime stay the rows' (the suite's chains)."""
    counts = [_row_counts(row) for row in rows] if counted is None else list(counted)
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


def _row_counts(row: ShardRow) -> Counts:
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


def member_counts(run: RunDir) -> list[Counts] | None:
    """A suite run's rollouts: each benchmark's shards' counts (its coverage, or its running
    collector's live record), None for a run of one benchmark (its own shards hold them)."""
    if not is_suite(run):  # a file test: a run of one benchmark imports no suite code
        return None
    from gymslurm.launcher.suite_run import member_run, read_suite_record

    counts = []
    for entry in read_suite_record(run).benchmarks:
        sub = member_run(run, entry.name)
        for shard in range(entry.shards):
            output = sub.shard_output(shard, entry.output_stem)
            try:
                progress = live.read_progress(live.progress_path(output))
            except StoreError:
                progress = None
            running = progress is not None and not progress.ended
            counts.append(counts_of(shard_coverage(output)[0], progress, running))
    return counts


def never_queued(rows: Sequence[ShardRow], aggregate: ChainState) -> bool:
    """Every shard DONE, no job of theirs busy and no aggregation job ever queued (pure): when the run
    has an aggregation, every link that could have queued it died before counting its chain in the
    run's tally, so nothing will; ``resubmit`` recounts and queues it."""
    done = bool(rows) and all(row.verdict == ChainVerdict.DONE for row in rows)
    return done and not aggregate.epoch_jobs and not jobs_busy(rows)


def aggregation_status(
    aggregate: ChainState,
    queue: dict[str, QueueRow],
    accounting: dict[str, AccountingRow] | None,
    held: Sequence[str] = (),
    resubmit: str | None = None,
) -> AggregationStatus:
    """The aggregation's job, state, whether it finished and whether it stalled (pure).

    Its deciding job is only exiting. ``stalled``: it was queued, has no final decision and no job
    of it is in the queue (killed, with no job left behind it): ``resubmit`` queues it again.
    ``held``: the shards' held jobs; a pending aggregation waits on them (afterany) and says so.
    ``resubmit``: the command that queues an aggregation nothing will queue (:func:`never_queued`).
    """
    decider = aggregate.last_decision.job_id if aggregate.last_decision else None
    agg_live = [queue[j] for j in aggregate.epoch_jobs if j != decider and _is_live(queue.get(j))]
    any_live = any(_is_live(queue.get(j)) for j in aggregate.epoch_jobs)
    running = next((row for row in agg_live if row.state in RUNNING_STATES), None)
    shown = running.job_id if running else aggregate.current_job
    agg_state = "not submitted" if not aggregate.epoch_jobs else _job_state(shown, queue, accounting)
    if resubmit is not None and not aggregate.epoch_jobs:
        agg_state = f"never queued: every shard is DONE and no job of the run is left; '{resubmit}' queues it"
    row = queue.get(shown or "")
    if row is not None and is_held(row):
        agg_state += f": held, it will not run by itself; 'scontrol release {row.job_id}' lets it run"
    elif held and row is not None and row.state == "PENDING" and row.reason == "Dependency":
        waits = " ".join(held[:5]) + (" ..." if len(held) > 5 else "")
        agg_state += f": waits for held job(s) {waits}, which will not end by themselves: 'scancel {waits}'"
    finished = aggregate.finished and not agg_live
    stalled = bool(aggregate.epoch_jobs) and not aggregate.finished and not any_live
    if aggregate.last_decision and finished:
        agg_state = f"{aggregate.last_decision.decision}: {aggregate.last_decision.reason}"
    elif stalled:
        agg_state = (
            f"STALLED: job {shown} ended ({agg_state}) without a final decision and no aggregation "
            "job is queued; 'gymslurm resubmit' queues it"
        )
    return AggregationStatus(job=shown, state=agg_state, finished=finished, stalled=stalled)


def read_chains(run: RunDir, shards: int) -> list[list[Record]]:
    """Every shard's chain records, read once (one listing of ``shards/``, the run's records once):
    ``status`` folds them and the report draws its timeline from the same list."""
    array = run.read_array()
    present = folder_names(run.root / "shards")
    shared = run.run_ledger.read() if array is not None else []
    return [run.chain_records(s, array, present, shared) for s in range(shards)]


def run_status(
    run: RunDir,
    backend: Backend,
    now: float | None = None,
    chains: list[list[Record]] | None = None,
    shard: int | None = None,
) -> StatusDocument:
    """The status document of a run: every shard, the aggregation and the summary, with one queue query.

    ``sacct`` (one more query) for current jobs ``squeue`` forgot and, on a cluster with accounting,
    what Slurm recorded of a GPU run (views/cost.py), never when ``run.json`` says there is none.
    ``chains``: :func:`read_chains`, if read already. ``shard``: that shard's row alone, with its
    links (each link's GPU-hours, and Slurm's figure per job); the summary stays the run's.
    """
    now = time.time() if now is None else now
    info = run.read_info()
    outputs = folder_names(run.root / "output")
    chains = chains or read_chains(run, info.shards)
    states = [summarize(records) for records in chains]
    aggregate_records = run.aggregate_ledger.read()
    aggregate = summarize(aggregate_records)
    queue = backend.queue(run_jobs(run, info.shards))  # the run's own rows: other runs' not typed
    accounting, slurm_gpu_s = ask_accounting(backend, [*states, aggregate], queue, info)
    costs = [Cost.of(records, now, slurm_gpu_s) for records in chains]
    logs = LogIndex.of(run)
    rows: list[ShardRow] = []
    held: list[str] = []
    queuing = queuing_reason(run, queue, states)
    for i, st in enumerate(states):
        live_jobs = _live_jobs(st, queue)
        running = next((row for row in live_jobs if row.state in RUNNING_STATES), None)
        lost = running is None and bool(st.open_runs) and not st.finished
        has_output = f"shard-{i:03d}" in outputs
        files = read_shard_files(run, i, info.output_stem, running is not None, has_output, lost=lost)
        # bad_nodes only where it may find one: a chain with two node failures at least
        failures = costs[i].faults.get("node_failure", 0)
        excluded = bad_nodes(chains[i]) if failures >= BAD_NODE_FAILURES else {}
        rows.append(
            shard_status(
                i,
                st,
                queue,
                accounting,
                info=info,
                files=files,
                now=now,
                logs=logs,
                live=live_jobs,
                cost=costs[i],
                queuing=queuing,
                excluded=excluded,
            )
        )
        held += [row.job_id for row in live_jobs if is_held(row)]
    orphan = never_queued(rows, aggregate) and run.aggregation_enabled()
    resubmit = f"gymslurm resubmit {run.root} {info.benchmark}" if orphan else None
    agg = aggregation_status(aggregate, queue, accounting, held, resubmit)
    metrics, problem = final_metrics(run, info.output_stem)
    budget = gpu_budget(info.gpu_budget, aggregate_records)
    aggregation_cost = Cost.of(aggregate_records, now, slurm_gpu_s)
    cost = cost_summary(costs, aggregation_cost, budget, info.budget_warn_at, info.accounting)
    return StatusDocument(
        run=run.name,
        path=str(run.root),
        backend=info.backend,
        benchmark=info.benchmark,
        generated_at=datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds"),
        summary=summary_of(rows, cost, member_counts(run)),
        shards=rows if shard is None else [with_links(rows[shard], chains[shard], now, slurm_gpu_s)],
        aggregation=replace(agg, log=logs.job_log(None, agg.job)),
        final_metrics=metrics,
        final_metrics_problem=problem,
        queries=backend.queries,
    )


def excluded_text(nodes: dict[str, int]) -> str:
    """``; nodes a1 (2 node failures) kept off its later links (--exclude)`` (empty when none; pure)."""
    if not nodes:
        return ""
    named = ", ".join(f"{node} ({n} node failures)" for node, n in nodes.items())
    return f"; nodes {named} kept off its later links (--exclude)"


def with_links(
    row: ShardRow, records: list[Record], now: float, slurm_gpu_s: dict[str, float] | None
) -> LinkedShardRow:
    """A shard's row with its links' GPU-hours and what Slurm recorded per job (every run of it)."""
    links = link_costs(records, now)
    jobs = dict.fromkeys(link.job for link in links)
    by_job = (
        None if slurm_gpu_s is None else {job: round(slurm_gpu_s.get(job, 0.0) / 3600, 4) for job in jobs}
    )
    return LinkedShardRow(**row_fields(row), links=links, gpu_hours_slurm_by_job=by_job)


folder_names = folder_listing  # one listing of shards/ or output/: which shards have files at all
