"""What every job of a chain does with its neighbours, links and aggregation alike.

The invariant (docs/launcher.md, "The invariant"): from the moment ``submit`` returns until a
chain has a recorded final decision, the chain has a live or queued job at every instant,
whatever is killed and when. The mechanism is a **lookahead** of ``k = slurm.lookahead`` jobs
(default 2): whoever queues a chain queues ``k`` jobs, each ``afterany`` the one before, and
every job, as its first act once it holds its lock, queues what is missing of the ``k`` behind
it (:func:`ensure_lookahead`). So a job starts with ``k - 1`` jobs already behind it, queued by
others: its first act is never needed. A job killed before it ran a line of Python (its batch
shell SIGKILLed, the link killed in its first 100 ms) leaves its successor, which runs, restores
the lookahead and accounts for nothing (the dead job never started); ``k`` survives ``k - 1``
consecutive jobs killed before their first act, and any number killed after it. A job that
holds its lock also cancels any other *pending* job of its chain that is not in its lookahead (a
hand rerun, a duplicate): the chain stays one line of jobs, never a fork.

Bounded by construction: a job that dies before any gymslurm code runs spends nothing, but it
also queues nothing, so a chain whose every job dies that way (a broken interpreter) ends after
the two jobs it had queued, and ``status`` reads STALLED with the job logs to read.

Also here: accounting for runs that started but never wrote a decision (their successor writes
it, ``accounted_by``), and the check that no other run of the chain is still alive.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from gymslurm.clock import utc_now_ms
from gymslurm.job.collector_files import saved_bytes
from gymslurm.job.heartbeat import log
from gymslurm.launcher.decide import DeadRun, Limits, dead_run_end, decide
from gymslurm.launcher.ledger import (
    ChainState,
    DecisionRecord,
    Ledger,
    Record,
    Started,
    Submitted,
    fold,
    record_decision,
)
from gymslurm.site.backend import ALIVE_STATES, LIVE_STATES, Backend, SlurmBackend
from gymslurm.site.slurm import QueueRow
from gymslurm.store import live

STRAYS_ASKED = 4  # never-started jobs of a chain asked about beyond its lookahead (chain_jobs_to_ask)


def seconds_between(start: str | None, end: str | None) -> float:
    """Seconds from one ledger timestamp to another (0 when either is missing or unreadable)."""
    if not start or not end:
        return 0.0
    try:
        return max(0.0, (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())
    except ValueError:
        return 0.0


def last_beat_s(run: Started, beat: live.Heartbeat | None) -> float | None:
    """Seconds from the run's start to its last heartbeat plus one interval (it died by then), if
    the shard's heartbeat is this very run's (pure)."""
    if beat is None or (beat.job_id, beat.restart_count) != (run.job_id, run.restart_count):
        return None
    try:
        started = datetime.fromisoformat(run.at).timestamp()
    except ValueError:
        return None
    return max(beat.epoch + beat.interval_s - started, 0.0)


def dead_run_facts(
    run: Started,
    me: tuple[str, int],
    backend: Backend,
    output: Path | None,
    beat: live.Heartbeat | None = None,
) -> DeadRun:
    """What is known of a run that never wrote its decision: Slurm's word, its start, its saves and
    (``beat``: the shard's heartbeat file) when it last showed life."""
    since = seconds_between(run.at, utc_now_ms())
    saved = None if run.saved_bytes is None or output is None else saved_bytes(output) > run.saved_bytes
    last = last_beat_s(run, beat)
    if run.job_id == me[0]:  # an earlier run of this very job: Slurm requeued it
        return DeadRun("REQUEUED", since, saved_outcomes=saved, last_beat_s=last)
    try:
        row = backend.ended(run.job_id)
    except Exception as error:  # a status query must not stop the chain from accounting
        log(f"could not ask the scheduler about job {run.job_id}: {error}")
        return DeadRun("UNKNOWN", since, saved_outcomes=saved, last_beat_s=last)
    if row is None:
        return DeadRun("VANISHED", since, saved_outcomes=saved, last_beat_s=last)
    return DeadRun(row.state, since, row.exit_code, row.signal, row.elapsed_s, saved, last)


def other_live_link(state: ChainState, me: tuple[str, int], backend: Backend) -> str | None:
    """The job of another started run of this chain that the queue still shows alive, else None."""
    others = [run.job_id for run in state.open_runs if run.job_id != me[0]]
    if not others:
        return None
    try:
        queue = backend.job_rows(others)
    except Exception as error:  # the link lock was free: the runs are very likely dead
        log(f"could not ask the scheduler whether jobs {' '.join(others)} still run: {error}")
        return None
    return next((job for job in others if job in queue and queue[job].state in ALIVE_STATES), None)


def account_for_dead_runs(
    state: ChainState,
    ledger: Ledger,
    me: tuple[str, int],
    backend: Backend,
    *,
    output: Path | None,
    limits: Limits,
    written: list[Record] | None = None,
    beat: live.Heartbeat | None = None,
) -> ChainState:
    """Write a decision for every run that started but never wrote one (except this run).

    ``beat``: the shard's heartbeat as the dead left it (read before this run beats), which bounds
    how long the run that wrote it lived.

    Each decision written is folded into ``state`` (no other job writes the chain's ledger while
    its lock is held), so the ledger is not read again; and appended to ``written`` when given
    (the records the caller holds).
    """
    for run in list(state.open_runs):
        if (run.job_id, run.restart_count) == me:
            continue
        end = dead_run_end(dead_run_facts(run, me, backend, output, beat))
        before = state.budgets
        verdict = decide(end, before, limits)
        log(f"accounting for job {run.job_id} run {run.restart_count}: {verdict.decision} ({verdict.reason})")
        record = record_decision(ledger, run, end, before, verdict, accounted_by=me[0])
        fold(state, record)
        if written is not None:
            written.append(record)
    return state


def is_live(row: QueueRow | None) -> bool:
    """The queue holds this job (pending, running or held)."""
    return row is not None and row.state in LIVE_STATES


def ensure_lookahead(
    ledger: Ledger,
    me: str,
    backend: Backend,
    submit: Callable[[str], str],
    *,
    state: ChainState,
    reread: Callable[[], ChainState] | None,
    depth: int,
) -> list[str]:
    """The ``depth`` jobs queued behind ``me`` (``slurm.lookahead``), queuing what is missing;
    strays cancelled.

    ``state`` is the chain as the caller last read it; every ``submitted`` written here is folded
    into it, so the caller's state stays what a re-read would say. ``submit(after)`` queues one job
    of this chain with ``afterany`` on ``after`` and returns its id. Every job queued is recorded
    (``submitted``, ``after``, ``by`` us) before the next one. A pending job of the chain that is
    neither ``me`` nor in the lookahead (a hand rerun, a duplicate, the spare of a job that already
    has its own) is cancelled, so the chain never forks.

    A cancel that came after the caller's read: ``cancel`` writes its record, then reads the ledgers
    and cancels every live job they list; whoever queues a job writes its ``submitted``, then reads
    the ledger. Whichever comes second sees the other, so a job queued here is never missed. When
    nothing was queued, every job of the lookahead was already recorded: cancel finds them itself.
    When a job was queued, the ledger is read again (``reread``) and the lookahead cancelled if the
    chain was; ``reread`` None: the caller reads the ledger later, before it ends, and cancels the
    chain's pending jobs then (a link: after its collector; what it queued waits ``afterany`` it).
    """
    queue = backend.job_rows(chain_jobs_to_ask(state, me, depth))
    chain, after, queued = [], me, False
    for _ in range(depth):
        job = state.successor_of.get(after)
        if job is None or job == me or not is_live(queue.get(job)):
            job = submit(after)
            record = Submitted(job_id=job, after=after, by=me)
            ledger.append(record)
            fold(state, record)
            queued = True
            log(f"job {job} queued after {after}")
        chain.append(job)
        after = job
    strays = [j for j in state.epoch_jobs if j != me and j not in chain and _pending(queue.get(j))]
    if strays:
        backend.cancel(strays)
        log(f"cancelled {' '.join(strays)}: pending jobs of this chain that are not its next ones")
    if queued and reread is not None and reread().cancelled:  # cancel ran meanwhile (it looks again too)
        backend.cancel(chain)
        log(f"the run was cancelled meanwhile: cancelled {' '.join(chain)} again")
    return chain


def queue_chain(
    ledger: Ledger, backend: Backend, script: Path, after: str | None, depth: int, *, by: str
) -> list[str]:
    """A new chain: its first job (``afterany`` on ``after`` when given) and ``depth - 1`` more,
    each ``afterany`` the one before and recorded before the next is queued."""
    jobs: list[str] = []
    for _ in range(depth):
        job = backend.submit(script, after=[after] if after else [])
        ledger.append(Submitted(job_id=job, after=after, by=by))
        jobs.append(job)
        after = job
    return jobs


def cancel_pending(state: ChainState, me: str, backend: Backend, depth: int = 2) -> list[str]:
    """Cancel every pending job of the chain but ``me`` (a chain that stopped needs none): of the jobs
    :func:`chain_jobs_to_ask` names, those the queue shows pending."""
    pending = pending_of_chain(state, me, backend, depth)
    if pending:
        backend.cancel(pending)
    return pending


def pending_of_chain(state: ChainState, me: str, backend: Backend, depth: int) -> list[str]:
    """The chain's jobs (of those :func:`chain_jobs_to_ask` names) the queue shows pending: one query."""
    asked = [job for job in chain_jobs_to_ask(state, me, depth) if job != me]
    queue = backend.job_rows(asked)
    return [job for job in asked if _pending(queue.get(job))]


def chain_jobs_to_ask(state: ChainState, me: str, depth: int) -> list[str]:
    """The jobs of this chain a link asks the scheduler about (pure): its lookahead as recorded (the
    ``depth`` successors from ``me``) and the newest jobs of the epoch that never started (what may
    still be pending: a spare, a hand rerun, a duplicate), at most ``depth + STRAYS_ASKED`` in all.

    Bounded whatever the chain's length or the run's size: the jobs that started are ended or
    running (the link lock tells which), so only the never-started tail can still wait in the queue.
    """
    wanted: list[str] = []
    after = me
    for _ in range(depth):
        job = state.successor_of.get(after)
        if job is None or job == me or job in wanted:
            break
        wanted.append(job)
        after = job
    started = {job for job, _ in state.decided} | {run.job_id for run in state.open_runs}
    never_started = [job for job in state.epoch_jobs if job not in started and job != me]
    for job in reversed(never_started):
        if len(wanted) >= depth + STRAYS_ASKED:
            break
        if job not in wanted:
            wanted.append(job)
    return wanted


def _pending(row: QueueRow | None) -> bool:
    return row is not None and row.state == "PENDING"


def slurm_end(run: DecisionRecord, me: tuple[str, int], backend: Backend) -> str | None:
    """How Slurm ended ``run`` (a run that decided after a signal), asked once: for an earlier run of
    this very job (Slurm requeued it), ``sacct -D``'s row of that run; else how the job ended. None
    when the scheduler does not say (no accounting of runs, a failed query, the job still live)."""
    try:
        if run.job_id == me[0]:
            if not isinstance(backend, SlurmBackend) or backend.accounting_known is False:
                return None
            rows = backend.client.accounting([backend.raw(run.job_id)], every_run=True) or []
            return rows[run.restart_count].state if len(rows) > run.restart_count else None
        row = backend.ended(run.job_id)
    except Exception as error:  # labels only: the chain goes on whatever the scheduler says
        log(f"could not ask the scheduler how job {run.job_id} ended: {error}")
        return None
    return row.state if row is not None and row.state not in LIVE_STATES else None
