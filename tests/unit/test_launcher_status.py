"""Status verdicts (pure): one row per verdict of docs/launcher.md."""

from __future__ import annotations

import pytest

from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.ledger import BudgetsRecord, Cancelled, DecisionRecord, Submitted, summarize
from gymslurm.launcher.slurm import QueueRow
from gymslurm.launcher.status import verdict


def _row(job: str, state: str, reason: str = "None") -> QueueRow:
    return QueueRow(job, "gs", state, reason, "(null)", "0:00", "1:00", "N/A")


def _decided(job: str, decision: Decision) -> DecisionRecord:
    return DecisionRecord(
        job_id=job, end="t", elapsed_s=1, slurm_state="RUNNING", exit_code=0, decision=decision, reason="why",
        budgets_before=BudgetsRecord(), budgets_after=BudgetsRecord.of(Budgets(1, 1, 0)),
    )  # fmt: skip


GOING = [Submitted(job_id="1"), _decided("1", Decision.CONTINUE), Submitted(job_id="2", after="1")]
ROWS = [
    ("a running link is HEALTHY", GOING, [_row("2", "RUNNING")], "HEALTHY"),
    ("a pending link is WAITING", GOING, [_row("2", "PENDING", "Dependency")], "WAITING"),
    ("no live job and not finished is STALLED", GOING, [], "STALLED"),
    ("a cancelled chain is STALLED", [*GOING, Cancelled(job_ids=["2"])], [], "STALLED"),
    ("two running links are ORPHANED", [*GOING, Submitted(job_id="3")],
     [_row("2", "RUNNING"), _row("3", "RUNNING")], "ORPHANED"),
    ("a never-satisfiable dependency is ORPHANED", GOING, [_row("2", "PENDING", "DependencyNeverSatisfied")],
     "ORPHANED"),
    ("a link left after DONE is ORPHANED",
     [*GOING, _decided("2", Decision.DONE), Submitted(job_id="3", after="2")],
     [_row("3", "PENDING", "Dependency")], "ORPHANED"),
    ("the deciding job still exiting is not an orphan", [*GOING, _decided("2", Decision.DONE)],
     [_row("2", "COMPLETING")], "DONE"),
    ("DONE", [*GOING, _decided("2", Decision.DONE)], [], "DONE"),
    ("STOP_FAILED is FAILED", [*GOING, _decided("2", Decision.STOP_FAILED)], [], "FAILED"),
    ("STOP_EXHAUSTED is EXHAUSTED", [*GOING, _decided("2", Decision.STOP_EXHAUSTED)], [], "EXHAUSTED"),
    ("STOP_WALLTIME is EXHAUSTED", [*GOING, _decided("2", Decision.STOP_WALLTIME)], [], "EXHAUSTED"),
    ("STOP_NO_PROGRESS is EXHAUSTED", [*GOING, _decided("2", Decision.STOP_NO_PROGRESS)], [], "EXHAUSTED"),
    ("a held link is WAITING", GOING, [_row("2", "SPECIAL_EXIT", "JobHeldUser")], "WAITING"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "records", "live", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_verdict(name: str, records: list[object], live: list[QueueRow], expected: str) -> None:
    """Each ledger state plus live jobs maps to its verdict."""
    assert verdict(summarize(records), live)[0] == expected  # type: ignore[arg-type]


def test_a_held_link_says_it_will_not_run_by_itself() -> None:
    """A SPECIAL_EXIT (held) link is reported as held, with how to release or cancel it."""
    word, why = verdict(summarize(GOING), [_row("2", "SPECIAL_EXIT", "JobHeldUser")])
    assert word == "WAITING" and "job 2 is held (SPECIAL_EXIT, JobHeldUser)" in why
    assert "scontrol release 2" in why and "gymslurm cancel" in why


def test_held_states_are_live_so_cancel_and_status_see_them() -> None:
    """SPECIAL_EXIT and REQUEUE_HOLD count as live jobs of a chain."""
    from gymslurm.launcher.backend import LIVE_STATES

    assert {"SPECIAL_EXIT", "REQUEUE_HOLD"} <= LIVE_STATES
