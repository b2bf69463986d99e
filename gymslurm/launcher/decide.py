"""The chain decision: one pure function from "how did this job end" to "what happens next".

Every link of a shard's chain ends exactly once in the ledger with a :class:`Verdict` computed here.
The rules are those of issue 5 §2 and spec 000 ("The Slurm auto-resume chain continues after 75
without spending an infrastructure retry and stops after 76"), applied in this order:

0. before a link starts (:func:`start_gate`): the run's GPU-hours so far (every link of every
   shard, running ones until now) reached ``budget.gpu_hours`` → STOP_BUDGET, and the link
   starts nothing;
1. collector exit 0 → DONE (even when the walltime cap was reached in the same job);
2. collector exit 76 → STOP_FAILED (terminal failures or exhausted budgets; the job ends FAILED);
3. collector exit 2 → STOP_FAILED (the collector refused its configuration: a retry cannot help);
3a. the run was paused (``gymslurm pause``) → PAUSED: no retry spent and no link counted without
   progress (the pause ended it, not a fault); nothing starts until ``gymslurm resume``;
3b. the run's GPU-hours, this link included, reached ``budget.gpu_hours`` → STOP_BUDGET (no next
   link: ``gymslurm resubmit --gpu-hours +H`` raises the budget and goes on);
4. accumulated walltime (every run of every job, requeued runs included) ≥ ``max_walltime`` →
   STOP_WALLTIME;
5. the run's filesystem was full when the collector ended (any end but 0, 76, 2) → CONTINUE, no
   retry spent and no link counted without progress: the next link waits for space (job/disk.py);
   then ``max_links_without_progress`` consecutive links (this one included) saved no new outcome,
   whatever ended them → STOP_NO_PROGRESS (the loop guard that needs no walltime cap);
6. collector exit 75 with evidence of progress → CONTINUE, no retry spent;
7. collector exit 75 without evidence of progress → treated as exit 1 (the loop guard);
8. no collector exit code because Slurm ended the job (TIMEOUT, PREEMPTED, NODE_FAIL, CANCELLED,
   requeue, a signal forwarded from Slurm) → CONTINUE, no retry spent;
9. exit 1, any other exit code, a collector killed by a signal Slurm did not send (OOM killer,
   segfault), or a link that crashed (:func:`dead_run_end`) → RETRY while infrastructure retries
   remain (one is spent), else STOP_EXHAUSTED.

A link that died without writing its own decision is accounted for by its successor, which
gathers :class:`DeadRun` facts and turns them into a :class:`JobEnd` with :func:`dead_run_end`:
Slurm ended it (TIMEOUT, PREEMPTED, NODE_FAIL, BOOT_FAIL, DEADLINE, CANCELLED, REQUEUED) or it
crashed (FAILED, OUT_OF_MEMORY, any other end with an exit code and no decision, or an unknown end
less than :data:`CRASH_WINDOW_S` after its start with no new outcome). Its walltime is its real
elapsed time: Slurm's when known, else from its start record to the successor's accounting.

Trade-off: rule 8 would loop for ever on a site that kills every job before the collector saves
anything; rule 5 stops that loop after N links, ``max_walltime`` caps it in time. Rule 9 treats a
crash as infrastructure (bounded by the retry limit) rather than as a terminal failure, because a
crash on one node usually says nothing about the evaluation.

Pure: no clock, files or Slurm here; the caller gathers :class:`JobEnd` and persists the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from gymslurm.exitcodes import ExitCode

if TYPE_CHECKING:
    from gymslurm.store.live import LiveProgress


class Decision(StrEnum):
    """What the chain does after one job."""

    DONE = "DONE"
    CONTINUE = "CONTINUE"
    RETRY = "RETRY"
    STOP_FAILED = "STOP_FAILED"
    STOP_EXHAUSTED = "STOP_EXHAUSTED"
    STOP_WALLTIME = "STOP_WALLTIME"
    STOP_NO_PROGRESS = "STOP_NO_PROGRESS"
    STOP_BUDGET = "STOP_BUDGET"
    PAUSED = "PAUSED"

    @property
    def continues(self) -> bool:
        """True when another link runs after this one."""
        return self in (Decision.CONTINUE, Decision.RETRY)


@dataclass(frozen=True)
class Progress:
    """The counts of one ``<stem>_coverage.json`` snapshot that establish progress."""

    successful: int = 0
    failed: int = 0
    intentionally_omitted: int = 0
    progress_outcomes_recorded: int = 0
    snapshot: str = ""  # which coverage file this is: its identity, new with every publish

    @property
    def outcomes(self) -> int:
        """Every saved outcome the inventory selects."""
        return self.successful + self.failed + self.intentionally_omitted


@dataclass(frozen=True)
class Budgets:
    """What a chain has spent so far."""

    jobs: int = 0
    walltime_s: float = 0.0
    infra_retries_used: int = 0
    links_without_progress: int = 0


@dataclass(frozen=True)
class Limits:
    """The chain's caps, from the benchmark's slurm section (None: no cap)."""

    infra_retry_limit: int = 3
    max_walltime_s: float | None = None
    max_links_without_progress: int | None = 5
    gpu_hours: float | None = None  # budget.gpu_hours plus every resubmit --gpu-hours raise (None: no cap)


@dataclass(frozen=True)
class JobEnd:
    """How one run of one job ended, as far as anyone could tell.

    ``exit_code`` is the collector's own exit code, None when it never reported one (the job was
    killed, or it died and a successor is accounting for it). ``collector_signal`` is the signal
    that killed the collector when the chain step itself did not forward one from Slurm.
    ``crash`` says why a link that died without a decision is judged to have crashed (None: Slurm
    ended it). ``saved_outcomes`` is whether the collector's outcome files grew during the run
    (None: not known).
    """

    slurm_state: str
    exit_code: int | None
    elapsed_s: float
    progress_before: Progress | None = None
    progress_after: Progress | None = None
    collector_signal: int | None = None
    crash: str | None = None
    saved_outcomes: bool | None = None
    disk_full: str | None = None  # "PATH (N bytes free)": the run's filesystem was full at the end

    @property
    def progressed(self) -> bool:
        """Whether this run saved any new outcome (fresh coverage, or grown outcome files)."""
        return bool(self.saved_outcomes) or made_progress(self.progress_before, self.progress_after)


# Ends that Slurm (or a person through Slurm) caused: the chain goes on without spending a retry.
SLURM_ENDED = frozenset(
    {
        "TIMEOUT",
        "PREEMPTED",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "CANCELLED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "SPECIAL_EXIT",
        "RESV_DEL_HOLD",
    }
)
# Ends that say the job itself failed.
CRASHED = frozenset({"FAILED", "OUT_OF_MEMORY"})
# An end nobody can explain, this soon after the start and with nothing saved, is a crash.
CRASH_WINDOW_S = 60.0


@dataclass(frozen=True)
class DeadRun:
    """What a successor knows of a run that ended without writing its decision.

    ``slurm_state`` is Slurm's final state of the job (accounting, ``scontrol show job`` or
    ``squeue``), ``REQUEUED`` for an earlier run of the accounting job itself, ``UNKNOWN`` when
    the scheduler could not be asked and ``VANISHED`` when it forgot the job (after MinJobAge
    without accounting). ``since_start_s`` runs from the run's start record to now.
    """

    slurm_state: str
    since_start_s: float
    slurm_exit_code: int | None = None
    slurm_signal: int | None = None
    slurm_elapsed_s: float | None = None
    saved_outcomes: bool | None = None
    last_beat_s: float | None = None  # from its start to its last heartbeat plus one interval


def dead_run_end(run: DeadRun) -> JobEnd:
    """How a run that never wrote its decision ended: Slurm ended it, or it crashed (and why)."""
    elapsed = run.slurm_elapsed_s if run.slurm_elapsed_s else run.since_start_s
    if not run.slurm_elapsed_s and run.last_beat_s is not None:
        # Judged late (a requeue restarts minutes on, a successor waits its turn), "since its start"
        # counts the wait too: a link beats every interval while it lives, so it died within one
        # interval of its last beat (a 2 s crash read 621 s of walltime and GPU-hours without this).
        elapsed = min(elapsed, max(run.last_beat_s, 0.0))
    state, code = run.slurm_state, run.slurm_exit_code
    shown = f"{state}, exit {code}" if code is not None else state
    if run.slurm_signal:
        shown += f", signal {run.slurm_signal}"
    crash: str | None = None
    if state in CRASHED:
        crash = f"Slurm says {shown} and the link wrote no decision"
    elif state in SLURM_ENDED:
        crash = None
    elif code is not None and (code != 0 or state == "COMPLETED"):
        crash = f"the job ended ({shown}) without writing its decision"
    elif elapsed < CRASH_WINDOW_S and not run.saved_outcomes:
        crash = f"the job ended ({shown}) {elapsed:.0f}s after its start with no new outcome"
    return JobEnd(
        slurm_state=state,
        exit_code=None,
        elapsed_s=max(elapsed, 0.0),
        crash=crash,
        saved_outcomes=run.saved_outcomes,
    )


@dataclass(frozen=True)
class Verdict:
    """The decision, why, and the budgets once this job is counted."""

    decision: Decision
    reason: str
    budgets_after: Budgets


def made_progress(before: Progress | None, after: Progress | None) -> bool:
    """Whether a fresh coverage snapshot shows outcomes this invocation saved."""
    if after is None:
        return False
    if before is not None and after.snapshot and after.snapshot == before.snapshot:
        return False  # the collector never rewrote its coverage: nothing new is known
    if after.progress_outcomes_recorded > 0:
        return True
    return before is not None and after.outcomes > before.outcomes


def _budget_reason(spent_gpu_h: float, cap: float) -> str:
    return (
        f"the run spent {spent_gpu_h:.2f} GPU-hours of budget.gpu_hours {cap:g}: no further link starts; "
        "'gymslurm resubmit RUN BENCHMARK --gpu-hours +H' raises the budget and goes on"
    )


def start_gate(gpu_hours_spent: float, budgets: Budgets, limits: Limits) -> Verdict | None:
    """Rule 0: STOP_BUDGET when the run's GPU-hours already reached the budget, else None (start)."""
    cap = limits.gpu_hours
    if cap is None or gpu_hours_spent < cap:
        return None
    return Verdict(Decision.STOP_BUDGET, _budget_reason(gpu_hours_spent, cap), budgets)


def decide(
    end: JobEnd, budgets: Budgets, limits: Limits, gpu_hours_spent: float = 0.0, paused: bool = False
) -> Verdict:
    """Map one ended job to the chain's next step (rules in the module docstring, in order).

    ``gpu_hours_spent``: the run's GPU-hours with this link included (rule 3b); ``paused``: the
    chain's ledger holds a pause (rule 3a).
    """
    spent = replace(budgets, jobs=budgets.jobs + 1, walltime_s=budgets.walltime_s + max(end.elapsed_s, 0.0))
    code = end.exit_code
    if code == ExitCode.DONE:
        return Verdict(Decision.DONE, "collector exit 0: every rollout has an outcome", spent)
    if code == ExitCode.STOP:
        return Verdict(
            Decision.STOP_FAILED, "collector exit 76: terminal failures or exhausted budgets", spent
        )
    if code == ExitCode.REFUSED:
        return Verdict(
            Decision.STOP_FAILED, "collector exit 2: it refused its configuration; fix it and resubmit", spent
        )
    if paused:
        saved = "saved new outcomes" if end.progressed else "saved nothing new"
        reason = (
            f"the run was paused (gymslurm pause): the link ended ({end.slurm_state}, collector exit "
            f"{end.exit_code}) and {saved}; no retry spent, 'gymslurm resume' goes on from here"
        )
        return Verdict(Decision.PAUSED, reason, spent)
    if limits.gpu_hours is not None and gpu_hours_spent >= limits.gpu_hours:
        reason = f"{_why(end)}; {_budget_reason(gpu_hours_spent, limits.gpu_hours)}"
        return Verdict(Decision.STOP_BUDGET, reason, spent)
    cap = limits.max_walltime_s
    if cap is not None and spent.walltime_s >= cap:
        return Verdict(
            Decision.STOP_WALLTIME,
            f"accumulated walltime {spent.walltime_s:.0f}s reached max_walltime {cap:.0f}s",
            spent,
        )
    if end.disk_full is not None and code not in (ExitCode.DONE, ExitCode.STOP, ExitCode.REFUSED):
        return Verdict(
            Decision.CONTINUE,
            f"disk full at {end.disk_full}: nothing more could be saved; no retry spent, the next link "
            "waits for space and goes on by itself once it is freed",
            spent,
        )
    idle = 0 if end.progressed else budgets.links_without_progress + 1
    spent = replace(spent, links_without_progress=idle)
    stall = limits.max_links_without_progress
    if stall is not None and idle >= stall:
        return Verdict(
            Decision.STOP_NO_PROGRESS,
            f"{_why(end)}; {idle} consecutive links saved no new outcome "
            f"(max_links_without_progress={stall})",
            spent,
        )
    if code == ExitCode.CONTINUE and end.progressed:
        return Verdict(Decision.CONTINUE, "collector exit 75: progress made, work remains", spent)
    if code is None and end.collector_signal is None and end.crash is None:
        return Verdict(Decision.CONTINUE, f"{_why(end)}; no retry spent", spent)
    return _retry_or_exhausted(end, spent, limits)


def _why(end: JobEnd) -> str:
    """Why the run ended, in words (shared by every reason)."""
    if end.exit_code == ExitCode.CONTINUE and end.progressed:  # a budget stop after saved outcomes
        return "collector exit 75: progress made, work remains"
    if end.exit_code == ExitCode.CONTINUE:
        return "collector exit 75 but its coverage shows no new outcome (counted as exit 1)"
    if end.crash is not None:
        return f"the link crashed: {end.crash}"
    if end.exit_code is None and end.collector_signal is not None:
        return f"collector killed by signal {end.collector_signal} that Slurm did not send"
    if end.exit_code is None:
        return f"job ended by Slurm ({end.slurm_state})"
    if end.exit_code == ExitCode.RETRY:
        return "collector exit 1: retryable work remains but no progress was made"
    return f"collector exit {end.exit_code}: unexpected, treated as an infrastructure failure"


def _retry_or_exhausted(end: JobEnd, spent: Budgets, limits: Limits) -> Verdict:
    why = _why(end)
    if spent.infra_retries_used >= limits.infra_retry_limit:
        reason = f"{why}; infrastructure retries exhausted ({limits.infra_retry_limit} used)"
        return Verdict(Decision.STOP_EXHAUSTED, reason, spent)
    spent = replace(spent, infra_retries_used=spent.infra_retries_used + 1)
    reason = f"{why}; retry {spent.infra_retries_used} of {limits.infra_retry_limit}"
    return Verdict(Decision.RETRY, reason, spent)


def job_exit_code(decision: Decision) -> int:
    """The exit code the chain step gives Slurm, so ``sacct`` tells the same story as the ledger.

    A chain that goes on exits 0 (the link did its job); STOP_FAILED exits 76 so Slurm marks it
    FAILED; STOP_EXHAUSTED and STOP_NO_PROGRESS exit 1; STOP_WALLTIME, STOP_BUDGET and PAUSED exit
    75 (incomplete, resumable by resubmit or resume).
    """
    return {
        Decision.DONE: ExitCode.DONE,
        Decision.CONTINUE: ExitCode.DONE,
        Decision.RETRY: ExitCode.DONE,
        Decision.STOP_FAILED: ExitCode.STOP,
        Decision.STOP_EXHAUSTED: ExitCode.RETRY,
        Decision.STOP_WALLTIME: ExitCode.CONTINUE,
        Decision.STOP_NO_PROGRESS: ExitCode.RETRY,
        Decision.STOP_BUDGET: ExitCode.CONTINUE,
        Decision.PAUSED: ExitCode.CONTINUE,
    }[decision]


@dataclass(frozen=True)
class CollectorLife:
    """What a link (or ``status``) sees of its running collector at one instant.

    ``record_pid`` and ``record_age_s`` are of the collector's live progress record
    (``<stem>_progress.json``, rewritten by the collector every ``live_progress_interval_s``
    while it dispatches); ``quiet_s`` is how long it had saved no outcome when it wrote the record
    (``last_outcome_age_s``: a frozen collector's stays small, its record ages); ``ended``: the
    record says dispatch is over (the end phase writes none).
    """

    pid: int | None
    since_start_s: float
    record_pid: int | None = None
    record_age_s: float | None = None
    in_flight: int = 0
    quiet_s: float | None = None
    ended: bool = False


def collector_unresponsive(
    life: CollectorLife, window_s: float | None, fresh_s: float, quiet_limit_s: float | None = None
) -> str | None:
    """Why a live collector does nothing, or None: liveness from its progress, not its process (pure).

    First matching row wins: no collector, or no window → None; no record of this process for
    ``window_s`` since it started → frozen before dispatch; its record says dispatch ended →
    None; its record older than ``fresh_s`` → frozen (SIGSTOP, a deadlock: its own writer
    stopped); requests in flight and no outcome for ``quiet_limit_s`` (default ``window_s``) →
    its servers stopped answering. The link ends the collector on a reason (both limits the
    window: exit 1, the next link goes on); ``status`` says UNRESPONSIVE with it sooner (a record
    stale after two heartbeats, quiet for half the window), so it is seen before the link acts.
    """
    if life.pid is None or window_s is None:
        return None
    if life.record_pid != life.pid or life.record_age_s is None:
        if life.since_start_s >= window_s:
            return (
                f"collector pid {life.pid} wrote no progress record in {life.since_start_s:.0f}s since it "
                f"started (stall_window_s={window_s:g})"
            )
        return None
    if life.ended:
        return None
    if life.record_age_s >= fresh_s:
        return (
            f"collector pid {life.pid} last rewrote its progress record {life.record_age_s:.0f}s ago: it is "
            f"frozen (stall_window_s={window_s:g})"
        )
    quiet_limit = window_s if quiet_limit_s is None else quiet_limit_s
    if life.in_flight > 0 and life.quiet_s is not None and life.quiet_s >= quiet_limit:
        return (
            f"collector pid {life.pid} has {life.in_flight} request(s) in flight and saved no outcome for "
            f"{life.quiet_s:.0f}s: its servers stopped answering (stall_window_s={window_s:g})"
        )
    return None


def life_of(record: LiveProgress | None, pid: int | None, since_start_s: float, now: float) -> CollectorLife:
    """What the live progress record says of the collector ``pid`` at wall-clock ``now`` (pure)."""
    if record is None:
        return CollectorLife(pid, since_start_s)
    age = max(now - record.epoch, 0.0)  # quiet as the collector saw it: a frozen one is not "quiet"
    return CollectorLife(
        pid, since_start_s, record.pid, age, record.in_flight, record.last_outcome_age_s, record.ended
    )
