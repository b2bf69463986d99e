"""The chain decision table: one row per rule of issue 5 §2 (see gymslurm/launcher/decide.py)."""

from __future__ import annotations

import pytest

from gymslurm.launcher.decide import (
    Budgets,
    Decision,
    JobEnd,
    Limits,
    Progress,
    decide,
    job_exit_code,
    made_progress,
)

BEFORE = Progress(successful=3, failed=1, written_at="t0")
GREW = Progress(successful=5, failed=1, written_at="t1")
SAME = Progress(successful=3, failed=1, written_at="t1")
FLAGGED = Progress(successful=3, failed=1, progress_outcomes_recorded=2, written_at="t1")
LIMITS = Limits(infra_retry_limit=2, max_walltime_s=3600)

# (name, end, budgets before, decision, retries used after)
ROWS = [
    ("exit 0 is done", JobEnd("RUNNING", 0, 60), Budgets(), Decision.DONE, 0),
    ("exit 0 is done even at the walltime cap", JobEnd("RUNNING", 0, 4000), Budgets(), Decision.DONE, 0),
    ("exit 75 with progress continues for free", JobEnd("RUNNING", 75, 60, BEFORE, GREW), Budgets(),
     Decision.CONTINUE, 0),
    ("exit 75 with progress_outcomes_recorded continues", JobEnd("RUNNING", 75, 60, BEFORE, FLAGGED),
     Budgets(), Decision.CONTINUE, 0),
    ("exit 75 without new outcomes spends a retry", JobEnd("RUNNING", 75, 60, BEFORE, SAME), Budgets(),
     Decision.RETRY, 1),
    ("exit 75 with stale coverage spends a retry", JobEnd("RUNNING", 75, 60, BEFORE, BEFORE), Budgets(),
     Decision.RETRY, 1),
    ("exit 75 with no coverage spends a retry", JobEnd("RUNNING", 75, 60), Budgets(), Decision.RETRY, 1),
    ("exit 1 retries while the budget lasts", JobEnd("RUNNING", 1, 60), Budgets(infra_retries_used=1),
     Decision.RETRY, 2),
    ("exit 1 stops when retries are used up", JobEnd("RUNNING", 1, 60), Budgets(infra_retries_used=2),
     Decision.STOP_EXHAUSTED, 2),
    ("exit 75 without progress stops when retries are used up", JobEnd("RUNNING", 75, 60, BEFORE, SAME),
     Budgets(infra_retries_used=2), Decision.STOP_EXHAUSTED, 2),
    ("exit 76 stops failed", JobEnd("RUNNING", 76, 60), Budgets(), Decision.STOP_FAILED, 0),
    ("exit 2 (configuration refused) stops failed", JobEnd("RUNNING", 2, 60), Budgets(),
     Decision.STOP_FAILED, 0),
    ("an unexpected exit code spends a retry", JobEnd("RUNNING", 139, 60), Budgets(), Decision.RETRY, 1),
    ("TIMEOUT without exit code continues for free", JobEnd("TIMEOUT", None, 60), Budgets(),
     Decision.CONTINUE, 0),
    ("PREEMPTED continues for free", JobEnd("PREEMPTED", None, 60), Budgets(infra_retries_used=2),
     Decision.CONTINUE, 2),
    ("NODE_FAIL continues for free", JobEnd("NODE_FAIL", None, 60), Budgets(), Decision.CONTINUE, 0),
    ("a killed job (CANCELLED) continues for free", JobEnd("CANCELLED", None, 60), Budgets(),
     Decision.CONTINUE, 0),
    ("a collector killed by a signal Slurm did not send spends a retry",
     JobEnd("RUNNING", None, 60, collector_signal=9), Budgets(), Decision.RETRY, 1),
    ("walltime cap reached stops with that reason", JobEnd("TIMEOUT", None, 600),
     Budgets(walltime_s=3000), Decision.STOP_WALLTIME, 0),
    ("walltime cap stops even after progress", JobEnd("RUNNING", 75, 600, BEFORE, GREW),
     Budgets(walltime_s=3000), Decision.STOP_WALLTIME, 0),
    ("exit 76 wins over the walltime cap", JobEnd("RUNNING", 76, 600), Budgets(walltime_s=3000),
     Decision.STOP_FAILED, 0),
]  # fmt: skip


@pytest.mark.parametrize(("name", "end", "budgets", "decision", "retries"), ROWS, ids=[r[0] for r in ROWS])
def test_decision_table(name: str, end: JobEnd, budgets: Budgets, decision: Decision, retries: int) -> None:
    """Each row of the decision table maps one ended job to its decision and retry budget."""
    verdict = decide(end, budgets, LIMITS)
    assert verdict.decision is decision, verdict.reason
    assert verdict.budgets_after.infra_retries_used == retries


def test_walltime_accumulates_across_jobs() -> None:
    """Every job's elapsed time (requeued runs included) adds to the chain's walltime."""
    verdict = decide(JobEnd("PREEMPTED", None, 90.5), Budgets(jobs=3, walltime_s=100.0), LIMITS)
    assert verdict.budgets_after.walltime_s == pytest.approx(190.5)
    assert verdict.budgets_after.jobs == 4


def test_no_walltime_cap_when_unset() -> None:
    """Without max_walltime the chain goes on whatever the accumulated walltime."""
    verdict = decide(JobEnd("TIMEOUT", None, 60), Budgets(walltime_s=1e9), Limits(max_walltime_s=None))
    assert verdict.decision is Decision.CONTINUE


def test_walltime_reason_names_the_cap() -> None:
    """A walltime stop says how much was used and what the cap is."""
    verdict = decide(JobEnd("TIMEOUT", None, 600), Budgets(walltime_s=3000), LIMITS)
    assert "3600s reached max_walltime 3600s" in verdict.reason


def test_exhausted_reason_says_retries_used() -> None:
    """An exhausted stop says why and how many retries were used."""
    verdict = decide(JobEnd("RUNNING", 1, 1), Budgets(infra_retries_used=2), LIMITS)
    assert "no progress" in verdict.reason and "2 used" in verdict.reason


def test_progress_needs_a_fresh_snapshot() -> None:
    """A coverage file the collector never rewrote is not evidence of progress."""
    assert not made_progress(FLAGGED, FLAGGED)
    assert made_progress(None, FLAGGED)
    assert not made_progress(None, SAME)


@pytest.mark.parametrize(
    ("decision", "code"),
    [(Decision.DONE, 0), (Decision.CONTINUE, 0), (Decision.RETRY, 0), (Decision.STOP_FAILED, 76),
     (Decision.STOP_EXHAUSTED, 1), (Decision.STOP_WALLTIME, 75)],
)  # fmt: skip
def test_job_exit_code(decision: Decision, code: int) -> None:
    """The chain step's own exit code makes Slurm mark a FAILED stop as FAILED and a going chain COMPLETED."""
    assert job_exit_code(decision) == code
