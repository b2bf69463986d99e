"""The chain decision: one pure function from "how did this job end" to "what happens next".

Every link of a shard's chain ends exactly once in the ledger with a :class:`Verdict` computed here.
The rules are those of issue 5 §2 and spec 000 ("The Slurm auto-resume chain continues after 75
without spending an infrastructure retry and stops after 76"), applied in this order:

1. collector exit 0 → DONE (even when the walltime cap was reached in the same job);
2. collector exit 76 → STOP_FAILED (terminal failures or exhausted budgets; the job ends FAILED);
3. collector exit 2 → STOP_FAILED (the collector refused its configuration: a retry cannot help);
4. accumulated walltime (every run of every job, requeued runs included) ≥ ``max_walltime`` →
   STOP_WALLTIME;
5. collector exit 75 with evidence of progress → CONTINUE, no retry spent;
6. collector exit 75 without evidence of progress → treated as exit 1 (the loop guard);
7. no collector exit code because Slurm ended the job (TIMEOUT, PREEMPTED, NODE_FAIL, CANCELLED,
   requeue, a signal forwarded from Slurm, a job that vanished) → CONTINUE, no retry spent;
8. exit 1, any other exit code, or a collector killed by a signal Slurm did not send (OOM killer,
   segfault) → RETRY while infrastructure retries remain (one is spent), else STOP_EXHAUSTED.

Trade-off: rule 7 can loop for ever on a site that kills every job before the collector saves
anything; ``max_walltime`` is the cap for that case, as in the spec. Rule 8 treats an unexpected
crash as infrastructure (bounded by the retry limit) rather than as a terminal failure, because a
crash on one node usually says nothing about the evaluation.

Pure: no clock, files or Slurm here; the caller gathers :class:`JobEnd` and persists the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from gymslurm.exitcodes import ExitCode


class Decision(StrEnum):
    """What the chain does after one job."""

    DONE = "DONE"
    CONTINUE = "CONTINUE"
    RETRY = "RETRY"
    STOP_FAILED = "STOP_FAILED"
    STOP_EXHAUSTED = "STOP_EXHAUSTED"
    STOP_WALLTIME = "STOP_WALLTIME"

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
    written_at: str = ""

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


@dataclass(frozen=True)
class Limits:
    """The chain's caps, from the benchmark's slurm section."""

    infra_retry_limit: int = 3
    max_walltime_s: float | None = None


@dataclass(frozen=True)
class JobEnd:
    """How one run of one job ended, as far as anyone could tell.

    ``exit_code`` is the collector's own exit code, None when it never reported one (the job was
    killed, or it died and a successor is accounting for it). ``collector_signal`` is the signal
    that killed the collector when the chain step itself did not forward one from Slurm.
    """

    slurm_state: str
    exit_code: int | None
    elapsed_s: float
    progress_before: Progress | None = None
    progress_after: Progress | None = None
    collector_signal: int | None = None


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
    if before is not None and after.written_at and after.written_at == before.written_at:
        return False  # the collector never rewrote its coverage: nothing new is known
    if after.progress_outcomes_recorded > 0:
        return True
    return before is not None and after.outcomes > before.outcomes


def decide(end: JobEnd, budgets: Budgets, limits: Limits) -> Verdict:
    """Map one ended job to the chain's next step (rules in the module docstring, in order)."""
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
    cap = limits.max_walltime_s
    if cap is not None and spent.walltime_s >= cap:
        return Verdict(
            Decision.STOP_WALLTIME,
            f"accumulated walltime {spent.walltime_s:.0f}s reached max_walltime {cap:.0f}s",
            spent,
        )
    if code == ExitCode.CONTINUE and made_progress(end.progress_before, end.progress_after):
        return Verdict(Decision.CONTINUE, "collector exit 75: progress made, work remains", spent)
    if code is None and end.collector_signal is None:
        return Verdict(Decision.CONTINUE, f"job ended by Slurm ({end.slurm_state}); no retry spent", spent)
    return _retry_or_exhausted(end, spent, limits)


def _retry_or_exhausted(end: JobEnd, spent: Budgets, limits: Limits) -> Verdict:
    if end.exit_code == ExitCode.CONTINUE:
        why = "collector exit 75 but its coverage shows no new outcome (counted as exit 1)"
    elif end.exit_code is None:
        why = f"collector killed by signal {end.collector_signal} that Slurm did not send"
    elif end.exit_code == ExitCode.RETRY:
        why = "collector exit 1: retryable work remains but no progress was made"
    else:
        why = f"collector exit {end.exit_code}: unexpected, treated as an infrastructure failure"
    if spent.infra_retries_used >= limits.infra_retry_limit:
        reason = f"{why}; infrastructure retries exhausted ({limits.infra_retry_limit} used)"
        return Verdict(Decision.STOP_EXHAUSTED, reason, spent)
    spent = replace(spent, infra_retries_used=spent.infra_retries_used + 1)
    reason = f"{why}; retry {spent.infra_retries_used} of {limits.infra_retry_limit}"
    return Verdict(Decision.RETRY, reason, spent)


def job_exit_code(decision: Decision) -> int:
    """The exit code the chain step gives Slurm, so ``sacct`` tells the same story as the ledger.

    A chain that goes on exits 0 (the link did its job); STOP_FAILED exits 76 so Slurm marks it
    FAILED; STOP_EXHAUSTED exits 1; STOP_WALLTIME exits 75 (incomplete, resumable by resubmit).
    """
    return {
        Decision.DONE: ExitCode.DONE,
        Decision.CONTINUE: ExitCode.DONE,
        Decision.RETRY: ExitCode.DONE,
        Decision.STOP_FAILED: ExitCode.STOP,
        Decision.STOP_EXHAUSTED: ExitCode.RETRY,
        Decision.STOP_WALLTIME: ExitCode.CONTINUE,
    }[decision]
