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
from typing import Any

from gymslurm.coverage import Coverage
from gymslurm.errors import StoreError
from gymslurm.launcher.decide import job_exit_code
from gymslurm.launcher.ledger import ChainState, Record, Submitted, summarize
from gymslurm.launcher.links import BAD_NODE_FAILURES, bad_nodes, gpu_budget
from gymslurm.launcher.run_cost import Cost, cost_summary, final_metrics, link_costs
from gymslurm.launcher.run_site import run_jobs
from gymslurm.launcher.rundir import RunDir, RunInfo, folder_listing, is_suite
from gymslurm.launcher.verdicts import ChainVerdict
from gymslurm.launcher.views.chains import RunChains, read_chains
from gymslurm.launcher.views.cost import ask_accounting
from gymslurm.launcher.views.counts import Counts, counts_of, epoch_of, eta_s, human_duration, walltime_text
from gymslurm.launcher.views.diagnosis import RUNNING_STATES, beat_of, collector_stall, is_held, verdict
from gymslurm.launcher.views.document import (
    AggregationStatus,
    LinkedShardRow,
    ShardRow,
    StatusDocument,
    row_fields,
)
from gymslurm.launcher.views.liveness import link_lock_held, outlived_link, queuing_reason
from gymslurm.launcher.views.logs import LogIndex
from gymslurm.launcher.views.summary import never_queued, row_counts, summary_of
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


def run_status(
    run: RunDir,
    backend: Backend,
    now: float | None = None,
    chains: Sequence[list[Record]] | None = None,
    shard: int | None = None,
    *,
    templated: bool = True,
) -> StatusDocument:
    """The status document of a run: every shard, the aggregation and the summary, with one queue query.

    ``sacct`` (one more query) for current jobs ``squeue`` forgot and, on a cluster with accounting,
    what Slurm recorded of a GPU run (views/cost.py), never when ``run.json`` says there is none.
    ``chains``: :func:`read_chains`, if read already. ``shard``: that shard's row alone, with its
    links (each link's GPU-hours, and Slurm's figure per job); the summary stays the run's.
    ``templated`` False: every row made by :func:`shard_status` itself (what tests compare the
    templated rows of :func:`queued_chains` with).
    """
    now = time.time() if now is None else now
    info = run.read_info()
    outputs = folder_names(run.root / "output")
    chains = chains if chains is not None else read_chains(run, info.shards)
    aggregate_records = run.aggregate_ledger.read()
    aggregate = summarize(aggregate_records)
    queue = backend.queue(run_jobs(run, info.shards))  # the run's own rows: other runs' not typed
    # Chains that are their queued array submission alone get rows from one template per queue shape
    # (queued_rows), never on a run whose accounting is asked for every job (GPU-hours) or whose
    # queuing a killed submit left: each of those reads the chain's own state.
    plain = not templated or (info.accounting is True and info.gpus > 0) or run.queuing_mark.exists()
    queued = {} if plain or not isinstance(chains, RunChains) else queued_chains(chains, queue, outputs)
    states = {i: summarize(chains[i]) for i in range(info.shards) if i not in queued}
    accounting, slurm_gpu_s = ask_accounting(backend, [*states.values(), aggregate], queue, info)
    costs = {i: Cost.of(chains[i], now, slurm_gpu_s) for i in states}
    logs = LogIndex.of(run)
    queuing = queuing_reason(run, queue, list(states.values()))
    context = RowContext(queue, accounting, info, now, logs, queuing)
    templates: dict[tuple[tuple[str, str], ...], Template | None] = {}
    rows: list[ShardRow] = []
    counted: list[Counts] = []
    held: list[str] = []
    for i in range(info.shards):
        if i in queued:
            jobs, shape = queued[i]
            if shape not in templates:
                templates[shape] = template_of(i, jobs, chains[i], context)
            if (template := templates[shape]) is not None:
                rows.append(template.row(i, jobs, logs))
                counted.append(template.counts)
                held += [jobs[k] for k in template.held]
                continue
            states[i] = summarize(chains[i])
            costs[i] = Cost.of(chains[i], now, slurm_gpu_s)
        row, live_jobs = _plain_row(
            run, i, states[i], records=chains[i], cost=costs[i], outputs=outputs, context=context
        )
        rows.append(row)
        counted.append(row_counts(row))
        held += [job.job_id for job in live_jobs if is_held(job)]
    orphan = never_queued(rows, aggregate) and run.aggregation_enabled()
    resubmit = f"gymslurm resubmit {run.root} {info.benchmark}" if orphan else None
    agg = aggregation_status(aggregate, queue, accounting, held, resubmit)
    metrics, problem = final_metrics(run, info.output_stem)
    budget = gpu_budget(info.gpu_budget, aggregate_records)
    aggregation_cost = Cost.of(aggregate_records, now, slurm_gpu_s)
    chain_costs = [
        costs[i] if i in costs else _template_cost(templates, queued[i][1]) for i in range(info.shards)
    ]
    cost = cost_summary(chain_costs, aggregation_cost, budget, info.budget_warn_at, info.accounting)
    members = member_counts(run)
    return StatusDocument(
        run=run.name,
        path=str(run.root),
        backend=info.backend,
        benchmark=info.benchmark,
        generated_at=datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds"),
        summary=summary_of(rows, cost, counted if members is None else members),
        shards=rows if shard is None else [with_links(rows[shard], chains[shard], now, slurm_gpu_s)],
        aggregation=replace(agg, log=logs.job_log(None, agg.job)),
        final_metrics=metrics,
        final_metrics_problem=problem,
        queries=backend.queries,
    )


@dataclass(frozen=True)
class RowContext:
    """What every row of one status is made from besides its chain: the queue, accounting, the run's
    record, the clock, the logs' listing and why shards without a job get one."""

    queue: dict[str, QueueRow]
    accounting: dict[str, AccountingRow] | None
    info: RunInfo
    now: float
    logs: LogIndex
    queuing: str | None

    def row(
        self,
        shard: int,
        st: ChainState,
        queue: dict[str, QueueRow],
        *,
        files: ShardFiles,
        live: list[QueueRow],
        cost: Cost,
        excluded: dict[str, int],
    ) -> ShardRow:
        """Shard ``shard``'s row by :func:`shard_status`, in this status's context."""
        return shard_status(
            shard,
            st,
            queue,
            self.accounting,
            info=self.info,
            files=files,
            now=self.now,
            logs=self.logs,
            live=live,
            cost=cost,
            queuing=self.queuing,
            excluded=excluded,
        )


def _template_cost(templates: dict[Shape, Template | None], shape: Shape) -> Cost:
    """The cost of a chain whose row its shape's template made (one exists: the loop made the row)."""
    template = templates[shape]
    assert template is not None
    return template.cost


def _plain_row(
    run: RunDir,
    i: int,
    st: ChainState,
    *,
    records: list[Record],
    cost: Cost,
    outputs: frozenset[str],
    context: RowContext,
) -> tuple[ShardRow, list[QueueRow]]:
    """Shard ``i``'s row from its own files and state (:func:`shard_status`), and its live jobs."""
    live_jobs = _live_jobs(st, context.queue)
    running = next((row for row in live_jobs if row.state in RUNNING_STATES), None)
    lost = running is None and bool(st.open_runs) and not st.finished
    has_output = f"shard-{i:03d}" in outputs
    files = read_shard_files(run, i, context.info.output_stem, running is not None, has_output, lost=lost)
    # bad_nodes only where it may find one: a chain with two node failures at least
    failures = cost.faults.get("node_failure", 0)
    excluded = bad_nodes(records) if failures >= BAD_NODE_FAILURES else {}
    return context.row(
        i, st, context.queue, files=files, live=live_jobs, cost=cost, excluded=excluded
    ), live_jobs


Shape = tuple[tuple[str, str], ...]


def queued_chains(
    chains: RunChains, queue: dict[str, QueueRow], outputs: frozenset[str]
) -> dict[int, tuple[list[str], Shape]]:
    """The shards whose chain is its array submission alone (:meth:`RunChains.bare_jobs`), with no
    output folder, and every job of which the queue shows, none running: each with its jobs and its
    shape (each job's state and reason, the only things of a queue row its verdict reads besides the
    id). Their rows differ only by shard and job ids: one :class:`Template` per shape makes them."""
    found: dict[int, tuple[list[str], Shape]] = {}
    running: dict[Shape, bool] = {}  # whether a shape holds a running job, asked once per shape
    shards, get = len(chains), queue.get
    for shard, jobs in chains.bare_chains():
        if shard >= shards or (outputs and f"shard-{shard:03d}" in outputs):
            continue
        rows = [get(job) for job in jobs]
        shape = tuple([(row.state, row.reason) for row in rows if row is not None])
        if len(shape) != len(jobs):
            continue
        if shape not in running:
            running[shape] = any(state in RUNNING_STATES for state, _ in shape)
        if not running[shape]:
            found[shard] = (jobs, shape)
    return found


_MARK = "\x00job{}\x00"  # a stand-in job id: no real id, reason or path holds a NUL


@dataclass(frozen=True)
class Template:
    """The row of one queued chain made with stand-in job ids (:data:`_MARK`) by :func:`shard_status`
    itself: the row of any chain of the same shape is it with the ids put back (:meth:`row`)."""

    fields: dict[str, Any]
    counts: Counts
    cost: Cost
    held: tuple[int, ...]  # which of the chain's jobs are live and held (the aggregation's wait)
    texts: dict[str, str]  # the fields that hold stand-ins, as format strings ({0}: the first job)

    def row(self, shard: int, jobs: list[str], logs: LogIndex) -> ShardRow:
        """Shard ``shard``'s row: the template's, its jobs' ids in place of the stand-ins (by position:
        why, :class:`ShardRow`'s docstring)."""
        values = list(self.fields.values())
        for name, text in self.texts.items():
            values[_AT[name]] = text.format(*jobs)
        values[_AT["shard"]] = shard
        values[_AT["log"]] = logs.job_log(shard, values[_AT["job"]])
        values[_AT["server_logs"]] = logs.server_logs(shard)
        for name in _COPIED:  # each row its own containers, as a row made by shard_status has
            values[_AT[name]] = values[_AT[name]].copy()
        return ShardRow(*values)


_AT = {name: k for k, name in enumerate(ShardRow.__dataclass_fields__)}  # a field's position in a row
_COPIED = ("failed_by_class", "injected", "faults", "excluded_nodes")
_PUT_BACK = frozenset({"shard", "job", "successor", "why", "log", "server_logs"})


def _as_format(text: str, jobs: int) -> str:
    """``text`` as a format string of the chain's job ids: each stand-in ``k`` becomes ``{k}``."""
    text = text.replace("{", "{{").replace("}", "}}")
    for k in range(jobs):
        text = text.replace(_MARK.format(k), f"{{{k}}}")
    return text


def template_of(shard: int, jobs: list[str], records: list[Record], context: RowContext) -> Template | None:
    """The template of ``shard``'s queued chain: its own records and queue rows with each job id
    replaced by a stand-in, through :func:`shard_status`. None (every chain of the shape then gets its
    row from its own state) when the records are not one ``Submitted`` per job in order, or when a
    stand-in shows in a field other than those :meth:`Template.row` puts the ids back in."""
    if [r.job_id if isinstance(r, Submitted) else None for r in records] != jobs:
        return None
    marks = [_MARK.format(k) for k in range(len(jobs))]
    renamed: list[Record] = [r.model_copy(update={"job_id": m}) for r, m in zip(records, marks, strict=True)]
    queue = {m: replace(context.queue[job], job_id=m) for m, job in zip(marks, jobs, strict=True)}
    st = summarize(renamed)
    live_jobs = _live_jobs(st, queue)
    cost = Cost.of(renamed, context.now, None)
    row = context.row(shard, st, queue, files=NO_FILES, live=live_jobs, cost=cost, excluded={})
    fields = row_fields(row)
    if any("\\x00job" in repr(value) for name, value in fields.items() if name not in _PUT_BACK):
        return None
    held = tuple(marks.index(job.job_id) for job in live_jobs if is_held(job))
    texts = {
        name: _as_format(fields[name], len(jobs))
        for name in ("job", "successor", "why")
        if fields[name] is not None and "\x00" in fields[name]
    }
    return Template(fields, row_counts(row), cost, held, texts)


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
