"""One link of a chain, run inside a job: ``gymslurm chain-step --run-dir RUN --shard N``.

Order of work, chosen so that a job killed at any moment still leaves the chain able to go on:

0. take the shard's link lock (``shards/NNN/link.lock``, held for the whole link). A link that
   finds it taken, or finds another run of the chain whose job is still alive in the queue (a
   hand rerun of the script, a duplicate Slurm started), logs why and exits 0 at once: no
   decision, no successor, nothing spent. A job that is still running is never accounted for;
1. account for runs that started but never wrote a decision (the predecessor was SIGKILLed, its
   node failed, it crashed, or this very job was requeued): one ``decision`` record each,
   ``accounted_by`` us, from the facts :func:`gymslurm.launcher.decide.dead_run_end` weighs
   (Slurm's state, exit code and elapsed time, the run's start record, whether its collector
   saved new outcomes);
2. if the chain is already finished (a stop, a cancel), do nothing and exit 0;
3. record our start, queue what a killed ``submit`` left unqueued (``first_links.py``), then
   restore the lookahead (``chain.py``): the successor that was queued
   with us and the successor's successor, queued now if missing. So while this job runs two
   links wait behind it, and a job killed at any instant (before its first line of Python
   included) leaves the chain its next link. A requeued run of the same job finds its successor
   still pending (Slurm does not release ``afterany`` for a requeued job) and submits none;
4. reap what is left on this host of a predecessor's servers (pid + create time in the ledger),
   start configured servers (each recorded in the ledger with its pid, create time, start-up
   time and probes), run the collector with resume, forwarding USR1/TERM/INT to it once each,
   writing a heartbeat every 15 s, and supervising the servers (``supervise.py``: probes,
   restarts in place, the evidence channel that keeps a server's death off the rollouts' budget);
5. stop the servers (whole process trees, on every exit path), decide (``decide.py``), write the
   decision;
6. chain goes on: check the lookahead is still queued (queue what someone cancelled);
   chain stops: submit the aggregation job if every shard's chain is finished — exactly once,
   under a lock, even when shards end in the same second — and only then cancel the lookahead,
   so a kill between the two leaves a link that submits it.

In code, :func:`run_link` reads lock → gates → account → gates → start → collect → decide → record →
steps: the gates before the start (a pause, a duplicate, a full disk; a finished chain, the start record,
the budget) are the ordered lists of gates.py, the steps after the decision (the lookahead, the
aggregation, the summary, the notifications) the ordered list of after_decision.py, and the collect
phase (servers, collector, supervision) is collect_phase.py. A feature adds a gate or a step there.

The job exits with :func:`gymslurm.launcher.decide.job_exit_code` so Slurm's state agrees with the
ledger (76 → FAILED). ``--aggregate`` runs the aggregation step instead of a link.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from gymslurm.errors import StoreError
from gymslurm.job import gates
from gymslurm.job.after_decision import after_decision
from gymslurm.job.chain import account_for_dead_runs
from gymslurm.job.collect_phase import collect, prepare
from gymslurm.job.collector_files import collector_busy_s, ledger_resubmit_offset, read_progress, saved_bytes
from gymslurm.job.context import Chain, LinkContext
from gymslurm.job.disk import disk_full
from gymslurm.job.heartbeat import Heartbeat, Signals, job_started_at, log
from gymslurm.job.spend import run_spend, tally_spend
from gymslurm.job.suite_link import run_suite
from gymslurm.launcher.decide import JobEnd, Verdict, decide, job_exit_code
from gymslurm.launcher.ledger import ChainState, Started, record_decision
from gymslurm.launcher.rundir import RunDir, is_suite
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.site.backend import Backend
from gymslurm.store import live
from gymslurm.store.flock import try_lock


def run_link(
    run: RunDir, shard: int, settings: BenchmarkSettings, backend: Backend, me: tuple[str, int]
) -> int:
    """Run one link of shard ``shard``'s chain as job ``me`` (job id, restart count)."""
    signals = Signals()
    signals.install()
    lock = try_link_lock(run.link_lock(shard))
    if lock is None:
        log(
            f"another link of shard {shard} is live: {_holder(run.heartbeat(shard))} holds "
            f"{run.link_lock(shard)}; this job {me[0]} exits without a decision, a successor or spending "
            "anything"
        )
        return 0
    try:  # the start's one read of the ledger
        link = LinkContext(run, shard, settings, backend, me, signals, Chain.read(run, shard))
        return _run_locked(link)
    finally:
        os.close(lock)


def _run_locked(link: LinkContext) -> int:
    """The link, its lock held: gates, accounting, gates, start, collect, decide, record, steps."""
    answer = gates.first_answer(link, gates.BEFORE_ACCOUNTING)
    if answer is None:
        account(link)
        answer = gates.first_answer(link, gates.BEFORE_START)
    if isinstance(answer, gates.Stop):
        return answer.code
    if isinstance(answer, Verdict):
        return _decided_without_starting(link, answer)
    accounted = link.chain.state  # the start's budgets and resubmit mark, whatever is read later
    if is_suite(link.run):  # one model load for every benchmark's shard of this chain (suite_link.py)
        return run_suite(link, accounted)
    prepare(link, accounted)
    end, note = _collect(link, accounted)
    return _decide_and_record(link, end, note, accounted)


def account(link: LinkContext) -> None:
    """A decision for every run of the chain that started and never wrote one (kept in ``link.chain``;
    what those runs held added to the run's tally)."""
    accounted_from = len(link.chain.records)
    account_for_dead_runs(
        link.chain.state,
        link.ledger,
        link.me,
        link.backend,
        output=None if is_suite(link.run) else link.output,  # a suite chain's collectors are its benchmarks'
        limits=link.limits,
        written=link.chain.records,
        beat=_last_beat(link.run.heartbeat(link.shard)),
    )
    records = link.chain.records
    tally_spend(link.run, link.settings, link.shard, records, records[accounted_from:])


def _collect(link: LinkContext, accounted: ChainState) -> tuple[JobEnd, str | None]:
    """Run the collect phase under a heartbeat; what the link knows of how it ended."""
    output, started = link.output, _started(link)
    before_progress, bytes_before = read_progress(output), started.saved_bytes or 0
    with Heartbeat(link.run.heartbeat(link.shard), link.job, link.me[1], started.at) as heartbeat:
        code, killer, note = collect(link, heartbeat, accounted.resubmit_pending)
    signals = link.signals
    end = JobEnd(
        f"SIGNALLED:{signals.names}" if signals.received else "RUNNING",
        code,
        time.time() - job_started_at(),
        before_progress,
        read_progress(output),
        killer,
        saved_outcomes=saved_bytes(output) > bytes_before,
        disk_full=disk_full(link.run.root),
    )
    return end, note


def _decide_and_record(link: LinkContext, end: JobEnd, note: str | None, accounted: ChainState) -> int:
    """Decide from the chain read again (gymslurm pause writes its record before it signals this link,
    so it is there now, as is a cancel that came meanwhile; the budgets are the start's, the lock
    held), record the decision, take the steps after it."""
    link.chain = Chain.read(link.run, link.shard)
    if link.budget is not None:
        link.spent = run_spend(link.run, link.settings, (link.shard, link.chain.records))[1]
    state = link.chain.state
    verdict = decide(end, accounted.budgets, link.limits, gpu_hours_spent=link.spent, paused=state.paused)
    if note:
        verdict = replace(verdict, reason=f"{note}; {verdict.reason}")
    log(f"decision {verdict.decision}: {verdict.reason}")
    started, output = _started(link), link.output
    offset = ledger_resubmit_offset(output)
    extras = _figures(end, output, started)
    link.chain.add(
        record_decision(
            link.ledger, started, end, accounted.budgets, verdict, resubmit_offset=offset, **extras
        )
    )
    after_decision(link, verdict.decision)
    return job_exit_code(verdict.decision)


def _decided_without_starting(link: LinkContext, verdict: Verdict) -> int:
    """Rule 0 (a gate's verdict): record a run that started nothing, take the steps after it."""
    log(f"decision {verdict.decision}: {verdict.reason}")
    elapsed = max(time.time() - job_started_at(), 0.0)
    end, idle = JobEnd("NOT_STARTED", None, elapsed), round(elapsed, 1)
    record = record_decision(link.ledger, _started(link), end, verdict.budgets_after, verdict, idle_s=idle)
    link.chain.add(record)
    after_decision(link, verdict.decision)
    return job_exit_code(verdict.decision)


def _started(link: LinkContext) -> Started:
    assert link.started is not None, "the start gate records the start before anything is collected"
    return link.started


def _figures(end: JobEnd, output: Path, started: Started) -> dict[str, object]:
    """What a decision records for the views: outcomes before and after (the coverage chart), idle time."""
    after = end.progress_after
    idle = _idle_s(output, datetime.fromisoformat(started.at).timestamp(), end.elapsed_s)
    before = end.progress_before.outcomes if end.progress_before else 0
    return {"outcomes_before": before, "outcomes": after.outcomes if after else 0, "idle_s": idle}


def _idle_s(output: Path, started_epoch: float, elapsed_s: float) -> float:
    """Of this link's time, the part with no request in flight: elapsed less its collector's busy time."""
    return round(max(elapsed_s - collector_busy_s(output, started_epoch), 0.0), 1)


def try_link_lock(path: Path) -> int | None:
    """Take the shard's link lock without waiting: its descriptor, or None when a live link holds it.

    The descriptor is not inherited by the collector or servers (close-on-exec), so the lock is
    released exactly when this chain step ends, however it ends (SIGKILL included).
    """
    return try_lock(path)


def _last_beat(heartbeat: Path) -> live.Heartbeat | None:
    """The shard's heartbeat as the last link that beat left it (None when unreadable)."""
    with contextlib.suppress(StoreError):
        return live.read_heartbeat(heartbeat)
    return None


def _holder(heartbeat: Path) -> str:
    with contextlib.suppress(StoreError):
        beat = live.read_heartbeat(heartbeat)
        if beat is not None:
            return f"job {beat.job_id} (heartbeat {beat.at})"
    return "a link whose heartbeat is not readable"
