"""Pause and resume (docs/launcher.md, "Pausing a run"): the rule, the record, the verdict, the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.commands.pause import pause
from gymslurm.commands.wait import wait_outcome
from gymslurm.launcher.decide import Budgets, Decision, JobEnd, Limits, Progress, decide, job_exit_code
from gymslurm.launcher.ledger import (
    BudgetsRecord,
    DecisionRecord,
    Paused,
    Resubmitted,
    Started,
    Submitted,
    summarize,
)
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.launcher.views.diagnosis import verdict
from gymslurm.site.local import LocalBackend
from gymslurm.site.slurm import QueueRow
from tests.run_info import run_info
from tests.status_documents import document, row

SPENT = Budgets(jobs=3, walltime_s=100.0, infra_retries_used=1, links_without_progress=2)
NOTHING_NEW = Progress(successful=4, snapshot="t1")


def _row(job: str, state: str) -> QueueRow:
    return QueueRow(job, "gs", state, "None", "(null)", "0:00", "1:00", "N/A")


@pytest.mark.parametrize("code", [75, 1, None])
def test_a_paused_link_spends_no_retry_and_counts_no_link_without_progress(code: int | None) -> None:
    """Whatever the pause's TERM made of the collector (75, 1, killed), PAUSED: only its time counts."""
    end = JobEnd("SIGNALLED:SIGTERM", code, 30.0, NOTHING_NEW, NOTHING_NEW)
    verdict_ = decide(end, SPENT, Limits(infra_retry_limit=1, max_links_without_progress=3), paused=True)
    assert verdict_.decision == Decision.PAUSED and not verdict_.decision.continues
    assert verdict_.budgets_after == Budgets(
        jobs=4, walltime_s=130.0, infra_retries_used=1, links_without_progress=2
    )
    assert job_exit_code(Decision.PAUSED) == 75


def test_a_collector_that_finished_before_the_pause_is_done() -> None:
    """Exit 0 (and 76) keep their meaning under a pause: the shard finished."""
    assert decide(JobEnd("RUNNING", 0, 5.0), SPENT, Limits(), paused=True).decision == Decision.DONE
    assert decide(JobEnd("RUNNING", 76, 5.0), SPENT, Limits(), paused=True).decision == Decision.STOP_FAILED


def _decided(job: str, decision: Decision) -> DecisionRecord:
    return DecisionRecord(
        job_id=job,
        end="t",
        elapsed_s=10,
        slurm_state="SIGNALLED:SIGTERM",
        exit_code=75,
        decision=decision,
        reason="why",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord.of(SPENT),
    )


def test_the_pause_record_holds_until_a_resume_keeps_the_budgets() -> None:
    """A paused chain is not finished; a resubmit without reset clears the pause and keeps what was spent
    (the chain's budgets and the collector's failure budget)."""
    records = [
        Submitted(job_id="1"),
        Started(job_id="1"),
        Paused(job_ids=["1", "2"]),
        _decided("1", Decision.PAUSED),
    ]
    state = summarize(records)
    assert (state.paused, state.finished) == (True, False)
    resumed = summarize([*records, Resubmitted(reset_budget=False)])
    assert (resumed.paused, resumed.budgets.infra_retries_used, resumed.budgets.walltime_s) == (False, 1, 100)
    assert not resumed.resubmit_pending  # the collector keeps its failure budget: no +resubmit=true
    assert summarize([*records, Resubmitted()]).budgets.infra_retries_used == 0  # resubmit resets


def test_status_says_paused_and_whether_a_link_is_still_saving() -> None:
    """PAUSED with nothing live; while the signalled link saves, PAUSED says it is saving."""
    state = summarize([Submitted(job_id="1"), Started(job_id="1"), Paused(job_ids=["1"])])
    word, why = verdict(state, [_row("1", "RUNNING")])
    assert word == "PAUSED" and "job 1 is saving its work" in why
    word, why = verdict(state, [])
    assert word == "PAUSED" and "'gymslurm resume' goes on" in why


def test_submit_wait_ends_on_a_paused_run_with_75() -> None:
    """--wait ends once every shard is PAUSED (or done): 75, saying how to resume."""
    report = document([row(0, "PAUSED", why="paused"), row(1, "DONE", why="done")], state="-")
    outcome = wait_outcome(report, aggregation_enabled=True)
    assert outcome is not None and outcome[0] == 75 and "'gymslurm resume r b'" in outcome[1]


def _local_run(tmp_path: Path) -> tuple[RunDir, LocalBackend]:
    run = RunDir(tmp_path / "runs" / "r")
    info = run_info(backend="local", shards=2)
    atomic_write(run.info_path, info.model_dump_json().encode())
    return run, LocalBackend(run.local_dir)


def test_pause_records_before_it_cancels_and_leaves_finished_chains_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pause: a paused record in each unfinished chain naming its live jobs, then those jobs cancelled;
    a DONE chain keeps its ledger; a second pause changes nothing and says so."""
    run, backend = _local_run(tmp_path)
    script = run.root / "sleep.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/bin/sh\nsleep 600\n")
    job = backend.submit(script)
    run.ledger(0).append(Submitted(job_id=job))
    run.ledger(1).append(Submitted(job_id="local-old"))
    run.ledger(1).append(Started(job_id="local-old"))
    run.ledger(1).append(_decided("local-old", Decision.DONE))
    done_before = run.ledger(1).path.read_bytes()
    assert pause(str(run.root), str(tmp_path / "runs")) == 0
    assert "paused 1 chain(s); stopped 1 job(s)" in capsys.readouterr().out
    paused = [r for r in run.ledger(0).read() if isinstance(r, Paused)]
    assert [p.job_ids for p in paused] == [[job]]
    assert (run.local_dir / "jobs" / f"{job}.cancel").exists()
    assert run.ledger(1).path.read_bytes() == done_before
    assert pause(str(run.root), str(tmp_path / "runs")) == 0
    assert "nothing to pause (1 DONE, 1 paused); nothing was changed" in capsys.readouterr().out
    assert len([r for r in run.ledger(0).read() if isinstance(r, Paused)]) == 1
