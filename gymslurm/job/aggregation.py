"""The aggregation job: queued exactly once when every shard's chain has finished, then the merge.

Submitted under the run's aggregate lock by whichever link (or ``resubmit``) sees the last chain
finish, so shards that end in the same second queue one aggregation between them.

The aggregation is a chain like a shard's (``chain.py``): it is queued with its lookahead (two
jobs, the second ``afterany`` the first), takes its own lock (``aggregate/link.lock``), accounts
for an aggregation job that died without a decision (crash: one infrastructure retry of
``slurm.infra_retry_limit``; Slurm ended it: none), restores its lookahead, merges and decides
with the same table (:func:`gymslurm.launcher.decide.decide`). It runs to success exactly once:
a job that finds the aggregation decided (DONE or a stop) only cancels what is left queued.
"""

from __future__ import annotations

import glob
import os
import socket
import time
from dataclasses import replace
from pathlib import Path

from gymslurm.errors import SlurmError, StoreError
from gymslurm.exitcodes import ExitCode
from gymslurm.job.chain import (
    account_for_dead_runs,
    cancel_pending,
    ensure_lookahead,
    other_live_link,
    queue_chain,
)
from gymslurm.job.collector_process import run_collector
from gymslurm.job.heartbeat import Signals, log
from gymslurm.job.summary import write_summary_if_ended
from gymslurm.launcher.decide import Decision, JobEnd, Limits, decide, job_exit_code
from gymslurm.launcher.environment import withheld_in_job
from gymslurm.launcher.ledger import ChainState, DecisionRecord, Started, fold, record_decision, summarize
from gymslurm.launcher.links import allocated_gpus
from gymslurm.launcher.notify import LINK_GRACE_S, Notifier, run_done_event, safely
from gymslurm.launcher.run_site import run_backend
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.site.backend import Backend
from gymslurm.site.slurm import split_job_id
from gymslurm.store.flock import locked, try_lock
from gymslurm.store.paths import RunPaths


def maybe_submit_aggregation(
    run: RunDir,
    settings: BenchmarkSettings,
    backend: Backend,
    me: str | None,
    own: tuple[int, ChainState] | None = None,
) -> str | None:
    """Submit the aggregation job if every shard's chain finished and nobody did yet (under a lock).

    The job is queued with its lookahead (``slurm.lookahead`` jobs, each ``afterany`` the one
    before, each recorded), so a first one killed at any instant leaves the next. The first is
    ``afterany`` ``me`` (the link that saw the last chain finish) when both are on one cluster; in
    a run across clusters the aggregation is queued on its own cluster (run.json), and from a link
    on another cluster with no dependency at all: Slurm has none across clusters outside a
    federation, and none is needed, since ``me`` wrote its decision (after its outputs) before
    calling this. ``own``: the calling link's shard and its chain as the link holds it (decision
    included): a finished one is counted in the run's tally, and every other shard's ledger is read
    (under the lock) only when the tally counts every chain finished (:func:`every_chain_finished`).
    """
    if not settings.aggregation.enabled:
        count_finished(run, own)
        return None
    backend, after = aggregation_backend(run, backend, me)
    with locked(run.aggregate_lock):
        if own is not None and own[1].finished and not own[1].cancelled:
            run.tally.chain_finished(own[0])  # before asking: the count is never below the truth
        if not every_chain_finished(run, settings.shards, own, counted=own is not None):
            return None
        if summarize(run.aggregate_ledger.read()).epoch_jobs:
            return None
        jobs = queue_chain(
            run.aggregate_ledger,
            backend,
            run.script(None),
            after,
            settings.slurm.lookahead,
            by=me or "resubmit",
        )
    log(f"every shard's chain finished: aggregation job {jobs[0]} queued (then {' '.join(jobs[1:])})")
    return jobs[0]


def count_finished(run: RunDir, own: tuple[int, ChainState] | None) -> None:
    """A finished chain counted in the run's tally, under the aggregate lock (a recount holds it)."""
    if own is not None and own[1].finished and not own[1].cancelled:
        with locked(run.aggregate_lock):
            run.tally.chain_finished(own[0])


def every_chain_finished(
    run: RunDir, shards: int, own: tuple[int, ChainState] | None = None, *, counted: bool = True
) -> bool:
    """Every shard's chain finished, none cancelled: the run's tally first (one line read), then, only
    when it counts every shard, every ledger once (``own``: the caller's chain as it holds it).
    Called under the aggregate lock, which every count and recount of the tally holds: a chain whose
    decision a recount missed counts itself after it, never before it.

    ``counted`` False (``resubmit``, which reopens chains): every ledger at once. A read of every
    ledger that finds fewer finished chains than the tally says writes the true count (a ``recount``),
    so the links after it trust the tally again.
    """
    if counted and run.tally.read().finished < shards:
        return False
    array = run.read_array()
    states = [own[1] if own is not None and own[0] == s else run.chain_state(s, array) for s in range(shards)]
    finished = sum(1 for s in states if s.finished and not s.cancelled)
    if finished != run.tally.read().finished:
        run.tally.recount(finished)
    return finished == shards


def aggregation_backend(run: RunDir, caller: Backend, me: str | None) -> tuple[Backend, str | None]:
    """Where the aggregation is queued, and the job it may depend on: the caller's backend and ``me``
    for a run on one cluster; for a run across clusters the aggregation cluster's backend, and ``me``
    only when that job is on the same cluster."""
    info = run.read_info()
    if info.placement is None:
        return caller, me
    backend = run_backend(run, aggregation=True)
    same = me is not None and split_job_id(me)[0] == info.aggregate_cluster
    return backend, me if same else None


def aggregate_argv(
    settings: BenchmarkSettings, inputs: list[Path], output: Path, inputs_glob: str = ""
) -> list[str]:
    """The aggregation command: ``{inputs}`` becomes one argument per shard output, ``{inputs_glob}``
    one glob matching them all (no per-file argv at 1,000 shards), ``{output}`` the merged path."""
    argv: list[str] = []
    for part in settings.aggregation.command:
        if part == "{inputs}":
            argv += [str(path) for path in inputs]
        elif part == "{inputs_glob}":
            argv.append(inputs_glob)
        else:
            argv.append(part.replace("{output}", str(output)))
    return argv


def shard_outputs_glob(run: RunDir, stem: str) -> str:
    """A glob matching every shard's output of a run (and nothing else: not the merged output)."""
    return f"{glob.escape(str(run.root / 'output'))}/shard-*/{glob.escape(stem)}.jsonl"


def _reward_histogram(merged: Path) -> str:
    """Publish the merged rows' reward distribution per taskset for the report (best effort)."""
    from gymslurm.store.rewards import write_reward_histogram

    if not merged.exists():
        return ""
    try:
        tasksets = write_reward_histogram(RunPaths.for_output(merged))
    except (OSError, StoreError) as error:
        log(f"no reward histogram: {error}")
        return ""
    return f"; rewards of {sum(t.count for t in tasksets)} rows in {len(tasksets)} taskset(s)"


def run_aggregation(run: RunDir, settings: BenchmarkSettings, backend: Backend, me: tuple[str, int]) -> int:
    """The aggregation step: lock, account, lookahead, apply the FAILED-shard policy, merge, decide."""
    signals = Signals()
    signals.install()
    lock = try_lock(run.aggregate_link_lock)
    if lock is None:
        log(f"another aggregation job of run {run.name} is live; this job {me[0]} exits without a decision")
        return ExitCode.DONE
    try:
        return _run_aggregation_locked(run, settings, backend, me, signals)
    finally:
        os.close(lock)


def _run_aggregation_locked(
    run: RunDir, settings: BenchmarkSettings, backend: Backend, me: tuple[str, int], signals: Signals
) -> int:
    ledger = run.aggregate_ledger
    limits = Limits(settings.slurm.infra_retry_limit, None, None)

    def reread() -> ChainState:
        return summarize(ledger.read())

    state = reread()
    if (other := other_live_link(state, me, backend)) is not None:
        log(f"aggregation job {other} started and is still in the queue; this job {me[0]} exits")
        return ExitCode.DONE
    state = account_for_dead_runs(state, ledger, me, backend, output=None, limits=limits)
    if state.finished:
        cancelled = cancel_pending(state, me[0], backend)
        log(
            f"the aggregation is already decided ({_decided(state)}); nothing to do"
            f"{'; cancelled ' + ' '.join(cancelled) if cancelled else ''}"
        )
        return ExitCode.DONE
    started = Started(
        job_id=me[0], restart_count=me[1], host=socket.gethostname(), gpus=allocated_gpus(os.environ, 0)
    )
    ledger.append(started)
    fold(state, started)
    try:
        ensure_lookahead(
            ledger,
            me[0],
            backend,
            lambda after: backend.submit(run.script(None), [after]),
            state=state,
            reread=reread,
            depth=settings.slurm.lookahead,
        )
    except (SlurmError, OSError) as error:  # merge anyway; the decision below is what matters
        log(f"could not queue the next aggregation jobs now: {error}")
    t0 = time.monotonic()
    code, reason = _merge(run, settings, signals)
    slurm_state = f"SIGNALLED:{signals.names}" if signals.received else "RUNNING"
    end = JobEnd(slurm_state, code, time.monotonic() - t0, saved_outcomes=True)
    verdict = decide(end, state.budgets, limits)
    if verdict.decision in (Decision.DONE, Decision.STOP_FAILED):
        verdict = replace(verdict, reason=reason)
    else:
        verdict = replace(verdict, reason=f"{reason}; {verdict.reason}")
    record = record_decision(ledger, started, end, state.budgets, verdict)
    log(f"aggregation {verdict.decision}: {verdict.reason}")
    if not verdict.decision.continues:
        cancel_pending(reread(), me[0], backend)
        write_summary_if_ended(run, settings, backend, f"aggregation job {me[0]}")
        if settings.notify:
            _notify_end(run, settings, me, record)
    return job_exit_code(verdict.decision)


def _notify_end(
    run: RunDir, settings: BenchmarkSettings, me: tuple[str, int], record: DecisionRecord
) -> None:
    """``aggregation_done`` and ``run_done``, given a bounded moment to be delivered."""
    notifier = Notifier(run, settings.notify, settings.name)
    done = (
        "aggregation_done",
        f"aggregation_done:{me[0]}:{me[1]}",
        {"job": me[0], "decision": str(record.decision), "reason": record.reason},
    )
    safely(lambda: notifier.emit_all([done, run_done_event(run, settings.shards, record)]))
    notifier.deliver_soon()
    notifier.wait(LINK_GRACE_S)


def _merge(run: RunDir, settings: BenchmarkSettings, signals: Signals) -> tuple[int | None, str]:
    """The run's merge: a suite's benchmarks one by one (suite_aggregation.py), or :func:`merge_run`."""
    from gymslurm.job.suite_aggregation import merge_suite
    from gymslurm.launcher.rundir import is_suite

    return merge_suite(run, signals, merge_run) if is_suite(run) else merge_run(run, settings, signals)


def merge_run(run: RunDir, settings: BenchmarkSettings, signals: Signals) -> tuple[int | None, str]:
    """Apply ``on_failed_shard`` and run the aggregation command: its exit code and what happened."""
    array = run.read_array()
    states = [run.chain_state(s, array) for s in range(settings.shards)]
    incomplete = [
        s for s, st in enumerate(states) if not st.last_decision or st.last_decision.decision != Decision.DONE
    ]
    outputs = [run.shard_output(s, settings.output_stem) for s in range(settings.shards)]
    if incomplete and settings.aggregation.on_failed_shard == "fail":
        return ExitCode.STOP, f"shards {incomplete} did not complete and on_failed_shard=fail: nothing merged"
    existing = [path for path in outputs if path.exists()]
    merged = run.merged_output(settings.output_stem)
    merged.parent.mkdir(parents=True, exist_ok=True)
    pattern = shard_outputs_glob(run, settings.output_stem)
    # The aggregation holds no secret of its own: every variable a server's or the collector's env
    # names as a credential source stays with that process (exported by sbatch to this job too).
    withheld = withheld_in_job(settings)
    code, _ = run_collector(aggregate_argv(settings, existing, merged, pattern), signals, withheld=withheld)
    reason = f"aggregate exited {code}"
    if code == ExitCode.DONE:
        reason += _reward_histogram(merged)
    if incomplete:
        reason += f"; merged what exists: shards {incomplete} are incomplete (aggregate-what-exists)"
    return code, reason


def _decided(state: ChainState) -> str:
    return state.last_decision.decision if state.last_decision else "cancelled"
