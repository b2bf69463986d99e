"""What Slurm recorded beside the ledger's GPU-hours (docs/cost.md): one sacct query, only with accounting."""

from __future__ import annotations

from pathlib import Path

from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.ledger import BudgetsRecord, DecisionRecord, Started, Submitted
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.launcher.views.cost import cost_line
from gymslurm.launcher.views.status import run_status
from gymslurm.site.backend import SlurmBackend
from tests.run_info import run_info
from tests.unit.scripted_slurm import ScriptedSlurm

T0 = 1_780_000_000.0
# Pasted from the sandbox (sacct -D -X -n -P -o SACCT_FIELDS) with gres/gpu=2 written in: a link
# requeued once (its first run REQUEUED, then its second run), then its successor.
SACCT_RUNS = """\
20_0|gs-r|REQUEUED|0:0|2026-12-01T21:10:54|2026-12-01T21:11:51|57|billing=1,cpu=1,gres/gpu=2,node=1
20_0|gs-r|COMPLETED|0:0|2026-12-01T21:12:04|2026-12-01T21:12:08|4|billing=1,cpu=1,gres/gpu=2,node=1
21|gs-r|COMPLETED|0:0|2026-12-01T21:12:09|2026-12-01T21:13:09|60|billing=1,cpu=1,gres/gpu=2,node=1
"""


def _decided(job: str, restart: int, decision: Decision, elapsed: float) -> DecisionRecord:
    return DecisionRecord(
        job_id=job,
        restart_count=restart,
        end="t",
        elapsed_s=elapsed,
        slurm_state="RUNNING",
        exit_code=0,
        decision=decision,
        reason="why",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord.of(Budgets(1, elapsed, 0)),
    )


def _run(tmp_path: Path, accounting: bool | None, gpus: int = 2) -> RunDir:
    run = RunDir(tmp_path / "run")
    info = run_info(accounting=accounting, gpus=gpus)
    atomic_write(run.info_path, info.model_dump_json().encode())
    for record in [
        Submitted(job_id="20_0"),
        Started(job_id="20_0", gpus=gpus),
        _decided("20_0", 0, Decision.CONTINUE, 56),
        Submitted(job_id="21", after="20_0"),
        Started(job_id="20_0", restart_count=1, gpus=gpus),
        _decided("20_0", 1, Decision.CONTINUE, 4),
        Started(job_id="21", gpus=gpus),
        _decided("21", 0, Decision.DONE, 59),
    ]:
        run.ledger(0).append(record)
    return run


def test_status_shows_what_slurm_recorded_for_every_run_of_every_job(tmp_path: Path) -> None:
    """With accounting and GPUs: one sacct -D over every job, requeued runs summed, beside the ledger."""
    client = ScriptedSlurm({"squeue": "", "sacct": SACCT_RUNS})
    report = run_status(_run(tmp_path, accounting=True), SlurmBackend(client, accounting=True), now=T0)
    sacct = [call for call in client.log if call[0] == "sacct"]
    assert len(sacct) == 1 and "-D" in sacct[0] and sacct[0][-1] == "20_0,21"
    assert report.queries == 2  # one squeue, one sacct
    shard = report.shards[0]
    assert shard.gpu_hours_slurm == round(2 * (57 + 4 + 60) / 3600, 4)
    assert shard.gpu_hours == round(2 * (56 + 4 + 59) / 3600, 4)
    assert report.summary.gpu_hours_slurm == shard.gpu_hours_slurm
    assert "Slurm recorded 0.07 GPU-h" in (cost_line(report.summary) or "")


def test_without_accounting_status_says_so_and_asks_no_sacct(tmp_path: Path) -> None:
    """A run recorded without accounting: no sacct at all, and Slurm's figure is unknown (None), not 0."""
    client = ScriptedSlurm({"squeue": "", "sacct": SACCT_RUNS})
    report = run_status(_run(tmp_path, accounting=False), SlurmBackend(client, accounting=False), now=T0)
    assert [call[0] for call in client.log] == ["squeue"]
    assert report.shards[0].gpu_hours_slurm is None
    assert report.summary.gpu_hours_slurm is None
    assert "no Slurm figure: this cluster keeps no accounting" in (cost_line(report.summary) or "")
