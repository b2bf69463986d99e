"""The chain decision table: one row per rule of issue 5 §2 (see gymslurm/launcher/decide.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gymslurm.launcher.decide import (
    Budgets,
    DeadRun,
    Decision,
    JobEnd,
    Limits,
    Progress,
    dead_run_end,
    decide,
    job_exit_code,
    made_progress,
    start_gate,
)

BEFORE = Progress(successful=3, failed=1, snapshot="t0")
GREW = Progress(successful=5, failed=1, snapshot="t1")
SAME = Progress(successful=3, failed=1, snapshot="t1")
FLAGGED = Progress(successful=3, failed=1, progress_outcomes_recorded=2, snapshot="t1")
LIMITS = Limits(infra_retry_limit=2, max_walltime_s=3600)

# (name, end, budgets before, decision, retries used after)
ROWS = [
    ("exit 0 is done", JobEnd("RUNNING", 0, 60), Budgets(), Decision.DONE, 0),
    ("exit 0 is done even at the walltime cap", JobEnd("RUNNING", 0, 4000), Budgets(), Decision.DONE, 0),
    (
        "exit 75 with progress continues for free",
        JobEnd("RUNNING", 75, 60, BEFORE, GREW),
        Budgets(),
        Decision.CONTINUE,
        0,
    ),
    (
        "exit 75 with progress_outcomes_recorded continues",
        JobEnd("RUNNING", 75, 60, BEFORE, FLAGGED),
        Budgets(),
        Decision.CONTINUE,
        0,
    ),
    (
        "exit 75 without new outcomes spends a retry",
        JobEnd("RUNNING", 75, 60, BEFORE, SAME),
        Budgets(),
        Decision.RETRY,
        1,
    ),
    (
        "exit 75 with stale coverage spends a retry",
        JobEnd("RUNNING", 75, 60, BEFORE, BEFORE),
        Budgets(),
        Decision.RETRY,
        1,
    ),
    ("exit 75 with no coverage spends a retry", JobEnd("RUNNING", 75, 60), Budgets(), Decision.RETRY, 1),
    (
        "exit 1 retries while the budget lasts",
        JobEnd("RUNNING", 1, 60),
        Budgets(infra_retries_used=1),
        Decision.RETRY,
        2,
    ),
    (
        "exit 1 stops when retries are used up",
        JobEnd("RUNNING", 1, 60),
        Budgets(infra_retries_used=2),
        Decision.STOP_EXHAUSTED,
        2,
    ),
    (
        "exit 75 without progress stops when retries are used up",
        JobEnd("RUNNING", 75, 60, BEFORE, SAME),
        Budgets(infra_retries_used=2),
        Decision.STOP_EXHAUSTED,
        2,
    ),
    ("exit 76 stops failed", JobEnd("RUNNING", 76, 60), Budgets(), Decision.STOP_FAILED, 0),
    (
        "exit 2 (configuration refused) stops failed",
        JobEnd("RUNNING", 2, 60),
        Budgets(),
        Decision.STOP_FAILED,
        0,
    ),
    ("an unexpected exit code spends a retry", JobEnd("RUNNING", 139, 60), Budgets(), Decision.RETRY, 1),
    (
        "TIMEOUT without exit code continues for free",
        JobEnd("TIMEOUT", None, 60),
        Budgets(),
        Decision.CONTINUE,
        0,
    ),
    (
        "PREEMPTED continues for free",
        JobEnd("PREEMPTED", None, 60),
        Budgets(infra_retries_used=2),
        Decision.CONTINUE,
        2,
    ),
    ("NODE_FAIL continues for free", JobEnd("NODE_FAIL", None, 60), Budgets(), Decision.CONTINUE, 0),
    (
        "a killed job (CANCELLED) continues for free",
        JobEnd("CANCELLED", None, 60),
        Budgets(),
        Decision.CONTINUE,
        0,
    ),
    (
        "a collector killed by a signal Slurm did not send spends a retry",
        JobEnd("RUNNING", None, 60, collector_signal=9),
        Budgets(),
        Decision.RETRY,
        1,
    ),
    (
        "walltime cap reached stops with that reason",
        JobEnd("TIMEOUT", None, 600),
        Budgets(walltime_s=3000),
        Decision.STOP_WALLTIME,
        0,
    ),
    (
        "walltime cap stops even after progress",
        JobEnd("RUNNING", 75, 600, BEFORE, GREW),
        Budgets(walltime_s=3000),
        Decision.STOP_WALLTIME,
        0,
    ),
    (
        "exit 76 wins over the walltime cap",
        JobEnd("RUNNING", 76, 600),
        Budgets(walltime_s=3000),
        Decision.STOP_FAILED,
        0,
    ),
]


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
    [
        (Decision.DONE, 0),
        (Decision.CONTINUE, 0),
        (Decision.RETRY, 0),
        (Decision.STOP_FAILED, 76),
        (Decision.STOP_EXHAUSTED, 1),
        (Decision.STOP_WALLTIME, 75),
        (Decision.STOP_NO_PROGRESS, 1),
    ],
)
def test_job_exit_code(decision: Decision, code: int) -> None:
    """The chain step's own exit code makes Slurm mark a FAILED stop as FAILED and a going chain COMPLETED."""
    assert job_exit_code(decision) == code


# How a successor accounts for a link that died without writing its decision (issue 12 §1):
# (name, facts, crashed, decision with fresh budgets)
DEAD = [
    ("TIMEOUT is Slurm's end", DeadRun("TIMEOUT", 600, 0, 15, 600), False, Decision.CONTINUE),
    ("PREEMPTED is Slurm's end", DeadRun("PREEMPTED", 20, 0, 15, 20), False, Decision.CONTINUE),
    ("NODE_FAIL is Slurm's end", DeadRun("NODE_FAIL", 5, 0, 0, 5), False, Decision.CONTINUE),
    ("a cancel of that job is Slurm's end", DeadRun("CANCELLED", 5, 0, 15, 5), False, Decision.CONTINUE),
    ("an earlier run of a requeued job is Slurm's end", DeadRun("REQUEUED", 5), False, Decision.CONTINUE),
    ("FAILED is a crash", DeadRun("FAILED", 3, 137, None, 2), True, Decision.RETRY),
    ("OUT_OF_MEMORY is a crash", DeadRun("OUT_OF_MEMORY", 600, 0, 9, 600, True), True, Decision.RETRY),
    ("a non-zero end with no decision is a crash", DeadRun("UNKNOWN", 600, 139), True, Decision.RETRY),
    ("COMPLETED with no decision is a crash", DeadRun("COMPLETED", 600, 0, None, 600), True, Decision.RETRY),
    (
        "an unknown end within a minute with nothing saved is a crash",
        DeadRun("VANISHED", 12),
        True,
        Decision.RETRY,
    ),
    (
        "an unknown end within a minute that saved outcomes is not a crash",
        DeadRun("VANISHED", 12, saved_outcomes=True),
        False,
        Decision.CONTINUE,
    ),
    ("an unknown end after a minute is not a crash", DeadRun("VANISHED", 300), False, Decision.CONTINUE),
    (
        "judged late, an unknown end whose last heartbeat was seconds after its start is a crash",
        DeadRun("VANISHED", 621, last_beat_s=17),
        True,
        Decision.RETRY,
    ),
]


@pytest.mark.parametrize(("name", "facts", "crashed", "decision"), DEAD, ids=[r[0] for r in DEAD])
def test_dead_link_accounting(name: str, facts: DeadRun, crashed: bool, decision: Decision) -> None:
    """Each row: Slurm ended the dead link (no retry spent) or it crashed (an infrastructure retry spent)."""
    end = dead_run_end(facts)
    assert (end.crash is not None) is crashed, end.crash
    verdict = decide(end, Budgets(), LIMITS)
    assert verdict.decision is decision, verdict.reason
    assert verdict.budgets_after.infra_retries_used == (1 if crashed else 0)


def test_crash_reason_names_slurm_state_and_exit_code() -> None:
    """A crashed link's reason quotes Slurm's state and exit code."""
    verdict = decide(dead_run_end(DeadRun("FAILED", 3, 137, None, 2)), Budgets(), LIMITS)
    assert "crashed" in verdict.reason and "FAILED, exit 137" in verdict.reason


@pytest.mark.parametrize(
    ("facts", "elapsed"),
    [
        (DeadRun("FAILED", 40.0, 137, None, 2), 2.0),
        (DeadRun("VANISHED", 40.0), 40.0),
        (DeadRun("FAILED", 40.0, 137, None, 0), 40.0),
        (DeadRun("VANISHED", 621.0, last_beat_s=17.0), 17.0),
        (DeadRun("REQUEUED", 900.0, last_beat_s=315.0), 315.0),
        (DeadRun("UNKNOWN", 30.0, last_beat_s=45.0), 30.0),
        (DeadRun("FAILED", 621.0, 137, None, 2, last_beat_s=17.0), 2.0),
    ],
    ids=[
        "Slurm's elapsed when known",
        "start record to now without it",
        "Slurm's 0 is not believed",
        "judged late: its last heartbeat bounds it",
        "a requeued run: not the wait before the restart",
        "the heartbeat bound never lengthens it",
        "Slurm's elapsed before the heartbeat",
    ],
)
def test_dead_link_walltime_is_its_real_elapsed_time(facts: DeadRun, elapsed: float) -> None:
    """A dead link adds its real elapsed time to the chain's walltime, never 0."""
    verdict = decide(dead_run_end(facts), Budgets(walltime_s=100.0), LIMITS)
    assert verdict.budgets_after.walltime_s == pytest.approx(100.0 + elapsed)


def test_walltime_cap_stops_a_fast_crash_loop() -> None:
    """Crashing links that each live seconds still reach max_walltime (their elapsed is real)."""
    budgets = Budgets()
    limits = Limits(infra_retry_limit=100, max_walltime_s=30, max_links_without_progress=None)
    decisions = []
    for _ in range(10):
        verdict = decide(dead_run_end(DeadRun("FAILED", 5.0, 137)), budgets, limits)
        decisions.append(verdict.decision)
        budgets = verdict.budgets_after
        if not verdict.decision.continues:
            break
    assert decisions == [Decision.RETRY] * 5 + [Decision.STOP_WALLTIME]


NO_PROGRESS = JobEnd("CANCELLED", None, 30)


def test_consecutive_links_without_progress_stop_the_chain() -> None:
    """N links in a row that saved nothing stop the chain (STOP_NO_PROGRESS), even when Slurm ended each."""
    budgets, limits = Budgets(), Limits(max_links_without_progress=3)
    decisions = []
    for _ in range(3):
        verdict = decide(NO_PROGRESS, budgets, limits)
        decisions.append(verdict.decision)
        budgets = verdict.budgets_after
    assert decisions == [Decision.CONTINUE, Decision.CONTINUE, Decision.STOP_NO_PROGRESS]
    assert "3 consecutive links saved no new outcome" in verdict.reason
    assert budgets.infra_retries_used == 0


@pytest.mark.parametrize(
    "end",
    [JobEnd("RUNNING", 75, 60, BEFORE, GREW), JobEnd("CANCELLED", None, 30, saved_outcomes=True)],
    ids=["fresh coverage with new outcomes", "outcome files grew"],
)
def test_a_link_with_progress_resets_the_no_progress_count(end: JobEnd) -> None:
    """A link that saved new outcomes restarts the count of links without progress."""
    verdict = decide(end, Budgets(links_without_progress=4), Limits(max_links_without_progress=5))
    assert verdict.decision is Decision.CONTINUE
    assert verdict.budgets_after.links_without_progress == 0


def test_no_progress_stop_off_when_unset() -> None:
    """max_links_without_progress=None never stops a chain for lack of progress."""
    unset = Limits(max_links_without_progress=None)
    verdict = decide(NO_PROGRESS, Budgets(links_without_progress=1000), unset)
    assert verdict.decision is Decision.CONTINUE


LIFE_CASES = [
    ("no collector yet: nothing to judge", dict(pid=None, since_start_s=900), None),
    (
        "no record of this collector, young: not yet",
        dict(pid=7, since_start_s=10, record_pid=3, record_age_s=1),
        None,
    ),
    (
        "no record of this collector for the window: frozen before dispatch",
        dict(pid=7, since_start_s=60),
        "wrote no progress record",
    ),
    (
        "a fresh record, requests answered: alive",
        dict(pid=7, since_start_s=60, record_pid=7, record_age_s=2, in_flight=3, quiet_s=5),
        None,
    ),
    (
        "a record not rewritten for the window: frozen (SIGSTOP, deadlock)",
        dict(pid=7, since_start_s=90, record_pid=7, record_age_s=31, in_flight=3, quiet_s=40),
        "frozen",
    ),
    (
        "a record that says dispatch ended: the end phase writes none",
        dict(pid=7, since_start_s=90, record_pid=7, record_age_s=80, ended=True),
        None,
    ),
    (
        "requests in flight and no outcome for the window: servers stopped answering",
        dict(pid=7, since_start_s=90, record_pid=7, record_age_s=1, in_flight=2, quiet_s=31),
        "stopped answering",
    ),
    (
        "nothing in flight and no outcome: idle, not hung",
        dict(pid=7, since_start_s=90, record_pid=7, record_age_s=1, in_flight=0, quiet_s=80),
        None,
    ),
]


@pytest.mark.parametrize(("life", "why"), [c[1:] for c in LIFE_CASES], ids=[c[0] for c in LIFE_CASES])
def test_collector_unresponsive(life: dict[str, Any], why: str | None) -> None:
    """Liveness from progress: each row of the rule, window 30 s."""
    from gymslurm.launcher.decide import CollectorLife, collector_unresponsive

    got = collector_unresponsive(CollectorLife(**life), 30.0, fresh_s=30.0)
    assert (got is None) if why is None else (got is not None and why in got), got


def test_no_window_never_judges() -> None:
    """stall_window_s: null turns the watch off."""
    from gymslurm.launcher.decide import CollectorLife, collector_unresponsive

    assert collector_unresponsive(CollectorLife(7, 9999.0), None, fresh_s=30.0) is None


@pytest.mark.parametrize(
    ("code", "decision"), [(1, "CONTINUE"), (None, "CONTINUE"), (0, "DONE"), (76, "STOP_FAILED")]
)
def test_a_collector_that_ended_on_a_full_disk_spends_nothing(code: int | None, decision: str) -> None:
    """Disk full at the end: CONTINUE, no retry, no link counted without progress (0/76 keep their rows)."""
    from gymslurm.launcher.decide import Budgets, JobEnd, Limits, decide

    end = JobEnd("RUNNING", code, 5.0, disk_full="/runs/x (0 bytes free)")
    verdict = decide(end, Budgets(links_without_progress=4), Limits(max_links_without_progress=5))
    assert verdict.decision == decision
    if decision == "CONTINUE":
        assert "disk full at /runs/x" in verdict.reason
        after = verdict.budgets_after
        assert (after.infra_retries_used, after.links_without_progress) == (0, 4)


BUDGET = Limits(infra_retry_limit=2, max_walltime_s=3600, gpu_hours=10.0)
# (name, end, GPU-hours the run spent with this link, decision)
BUDGET_ROWS = [
    (
        "a link ending past the GPU budget stops the chain with STOP_BUDGET",
        JobEnd("RUNNING", 75, 60, BEFORE, GREW),
        10.5,
        Decision.STOP_BUDGET,
    ),
    ("exactly at the budget is past it", JobEnd("TIMEOUT", None, 60), 10.0, Decision.STOP_BUDGET),
    ("below the budget the chain goes on", JobEnd("RUNNING", 75, 60, BEFORE, GREW), 9.9, Decision.CONTINUE),
    ("a finished shard is DONE whatever it spent", JobEnd("RUNNING", 0, 60), 50.0, Decision.DONE),
    ("exit 76 is STOP_FAILED whatever it spent", JobEnd("RUNNING", 76, 60), 50.0, Decision.STOP_FAILED),
]


@pytest.mark.parametrize(("name", "end", "spent", "decision"), BUDGET_ROWS, ids=[r[0] for r in BUDGET_ROWS])
def test_budget_rule(name: str, end: JobEnd, spent: float, decision: Decision) -> None:
    """Rule 3b: the run's GPU-hours with this link included reaching budget.gpu_hours stop the chain."""
    verdict = decide(end, Budgets(), BUDGET, gpu_hours_spent=spent)
    assert verdict.decision is decision, verdict.reason


def test_a_budget_stop_after_saved_outcomes_says_so() -> None:
    """A link that saved outcomes (exit 75) and then reached the budget: its reason says it made
    progress, never "no new outcome" (issue 32: a BUDGET stop of a link that saved 136 said so)."""
    verdict = decide(JobEnd("RUNNING", 75, 60, BEFORE, GREW), Budgets(), BUDGET, gpu_hours_spent=10.5)
    assert verdict.decision is Decision.STOP_BUDGET
    assert "progress made" in verdict.reason and "no new outcome" not in verdict.reason


def test_no_budget_never_stops_for_gpu_hours() -> None:
    """Without budget.gpu_hours any spend goes on."""
    verdict = decide(JobEnd("TIMEOUT", None, 60), Budgets(), LIMITS, gpu_hours_spent=1e9)
    assert verdict.decision is Decision.CONTINUE


@pytest.mark.parametrize(("spent", "stops"), [(9.99, False), (10.0, True), (12.0, True)])
def test_start_gate_refuses_a_link_once_the_budget_is_spent(spent: float, stops: bool) -> None:
    """Rule 0: a link does not start once the run's GPU-hours reached the budget; its reason names both."""
    gate = start_gate(spent, Budgets(jobs=3), BUDGET)
    assert (gate is not None) is stops
    if gate is not None:
        assert gate.decision is Decision.STOP_BUDGET and "budget.gpu_hours 10" in gate.reason
        assert "--gpu-hours" in gate.reason and gate.budgets_after == Budgets(jobs=3)
        assert job_exit_code(gate.decision) == 75  # resumable, like STOP_WALLTIME
