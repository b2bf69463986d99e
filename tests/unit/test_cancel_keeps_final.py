"""``gymslurm cancel`` never relabels a chain whose final decision is written (issue 32).

Seen on a 10,000-shard run: shards whose link had written DONE 16 s earlier, its job still sending
notifications, read CANCELLED after ``cancel`` (and ``resubmit`` would have run them again). The
queue here is a scripted Slurm (tests/unit/scripted_slurm.py) showing that job still RUNNING.
"""

from __future__ import annotations

from pathlib import Path

from gymslurm.commands.cancel import cancel_run
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import BudgetsRecord, Cancelled, DecisionRecord, Started, Submitted, summarize
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.site.backend import SlurmBackend
from tests.run_info import run_info
from tests.unit.scripted_slurm import ScriptedSlurm


def _decided(job: str, decision: Decision) -> list[Submitted | Started | DecisionRecord]:
    start = Started(job_id=job)
    budgets = BudgetsRecord()
    end = DecisionRecord(
        job_id=job,
        start=start.at,
        end=start.at,
        elapsed_s=5,
        slurm_state="RUNNING",
        exit_code=0,
        decision=decision,
        reason="collector exit 0",
        budgets_before=budgets,
        budgets_after=budgets,
    )
    return [Submitted(job_id=job), start, end]


def _run(tmp: Path) -> RunDir:
    run = RunDir(tmp / "r")
    info = run_info(shards=2, accounting=False)
    atomic_write(run.info_path, info.model_dump_json().encode())
    return run


def test_cancel_keeps_done_of_a_chain_whose_job_is_still_finishing(tmp_path: Path) -> None:
    """Shard 0 wrote DONE and its job still runs (notifications); shard 1 runs its collector:
    cancel cancels shard 1 and both jobs, and shard 0 still reads DONE."""
    run = _run(tmp_path)
    for record in _decided("200", Decision.DONE):
        run.ledger(0).append(record)
    run.ledger(1).append(Submitted(job_id="201"))
    run.ledger(1).append(Started(job_id="201"))
    client = ScriptedSlurm()
    client.states.update({"200": "RUNNING", "201": "RUNNING"})
    assert cancel_run(run, SlurmBackend(client, accounting=False)) == 0
    done, cancelled = summarize(run.ledger(0).read()), summarize(run.ledger(1).read())
    assert done.last_decision is not None and done.last_decision.decision == Decision.DONE
    assert not done.cancelled and cancelled.cancelled
    assert ["scancel", "200", "201"] in client.log


def test_a_cancel_record_written_after_a_final_decision_changes_nothing() -> None:
    """The race past cancel's last read: its record lands after the DONE; the chain stays DONE."""
    state = summarize([*_decided("200", Decision.STOP_FAILED), Cancelled(job_ids=["200"])])
    assert state.finished and not state.cancelled
    assert state.last_decision is not None and state.last_decision.decision == Decision.STOP_FAILED


def test_a_cancel_of_an_unfinished_chain_still_cancels_it() -> None:
    """A chain whose last decision continues is cancelled by the record."""
    state = summarize([*_decided("200", Decision.CONTINUE), Cancelled(job_ids=["201"])])
    assert state.cancelled and state.finished
