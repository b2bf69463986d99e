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

The job exits with :func:`gymslurm.launcher.decide.job_exit_code` so Slurm's state agrees with the
ledger (76 → FAILED). ``--aggregate`` runs the aggregation step instead of a link.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from gymslurm.errors import ConfigError, SlurmError, StoreError
from gymslurm.exitcodes import ExitCode
from gymslurm.launcher.decide import Decision, JobEnd, Limits, Verdict, decide, job_exit_code, start_gate
from gymslurm.launcher.job import servers as server_mod
from gymslurm.launcher.job.aggregation import maybe_submit_aggregation
from gymslurm.launcher.job.chain import (
    account_for_dead_runs,
    cancel_pending,
    ensure_lookahead,
    other_live_link,
)
from gymslurm.launcher.job.collector_files import read_progress, read_resubmit_offset, saved_bytes
from gymslurm.launcher.job.collector_process import (
    REVERIFY_COMMAND_LENGTH,
    ProgressWatch,
    adaptive_choice,
    collector_argv,
    overrides_problem,
    reverify_argv,
    run_collector,
)
from gymslurm.launcher.job.disk import disk_full, wait_for_space
from gymslurm.launcher.job.environment import withheld_in_job
from gymslurm.launcher.job.first_links import complete_queuing
from gymslurm.launcher.job.heartbeat import Heartbeat, Signals, job_started_at, log
from gymslurm.launcher.job.server_watch import Supervisor
from gymslurm.launcher.job.stack import start_stack
from gymslurm.launcher.job.summary import write_summary_if_ended
from gymslurm.launcher.ledger import (
    Cancelled,
    ChainState,
    Ledger,
    Record,
    ServerRecord,
    Started,
    fold,
    last_reason,
    record_decision,
    summarize,
)
from gymslurm.launcher.links import allocated_gpus, gpu_budget, run_gpu_hours
from gymslurm.launcher.notify import (
    LINK_GRACE_S,
    Notifier,
    budget_event,
    chain_events,
    run_done_event,
    safely,
)
from gymslurm.launcher.rundir import RunDir, ensure_shard_input
from gymslurm.launcher.server_placement import job_gpus
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.launcher.site.backend import Backend, SlurmBackend
from gymslurm.store import live
from gymslurm.store.flock import try_lock


def _limits(settings: BenchmarkSettings, gpu_hours: float | None = None) -> Limits:
    slurm = settings.slurm
    return Limits(slurm.infra_retry_limit, slurm.max_walltime_s, slurm.max_links_without_progress, gpu_hours)


def run_spend(
    run: RunDir, settings: BenchmarkSettings, own: tuple[int, list[Record]] | None = None
) -> tuple[float | None, float]:
    """The run's GPU-hours budget (with every resubmit raise) and what every chain spent until now.

    Read only when a budget is set (every shard's ledger, once per phase of a link); ``own``: the
    calling link's shard and the records it just read, used instead of reading its ledger again.
    """
    if settings.budget.gpu_hours is None:  # no budget, no raise (resubmit refuses one): nothing to read
        return None, 0.0
    aggregate = run.aggregate_ledger.read()
    budget = gpu_budget(settings.budget.gpu_hours, aggregate)
    array = run.read_array()
    chains = [
        own[1] if own is not None and own[0] == shard else run.chain_records(shard, array)
        for shard in range(settings.shards)
    ]
    return budget, run_gpu_hours([*chains, aggregate], time.time())


def _idle_s(output: Path, started_epoch: float, elapsed_s: float) -> float:
    """Of this link's time, the part with no request in flight: elapsed less its collector's busy time."""
    try:
        record = live.read_progress(live.progress_path(output))
    except StoreError:
        record = None
    busy = record.busy_s if record is not None and record.started_epoch >= started_epoch - 1.0 else 0.0
    return round(max(elapsed_s - busy, 0.0), 1)


def submit_link(run: RunDir, shard: int, backend: Backend, after: list[str]) -> str:
    """Queue a link of ``shard``: on Slurm a one-task array of its range's links script (task
    ``shard - base``), so every link of every shard is an array task of the same script."""
    array = run.read_array() if isinstance(backend, SlurmBackend) else None
    if array is not None and isinstance(backend, SlurmBackend):
        base = array.base(shard)
        task = shard - base
        return f"{backend.submit_array(run.links_script_for(base), str(task), after=after)}_{task}"
    return backend.submit(run.script(shard), after=after)


def shard_state(run: RunDir, shard: int) -> ChainState:
    """The shard's chain as its ledger (and, in an array run, array.json) tells it."""
    return run.chain_state(shard, run.read_array())


@dataclass
class Chain:
    """A shard's chain as this link holds it: the records of one read of its ledger, then every record
    the link appended since, and their fold. A link reads its ledger once per phase (at its start,
    after its collector) and keeps this up to date with what it writes itself in between."""

    records: list[Record]
    state: ChainState

    @classmethod
    def read(cls, run: RunDir, shard: int) -> Chain:
        """One read of the shard's ledger (and, in an array run, array.json)."""
        records = run.chain_records(shard, run.read_array())
        return cls(records, summarize(records))

    def add(self, record: Record) -> None:
        """A record this link appended: folded in, as a re-read would."""
        self.records.append(record)
        fold(self.state, record)


def ensure_link_lookahead(
    run: RunDir,
    shard: int,
    me: str,
    backend: Backend,
    settings: BenchmarkSettings,
    *,
    state: ChainState | None = None,
    recheck: bool = True,
) -> list[str]:
    """The links queued behind this job (:func:`gymslurm.launcher.job.chain.ensure_lookahead`), from
    ``state`` (the chain as the caller holds it; read when not given), which gets what is queued.
    ``recheck`` False: a cancel that raced a link queued here is caught by the link's read after its
    collector (``_after_decision``), not by reading the ledger again now."""
    return ensure_lookahead(
        run.ledger(shard),
        me,
        backend,
        lambda after: submit_link(run, shard, backend, [after]),
        state=shard_state(run, shard) if state is None else state,
        reread=(lambda: shard_state(run, shard)) if recheck else None,
        depth=settings.slurm.lookahead,
    )


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


def run_link(
    run: RunDir, shard: int, settings: BenchmarkSettings, backend: Backend, me: tuple[str, int]
) -> int:
    """Run one link of shard ``shard``'s chain as job ``me`` (job id, restart count)."""
    signals = Signals()
    signals.install()
    duplicate = f"this job {me[0]} exits without a decision, a successor or spending anything"
    lock = try_link_lock(run.link_lock(shard))
    if lock is None:
        log(
            f"another link of shard {shard} is live: {_holder(run.heartbeat(shard))} holds "
            f"{run.link_lock(shard)}; {duplicate}"
        )
        return 0
    try:
        chain = Chain.read(run, shard)  # the start's one read of the ledger
        if chain.state.paused:  # a job queued when the run was paused: it starts nothing and spends nothing
            return _start_nothing_paused(chain.state, shard, me[0], backend)
        other = other_live_link(chain.state, me, backend)
        if other is not None:
            log(
                f"another link of shard {shard} is live: job {other} started and is still in the queue; "
                f"{duplicate}"
            )
            return 0
        return _run_link_locked(run, shard, settings, backend, me, signals=signals, chain=chain)
    finally:
        os.close(lock)


def _run_link_locked(
    run: RunDir,
    shard: int,
    settings: BenchmarkSettings,
    backend: Backend,
    me: tuple[str, int],
    *,
    signals: Signals,
    chain: Chain,
) -> int:
    ledger = run.ledger(shard)
    budget, spent = run_spend(run, settings, (shard, chain.records))
    limits = _limits(settings, budget)
    output = run.shard_output(shard, settings.output_stem)
    if disk_full(run.root) is not None:  # keep the chain's next links queued, then wait for space
        with contextlib.suppress(SlurmError, StoreError, OSError):
            ensure_link_lookahead(run, shard, me[0], backend, settings, state=chain.state)
        if not wait_for_space(run.root, ledger, me[0], signals):
            return ExitCode.DONE
        chain = Chain.read(run, shard)  # a wait of any length: what cancel, pause or inject wrote meanwhile
    state = account_for_dead_runs(
        chain.state,
        ledger,
        me,
        backend,
        output=output,
        limits=limits,
        written=chain.records,
        beat=_last_beat(run.heartbeat(shard)),
    )
    if state.finished:
        log(f"the chain of shard {shard} is already finished ({_finished_why(state)}); nothing to do")
        if not state.cancelled:  # a stop written by accounting above, or by a link killed right
            maybe_submit_aggregation(run, settings, backend, me[0], (shard, state))  # after it: may be due
            cancel_pending(state, me[0], backend)
        return ExitCode.DONE
    started = _record_start(run, shard, settings, me, output)
    if started is None:
        return ExitCode.DONE
    chain.add(started)
    bytes_before = started.saved_bytes or 0
    notifier = Notifier(run, settings.notify, settings.name)
    if settings.notify:  # what earlier passes left pending (a receiver that was down), meanwhile
        notifier.deliver_soon()
    gate = start_gate(spent, state.budgets, limits) if budget is not None else None
    if gate is not None:
        stopped = _stop_before_start(
            run, shard, settings, backend, me=me, started=started, gate=gate, chain=chain
        )
        _link_events(notifier, shard, settings, chain.records, spent=spent, budget=budget)
        return stopped
    reap_predecessors(state, ledger, me)
    chain = _prepare_to_collect(run, shard, settings, backend, me[0], output=output, chain=chain)
    before_progress = read_progress(output)
    with Heartbeat(run.heartbeat(shard), me[0], me[1], started.at) as heartbeat:
        resubmit = state.resubmit_pending
        code, killer, note = _collect(
            run,
            shard,
            settings,
            signals,
            resubmit,
            me,
            heartbeat=heartbeat,
            previous=last_reason(chain.records),
        )
    elapsed = time.time() - job_started_at()
    slurm_state = f"SIGNALLED:{signals.names}" if signals.received else "RUNNING"
    end = JobEnd(
        slurm_state,
        code,
        elapsed,
        before_progress,
        read_progress(output),
        killer,
        saved_outcomes=saved_bytes(output) > bytes_before,
        disk_full=disk_full(run.root),
    )
    # the second phase's one read: gymslurm pause writes its record before it signals this link, so
    # it is there now, as is a cancel that came meanwhile; the budgets are the start's (the lock held)
    after = Chain.read(run, shard)
    spent_now = run_spend(run, settings, (shard, after.records))[1] if budget is not None else 0.0
    verdict = decide(end, state.budgets, limits, gpu_hours_spent=spent_now, paused=after.state.paused)
    if note:
        verdict = replace(verdict, reason=f"{note}; {verdict.reason}")
    log(f"decision {verdict.decision}: {verdict.reason}")
    offset = read_resubmit_offset(output)
    extras = _figures(end, output, started, elapsed)
    after.add(record_decision(ledger, started, end, state.budgets, verdict, resubmit_offset=offset, **extras))
    _after_decision(run, shard, settings, backend, me=me[0], decision=verdict.decision, state=after.state)
    _link_events(notifier, shard, settings, after.records, spent=spent_now, budget=budget)
    return job_exit_code(verdict.decision)


def _figures(end: JobEnd, output: Path, started: Started, elapsed: float) -> dict[str, object]:
    """What a decision records for the views: outcomes before and after (the coverage chart), idle time."""
    after = end.progress_after
    idle = _idle_s(output, datetime.fromisoformat(started.at).timestamp(), elapsed)
    before = end.progress_before.outcomes if end.progress_before else 0
    return {"outcomes_before": before, "outcomes": after.outcomes if after else 0, "idle_s": idle}


def _prepare_to_collect(
    run: RunDir,
    shard: int,
    settings: BenchmarkSettings,
    backend: Backend,
    me: str,
    *,
    output: Path,
    chain: Chain,
) -> Chain:
    """Before the collector starts: the first links a killed submit left unqueued, this chain's
    lookahead (both tried again later when they fail now), the output folder and the shard's input.
    The chain as the link holds it, with what was queued (read again only when a killed submit's
    first links were queued here: array.json's spare tasks are links of this chain too)."""
    try:  # a submit killed midway left first links unqueued: the run's first job queues them
        if complete_queuing(run, backend, settings.slurm.lookahead, me):
            chain = Chain.read(run, shard)
    except (SlurmError, StoreError, OSError) as error:
        log(f"could not complete the first links a killed submit left: {error}")
    try:
        ensure_link_lookahead(run, shard, me, backend, settings, state=chain.state, recheck=False)
    except (SlurmError, OSError) as error:  # collect anyway; queuing is tried again after the decision
        log(f"could not queue the next links now: {error}")
    output.parent.mkdir(parents=True, exist_ok=True)
    if run.read_info().array:
        ensure_shard_input(run, shard, settings.shards)
    return chain


def _record_start(
    run: RunDir, shard: int, settings: BenchmarkSettings, me: tuple[str, int], output: Path
) -> Started | None:
    """Append this run's start record (the GPUs it holds, the bytes saved so far); None when the run was
    cancelled as this first link started (nothing is queued, nothing to do)."""
    ledger = run.ledger(shard)
    gpus = allocated_gpus(os.environ, job_gpus(settings.servers, settings.slurm.declared_gpus))
    host, saved = socket.gethostname(), saved_bytes(output)
    started = Started(job_id=me[0], restart_count=me[1], host=host, saved_bytes=saved, gpus=gpus)
    ledger.append(started)
    raced = cancelled_while_starting(run, shard, started)
    if raced is None:
        return started
    if raced:
        ledger.append(Cancelled(job_ids=[me[0]], by="cancel (the run's record, read at start)"))
    log(f"the run was cancelled as this first link of shard {shard} started; nothing queued")
    return None


def _link_events(
    notifier: Notifier,
    shard: int,
    settings: BenchmarkSettings,
    records: list[Record],
    *,
    spent: float,
    budget: float | None,
) -> None:
    """Claim this chain's events (from ``records``: the chain as the link holds it, its decision
    included) and the budget warning, and give delivery a bounded moment."""
    if not settings.notify:
        return
    warning = budget_event(spent, budget, settings.budget.warn_at)
    events = [*chain_events(shard, records), warning]
    safely(lambda: notifier.emit_all(events))
    if not settings.aggregation.enabled:
        safely(lambda: notifier.emit_all([run_done_event(notifier.run, settings.shards, None)]))
    notifier.deliver_soon()
    notifier.wait(LINK_GRACE_S)


def _stop_before_start(
    run: RunDir,
    shard: int,
    settings: BenchmarkSettings,
    backend: Backend,
    *,
    me: tuple[str, int],
    started: Started,
    gate: Verdict,
    chain: Chain,
) -> int:
    """Rule 0: the budget is spent; record a run that started nothing, stop the chain, exit 75."""
    log(f"decision {gate.decision}: {gate.reason}")
    elapsed = max(time.time() - job_started_at(), 0.0)
    end = JobEnd("NOT_STARTED", None, elapsed)
    idle = round(elapsed, 1)
    chain.add(record_decision(run.ledger(shard), started, end, gate.budgets_after, gate, idle_s=idle))
    _after_decision(run, shard, settings, backend, me=me[0], decision=gate.decision, state=chain.state)
    return job_exit_code(gate.decision)


def _collect(  # noqa: PLR0917
    run: RunDir,
    shard: int,
    settings: BenchmarkSettings,
    signals: Signals,
    resubmit: bool,
    me: tuple[str, int],
    *,
    heartbeat: Heartbeat,
    previous: str | None = None,
) -> tuple[int | None, int | None, str | None]:
    """Start the stack and run the collector; ``previous``: the reason of the shard's last decision
    (a start-up failure the same as that one's stops the chain)."""
    ledger, host = run.ledger(shard), socket.gethostname()

    def note(event: str, server: server_mod.RunningServer, cause: str) -> None:
        log(f"server {server.name!r} {event}: {cause}")
        ledger.append(_serverrecord_decision(me, host, event, server, cause))

    started: list[server_mod.RunningServer] = []
    withheld = withheld_in_job(settings)
    try:
        try:
            start_stack(settings.servers, run.root / "logs", shard, started, note=note, withheld=withheld)
        except server_mod.ServerStartError as error:
            code, repeated = server_mod.start_failure_exit(error, previous)
            return code, None, f"server start failed{repeated}: {error}"
        urls = {server.name: server.url for server in started}
        source = run.read_info().reverify_of  # submit --reverify: re-grade that run's answers instead
        watch: ProgressWatch | None = None  # reverify keeps no progress record: each call has a timeout
        if source is None:
            adaptive = adaptive_choice(settings, urls)
            log(adaptive.why)
            argv = collector_argv(settings, run, shard, urls, resubmit, adaptive=adaptive.overrides)
            first = len(settings.collector.command)
            output = run.shard_output(shard, settings.output_stem)
            watch = ProgressWatch(output, settings.slurm.stall_window_s)
        else:
            argv = reverify_argv(settings, run, shard, urls, RunDir(Path(source)))
            first = REVERIFY_COMMAND_LENGTH
        if too_long := overrides_problem(argv[first:]):  # submit checked it
            return ExitCode.REFUSED, None, f"collector not started: {too_long}"
        supervisor = Supervisor(started, None, note, say=log) if any(s.process for s in started) else None
        try:
            env_code, killer = run_collector(
                argv,
                signals,
                settings.collector.env,
                supervisor,
                heartbeat=heartbeat,
                first_override=first,
                withheld=withheld,
                watch=watch,
            )
        except ConfigError as error:  # collector.env names a variable this job does not have
            return ExitCode.RETRY, None, f"collector not started: {error}"
        if watch is not None and watch.reason is not None:
            return (
                ExitCode.RETRY,
                None,
                (
                    f"unresponsive: {watch.reason}; the link stopped the collector (exit {env_code}, counted "
                    "as 1: retryable, the next link starts it afresh)"
                ),
            )
        if supervisor is not None and supervisor.gave_up is not None:
            name = supervisor.gave_up
            limit = next(s.settings.restart_limit for s in started if s.settings.name == name)
            return (
                ExitCode.RETRY,
                None,
                (
                    f"server {name!r} went down more than restart_limit={limit} times; the collector was "
                    f"stopped (exit {env_code}, counted as 1: retryable, the next link starts it afresh)"
                ),
            )
    finally:
        for server in started:  # every exit path: a return, an exception, a signal's unwinding
            server_mod.stop(server)
    return env_code, killer, None


def _serverrecord_decision(
    me: tuple[str, int], host: str, event: str, server: server_mod.RunningServer, cause: str | None
) -> ServerRecord:
    return ServerRecord(
        job_id=me[0],
        restart_count=me[1],
        name=server.name,
        event=event,  # type: ignore[arg-type]
        host=host,
        pid=server.pid,
        create_time=server.create_time or None,
        url=server.url,
        startup_s=round(server.startup_s, 3) if event in ("started", "restarted") else None,
        restarts=server.restarts,
        cause=cause,
        probes=server.probes[-20:],
    )


def cancelled_while_starting(run: RunDir, shard: int, started: Started) -> bool | None:
    """``gymslurm cancel`` came while this link was starting on an empty ledger (an array's first link):
    True when the shard's cancel is still to be written here, False when cancel wrote it, None: not.

    The run's record stands only for shards whose ledger is empty, and this link's ``start`` just
    ended that: cancel writes its record, then reads the ledgers; this link writes its start, then
    reads the run's ledger. Whichever comes second sees the other, so the shard is cancelled.
    """
    if not any(r.kind == "cancelled" for r in run.run_ledger.read()):
        return None
    records = run.ledger(shard).read()
    if records[:1] != [started]:  # the ledger had records before this start: the run's record is not its
        return None
    return not any(r.kind == "cancelled" for r in records)


def reap_predecessors(state: ChainState, ledger: Ledger, me: tuple[str, int]) -> int:
    """Kill what is left on this host of earlier links' servers (proved theirs by pid + create time)."""
    host, reaped = socket.gethostname(), 0
    for record in state.server_processes:
        if (record.job_id, record.restart_count) == me or record.host != host or record.pid is None:
            continue
        if server_mod.reap(record.pid, record.create_time or 0.0):
            reaped += 1
            log(f"reaped server {record.name!r} (pid {record.pid}) left by job {record.job_id}")
            cause = f"left running; reaped by job {me[0]}"
            ledger.append(record.model_copy(update={"event": "reaped", "cause": cause}))
    return reaped


def _after_decision(
    run: RunDir,
    shard: int,
    settings: BenchmarkSettings,
    backend: Backend,
    *,
    me: str,
    decision: Decision,
    state: ChainState,
) -> None:
    """Chain goes on: the lookahead is restored. Chain stops: the aggregation is queued if due,
    *then* the lookahead is cancelled, so a kill between the two leaves a link that finishes it.
    ``state``: the chain as read after the collector, this link's decision folded in."""
    if state.cancelled:  # what this link queued before its collector, should cancel have missed it
        stale = " ".join(cancel_pending(state, me, backend)) or "-"
        log(f"the chain of shard {shard} was cancelled; not queuing anything (cancelled {stale})")
        return
    if decision.continues:
        try:
            ensure_link_lookahead(run, shard, me, backend, settings, state=state)
        except (SlurmError, OSError) as error:  # the links queued before are still there
            log(f"could not restore the queued links now: {error}")
        return
    maybe_submit_aggregation(run, settings, backend, me, (shard, state))
    if not settings.aggregation.enabled and decision != Decision.PAUSED:  # the last chain ends the run
        write_summary_if_ended(run, settings, backend, f"job {me} (shard {shard})")
    cancelled = cancel_pending(state, me, backend)
    queued = " ".join(cancelled) or "-"
    ended = "paused" if decision == Decision.PAUSED else "finished"
    log(f"chain of shard {shard} {ended} ({decision}); cancelled the queued links {queued}")


def _start_nothing_paused(state: ChainState, shard: int, me: str, backend: Backend) -> int:
    cancelled = " ".join(cancel_pending(state, me, backend)) or "-"
    log(f"the run is paused (gymslurm pause): job {me} starts nothing; cancelled the queued {cancelled}")
    return ExitCode.DONE


def _finished_why(state: ChainState) -> str:
    if state.cancelled:
        return "cancelled"
    return state.last_decision.decision if state.last_decision else "finished"
