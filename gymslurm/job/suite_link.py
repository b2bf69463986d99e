"""One link of a suite's chain ``k``: one model load, every benchmark's shard ``k`` collected against it.

The chain's part is a benchmark link's (link.py: the lock, accounting for dead runs, the start
record, the budget gate, the lookahead, the decision record, the aggregation when the last chain
ends, notifications). What differs is the middle:

1. every benchmark with a shard ``k`` whose shard chain has not finished (its own ledger in
   ``benchmarks/<name>/shards/NNN/``) gets a ``start`` there; dead runs are accounted for there
   too, and a suite resubmit is copied to each that did not finish DONE (suite_rules);
2. the shared stack starts once, then each benchmark's own servers (their logs in its folder);
3. the collectors run against them (collectors.py), concurrently or in order;
4. each benchmark's end is decided by the one table with its own budgets and recorded in its own
   ledger, so a benchmark that ends (0, 76, exhausted) is skipped by every later link while the
   others go on; the link's decision combines them (:func:`gymslurm.launcher.suite_rules.combine`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from gymslurm.errors import SlurmError
from gymslurm.exitcodes import ExitCode
from gymslurm.job import servers as server_mod
from gymslurm.job.after_decision import after_decision
from gymslurm.job.chain import account_for_dead_runs
from gymslurm.job.collect_phase import reap_predecessors, server_record
from gymslurm.job.collector_files import collector_busy_s, read_progress, saved_bytes
from gymslurm.job.collector_process import ProgressWatch, adaptive_choice, collector_argv
from gymslurm.job.collectors import CollectorJob, run_collectors
from gymslurm.job.context import Chain, LinkContext
from gymslurm.job.disk import disk_full
from gymslurm.job.heartbeat import Heartbeat, Signals, job_started_at, log
from gymslurm.job.server_watch import Supervisor
from gymslurm.job.shares import RECORD_S, ShareKeeper
from gymslurm.job.spend import run_spend
from gymslurm.job.stack import Note, StartHooks, start_stack
from gymslurm.job.stack_load import StackLoad
from gymslurm.launcher.decide import (
    Budgets,
    Decision,
    JobEnd,
    Limits,
    Progress,
    Verdict,
    decide,
    job_exit_code,
)
from gymslurm.launcher.environment import withheld_in_job
from gymslurm.launcher.ledger import ChainState, Ledger, Resubmitted, Started, record_decision, summarize
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.launcher.suite_rules import combined_verdict, in_chain, load_shares, needs_resubmit_copy
from gymslurm.launcher.suite_run import load_member_settings, member_run, read_suite_record
from gymslurm.site.backend import Backend

# the collector exit a suite chain's decision record carries (what a benchmark link's would say)
COMBINED_EXIT = {Decision.DONE: 0, Decision.CONTINUE: 75, Decision.PAUSED: 75, Decision.STOP_FAILED: 76}


@dataclass
class Bench:
    """One benchmark's shard of this chain, as the link holds it."""

    name: str
    run: RunDir
    settings: BenchmarkSettings
    state: ChainState
    started: Started | None = None
    job: CollectorJob | None = None
    before: Progress | None = None
    urls: dict[str, str] = field(default_factory=dict)  # its servers' addresses in this link

    @property
    def ledger(self) -> Ledger:
        """Its shard chain's ledger."""
        return self.run.ledger(self.shard)

    shard: int = 0

    @property
    def output(self) -> Path:
        """Its shard's collector output."""
        return self.run.shard_output(self.shard, self.settings.output_stem)

    @property
    def done_before(self) -> bool:
        """Its shard chain finished in an earlier link: this link skips it."""
        return self.state.finished


def benches(
    run: RunDir, chain: int, me: tuple[str, int], backend: Backend, *, limits: Limits, suite: ChainState
) -> list[Bench]:
    """Every benchmark with a shard in ``chain``, its dead runs accounted for and a suite resubmit copied."""
    record = read_suite_record(run)
    out = []
    for name in in_chain(record.shards, chain):
        sub = member_run(run, name)
        bench = Bench(
            name, sub, load_member_settings(run, name), summarize(sub.ledger(chain).read()), shard=chain
        )
        bench.state = account_for_dead_runs(
            bench.state,
            bench.ledger,
            me,
            backend,
            output=bench.output,
            limits=limits,
        )
        done = bench.state.last_decision is not None and bench.state.last_decision.decision == Decision.DONE
        decided = bench.state.last_decision is not None
        if needs_resubmit_copy(bench.state.epochs, suite.epochs, bench.state.finished and done, decided):
            copy = Resubmitted(reset_budget=suite.resubmit_pending or not suite.paused)
            bench.ledger.append(copy)
            bench.state = summarize(bench.ledger.read())
        out.append(bench)
    return out


def _last_reason(bench: Bench) -> str | None:
    """The reason of the benchmark's last decision (a start failure the same as that one's stops it)."""
    last = bench.state.last_decision
    return last.reason if last is not None else None


def collect_suite(
    run: RunDir,
    chain: int,
    settings: BenchmarkSettings,
    signals: Signals,
    me: tuple[str, int],
    *,
    heartbeat: Heartbeat,
    todo: list[Bench],
    note_server: Note,
) -> str | None:
    """Start the stack once and, while it loads, each benchmark's own servers and the collectors
    (job/stack_load.py: they dispatch once it is healthy); a note when the link itself stopped
    them (a server start failure, a server given up on)."""
    started: list[server_mod.RunningServer] = []
    withheld = withheld_in_job(settings)
    lock = threading.Lock()

    def note(event: str, server: server_mod.RunningServer, cause: str) -> None:
        with lock:  # one ledger, appended from the stack's thread, every benchmark's and the link's
            note_server(event, server, cause)

    stack = StackLoad(settings.servers, run.root / "logs", chain, started, note=note, withheld=withheld)
    own = OwnServers()
    try:
        stack.start()
        try:
            shared = stack.addresses()
        except server_mod.ServerStartError as error:
            return _stack_failed(todo, error)
        record = read_suite_record(run)
        sequential = record.order == "sequential"
        weights = {e.name: e.weight for e in record.benchmarks}
        keeper = ShareKeeper(
            {b.name: weights.get(b.name, 1.0) for b in todo}, {b.name: b.output for b in todo}
        )
        shares = load_shares(keeper.weights, True) if sequential else keeper.initial()
        names = {s.name for s in settings.servers}
        failed = own.start(
            todo, shared, started, chain, note=note, withheld=withheld, stack=names, beside=stack
        )
        if (failure := stack.failure()) is not None:
            return _stack_failed(todo, failure)
        loading = frozenset(s.name for s in stack.own()) if stack.loading else frozenset()
        for bench in todo:
            if bench.name in failed:
                code = server_mod.start_failure_exit(failed[bench.name], _last_reason(bench))[0]
                bench.job = _ended(bench.name, code)
                log(f"{bench.name}: its servers did not start: {failed[bench.name]}")
                continue
            bench.job = _collector_job(
                bench, chain, shares[bench.name], loading, shared=len(todo) > 1 and not sequential
            )
        jobs = [b.job for b in todo if b.job is not None and not b.job.ended]
        supervised = stack.own() or any(s.process for s in started)
        supervisor = Supervisor(started, None, note, say=log) if supervised else None
        kept = keeper if supervisor is not None and not sequential and len(jobs) > 1 else None
        run_collectors(
            jobs, signals, supervisor, heartbeat=heartbeat, sequential=sequential, stack=stack, shares=kept
        )
        if (failure := stack.failure()) is not None and any(job.stack_failed for job in jobs):
            return _stack_failed([b for b in todo if b.job is not None and b.job.stack_failed], failure)
        if supervisor is not None and supervisor.gave_up is not None:
            for job in jobs:
                job.code, job.killer = ExitCode.RETRY, None
            return f"server {supervisor.gave_up!r} went down more than its restart_limit; collectors stopped"
        for job in jobs:
            if job.watch is not None and job.watch.reason is not None:
                job.code = ExitCode.RETRY
        return None
    finally:
        stack.stop()  # a stack still starting: its instance being probed is killed
        for server in started:
            server_mod.stop(server)
        own.release()
        stack.release()


def _stack_failed(benches: list[Bench], error: server_mod.ServerStartError) -> str:
    """Each benchmark ends as a link whose stack did not start ends (start_failure_exit)."""
    for bench in benches:
        bench.job = _ended(bench.name, server_mod.start_failure_exit(error, _last_reason(bench))[0])
    return f"the shared stack did not start: {error}"


def _collector_job(
    bench: Bench, chain: int, share: float, loading: frozenset[str], *, shared: bool
) -> CollectorJob:
    """A benchmark's collector as this link runs it: its share of the model server, its load's
    adaptation (asked of a model server still loading when it answers: adaptive_load.py) and, beside
    others, its live progress record every second (what the shares follow: job/shares.py)."""
    adaptive = adaptive_choice(bench.settings, bench.urls, loading=loading)
    often = [f"+live_progress_interval_s={RECORD_S}"] if shared else []
    argv = collector_argv(
        bench.settings,
        bench.run,
        chain,
        bench.urls,
        bench.state.resubmit_pending,
        adaptive=[*adaptive.overrides, f"+dispatch_load_share={share:.4g}", *often],
    )
    log(f"{bench.name}: {adaptive.why}; its share of the model server {share:.2f}")
    return CollectorJob(
        name=bench.name,
        argv=argv,
        first_override=len(bench.settings.collector.command),
        env=bench.settings.collector.env,
        withheld=withheld_in_job(bench.settings),
        watch=ProgressWatch(bench.output, bench.settings.slurm.stall_window_s),
    )


class OwnServers:
    """Every benchmark's own servers (those not in the shared stack), started at once, a thread each.

    A benchmark's servers start in their order, as its link alone starts them, but one benchmark's
    do not wait for another's, nor for the shared stack to be healthy (only for its addresses): each
    is a process start and a health wait, and five Environment Servers one after another are five
    start-ups before any collector runs. A server's ``startup_timeout_s`` counts from the stack's
    readiness (it may wait on the model). Each thread stays until :meth:`release`: the kernel kills
    a server when the *thread* that started it ends (``PR_SET_PDEATHSIG`` follows the parent thread,
    not the process), so a thread lives as long as the servers it started; the link releases them
    once it stopped its servers, and a link that dies takes them, and so its servers, with it.
    """

    def __init__(self) -> None:
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(
        self,
        todo: list[Bench],
        shared: list[server_mod.RunningServer],
        started: list[server_mod.RunningServer],
        chain: int,
        *,
        note: Note,
        withheld: frozenset[str],
        stack: set[str],
        beside: StackLoad,
    ) -> dict[str, server_mod.ServerStartError]:
        """Start them, each appended to ``started`` (the caller stops them) and each benchmark's
        addresses (``shared``'s too) in its ``urls``; the benchmarks whose servers did not all
        start, and why."""
        failed, unexpected = dict[str, server_mod.ServerStartError](), list[BaseException]()
        ready = threading.Semaphore(0)
        hooks = StartHooks(held=lambda: beside.loading, cancelled=beside.cancelled_by_failure)

        def one(bench: Bench) -> None:
            mine = list(shared)
            own = [s for s in bench.settings.servers if s.name not in stack]
            try:
                start_stack(
                    own, bench.run.root / "logs", chain, mine, note=note, withheld=withheld, hooks=hooks
                )
            except server_mod.ServerStartError as error:
                failed[bench.name] = error
            except BaseException as error:  # raised in the link's thread, below
                unexpected.append(error)
            finally:
                with self._lock:
                    started.extend(mine[len(shared) :])
                bench.urls = {s.name: s.url for s in mine}
                ready.release()
            self._release.wait()

        for bench in todo:
            thread = threading.Thread(target=one, args=(bench,), name=f"servers-{bench.name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        for _ in todo:
            ready.acquire()
        if unexpected:
            raise unexpected[0]
        return failed

    def release(self) -> None:
        """Let the starting threads end (after the link stopped every server they started)."""
        self._release.set()
        for thread in self._threads:
            thread.join(timeout=5.0)


def _ended(name: str, code: int) -> CollectorJob:
    job = CollectorJob(name, [], 0, {}, frozenset(), None, ended=True)
    job.code = code
    return job


def decide_benches(
    todo: list[Bench],
    limits: Limits,
    signals: Signals,
    *,
    spent_now: float,
    paused: bool,
    note: str | None,
) -> dict[str, Decision]:
    """Each benchmark's verdict by the one table with its own budgets, recorded in its own ledger."""
    elapsed = time.time() - job_started_at()
    slurm_state = f"SIGNALLED:{signals.names}" if signals.received else "RUNNING"
    decisions = {}
    for bench in todo:
        assert bench.started is not None
        job = bench.job
        code, killer = (job.code, job.killer) if job is not None else (None, None)
        end = JobEnd(
            slurm_state,
            code,
            elapsed,
            bench.before,
            read_progress(bench.output),
            killer,
            saved_outcomes=saved_bytes(bench.output) > (bench.started.saved_bytes or 0),
            disk_full=disk_full(bench.run.root),
        )
        verdict: Verdict = decide(end, bench.state.budgets, limits, gpu_hours_spent=spent_now, paused=paused)
        if job is not None and job.watch is not None and job.watch.reason is not None:
            verdict = replace(verdict, reason=f"unresponsive: {job.watch.reason}; {verdict.reason}")
        if note:
            verdict = replace(verdict, reason=f"{note}; {verdict.reason}")
        log(f"{bench.name}: decision {verdict.decision}: {verdict.reason}")
        after = end.progress_after
        extras = {
            "outcomes_before": bench.before.outcomes if bench.before else 0,
            "outcomes": after.outcomes if after else 0,
            "busy_s": round(
                collector_busy_s(bench.output, datetime.fromisoformat(bench.started.at).timestamp()), 1
            ),
        }
        record_decision(bench.ledger, bench.started, end, bench.state.budgets, verdict, **extras)
        decisions[bench.name] = verdict.decision
    return decisions


def start_benches(todo: list[Bench], me: tuple[str, int]) -> None:
    """A ``start`` in each benchmark's shard ledger (the same job), with what it had saved."""
    host = socket.gethostname()
    for bench in todo:
        bench.output.parent.mkdir(parents=True, exist_ok=True)
        bench.before = read_progress(bench.output)
        bench.started = Started(
            job_id=me[0], restart_count=me[1], host=host, saved_bytes=saved_bytes(bench.output), gpus=0
        )
        bench.ledger.append(bench.started)


def suite_outcome(
    all_benches: list[Bench], decided: dict[str, Decision], chain_budgets: Budgets, elapsed: float
) -> Verdict:
    """The suite link's verdict: this link's decisions and the stops benchmarks had already."""
    decisions = {}
    for bench in all_benches:
        if bench.name in decided:
            decisions[bench.name] = decided[bench.name]
        elif bench.state.last_decision is not None:
            decisions[bench.name] = bench.state.last_decision.decision
    progressed = any(
        (b.started is not None and saved_bytes(b.output) > (b.started.saved_bytes or 0)) for b in all_benches
    )
    return combined_verdict(decisions, chain_budgets, elapsed, progressed)


def combined_exit(decision: Decision) -> int:
    """The collector exit code a suite chain's decision record carries."""
    return COMBINED_EXIT.get(decision, ExitCode.RETRY)


def pid_note() -> str:
    """This process, for the log."""
    return f"suite link pid {os.getpid()}"


def run_suite(link: LinkContext, accounted: ChainState) -> int:
    """The middle of a suite link (link.py passed its gates and accounted for the suite chain): every
    benchmark's shard of this chain collected against one start of the shared stack, each decided in
    its own ledger, the suite chain's decision combined from them, recorded, and the steps after it."""
    run, chain, me = link.run, link.shard, link.me
    reap_predecessors(accounted, link.ledger, me)
    try:
        link.ensure_lookahead(recheck=False)
    except (SlurmError, OSError) as error:  # collect anyway; queued again after the decision
        log(f"could not queue the next links now: {error}")
    every = benches(run, chain, me, link.backend, limits=link.limits, suite=accounted)
    todo = [b for b in every if not b.done_before]
    log(f"suite chain {chain}: {', '.join(b.name for b in todo) or 'no benchmark'} to collect")
    start_benches(todo, me)
    host, started = socket.gethostname(), link.started
    assert started is not None, "the start gate records the start before anything is collected"

    def note(event: str, server: server_mod.RunningServer, cause: str) -> None:
        log(f"server {server.name!r} {event}: {cause}")
        link.ledger.append(server_record(me, host, event, server, cause))

    said = None
    if todo:
        with Heartbeat(run.heartbeat(chain), me[0], me[1], started.at) as heartbeat:
            said = collect_suite(
                run, chain, link.settings, link.signals, me, heartbeat=heartbeat, todo=todo, note_server=note
            )
    link.chain = Chain.read(run, chain)
    if link.budget is not None:
        link.spent = run_spend(run, link.settings, (chain, link.chain.records))[1]
    paused = link.chain.state.paused
    decided = decide_benches(todo, link.limits, link.signals, spent_now=link.spent, paused=paused, note=said)
    elapsed = time.time() - job_started_at()
    verdict = suite_outcome(every, decided, accounted.budgets, elapsed)
    log(f"decision {verdict.decision}: {verdict.reason}")
    signals = link.signals
    slurm_state = f"SIGNALLED:{signals.names}" if signals.received else "RUNNING"
    end = JobEnd(slurm_state, combined_exit(verdict.decision), elapsed)
    link.chain.add(record_decision(link.ledger, started, end, accounted.budgets, verdict))
    after_decision(link, verdict.decision)
    return job_exit_code(verdict.decision)
