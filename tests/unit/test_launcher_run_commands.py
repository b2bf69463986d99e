"""cancel, inject, resubmit --shards and run names on what a user types (issue 19): no false relabel,
no fault recorded that was not sent, no sacct without accounting, names that never collide."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gymslurm.commands.cancel import cancel
from gymslurm.commands.inject import inject
from gymslurm.commands.new_run import new_run_dir
from gymslurm.commands.resubmit import parse_shard_selection
from gymslurm.errors import ConfigError, SlurmError
from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.ledger import BudgetsRecord, DecisionRecord, Started, Submitted
from gymslurm.launcher.rundir import RunDir, RunInfo, atomic_write
from gymslurm.launcher.settings import load_benchmark
from gymslurm.site.backend import SlurmBackend
from gymslurm.site.local import LocalBackend
from gymslurm.store import live
from tests.run_info import run_info
from tests.unit.scripted_slurm import ScriptedSlurm, reply


def _info(backend: str, shards: int = 2, accounting: bool | None = None) -> RunInfo:
    return run_info(backend=backend, shards=shards, accounting=accounting)


def _done(job: str) -> DecisionRecord:
    return DecisionRecord(
        job_id=job,
        end="t",
        elapsed_s=1,
        slurm_state="RUNNING",
        exit_code=0,
        decision=Decision.DONE,
        reason="collector exit 0",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord.of(Budgets(1, 1)),
    )


def _run(tmp_path: Path, info: RunInfo) -> RunDir:
    run = RunDir(tmp_path / "runs" / "r")
    atomic_write(run.info_path, info.model_dump_json().encode())
    return run


def test_cancel_of_a_run_that_ended_changes_nothing_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every chain DONE and nothing live: cancel writes no record (no shard relabelled CANCELLED)."""
    run = _run(tmp_path, _info("local"))
    for shard in range(2):
        run.ledger(shard).append(Submitted(job_id=f"local-{shard}"))
        run.ledger(shard).append(Started(job_id=f"local-{shard}"))
        run.ledger(shard).append(_done(f"local-{shard}"))
    before = [run.ledger(s).path.read_bytes() for s in range(2)]
    assert cancel(str(run.root), str(tmp_path / "runs")) == 0
    assert "has already ended (2 DONE); nothing to cancel" in capsys.readouterr().out
    assert [run.ledger(s).path.read_bytes() for s in range(2)] == before
    assert not run.aggregate_ledger.path.exists()


def test_cancel_keeps_the_verdict_of_a_finished_chain(tmp_path: Path) -> None:
    """Shard 0 DONE, shard 1 still queued: only shard 1 (and the aggregation) get a cancelled record."""
    run = _run(tmp_path, _info("local"))
    run.ledger(0).append(Submitted(job_id="local-0"))
    run.ledger(0).append(_done("local-0"))
    run.ledger(1).append(Submitted(job_id="local-1"))
    cancel(str(run.root), str(tmp_path / "runs"))
    assert [r.kind for r in run.ledger(0).read()] == ["submitted", "decision"]
    assert [r.kind for r in run.ledger(1).read()] == ["submitted", "cancelled"]


def test_run_names_of_one_second_differ(tmp_path: Path) -> None:
    """Two runs of one benchmark in the same second (in two run roots) get different run and job names."""
    bench = tmp_path / "b.yaml"
    bench.write_text(f"name: same\ndataset: {tmp_path / 'd.jsonl'}\nrun_root: {tmp_path / 'a'}\n")
    settings = load_benchmark(str(bench), [])[0]
    names = {new_run_dir(settings, tmp_path).name for _ in range(20)}
    assert len(names) == 20


def _running_array_link(tmp_path: Path) -> RunDir:
    run = _run(tmp_path, _info("slurm", shards=1))
    run.ledger(0).append(Submitted(job_id="193_0"))
    run.ledger(0).append(Started(job_id="193_0"))
    live.write_heartbeat(
        run.heartbeat(0),
        live.Heartbeat(
            job_id="193_0", start="t", at="t", epoch=0.0, interval_s=15, pid=1, collector_pid=4242
        ),
    )
    return run


SQUEUE_RUNNING = "193_0|gs|RUNNING|None|(null)|0:10|5:00|2026-12-01T10:00:00\n"


def test_a_crash_on_an_array_task_goes_to_its_numeric_job_id(tmp_path: Path) -> None:
    """srun --jobid takes no 193_0: inject asks squeue for the task's own id (%A) and sends there."""
    run = _running_array_link(tmp_path)
    client = ScriptedSlurm({"squeue": [reply(SQUEUE_RUNNING), reply("194\n")], "srun": [reply()]})
    inject(run, 0, "crash", SlurmBackend(client))
    assert client.log[-1][:2] == ["srun", "--jobid=194"]
    (record,) = [r for r in run.ledger(0).read() if r.kind == "injected"]
    assert record.job_id == "193_0" and "--jobid=194" in record.how  # type: ignore[union-attr]


def test_a_fault_that_was_not_delivered_is_not_recorded(tmp_path: Path) -> None:
    """srun failed (the issue's 'Invalid numeric value'): inject says so and the ledger gets no record."""
    run = _running_array_link(tmp_path)
    failed = reply(stderr='srun: error: Invalid numeric value "193_0" for --jobid.', code=1)
    client = ScriptedSlurm({"squeue": [reply(SQUEUE_RUNNING), reply("194\n")], "srun": [failed]})
    with pytest.raises(ConfigError, match="crash was not delivered to job 193_0, nothing recorded"):
        inject(run, 0, "crash", SlurmBackend(client))
    assert [r.kind for r in run.ledger(0).read()] == ["submitted", "start"]


def test_a_local_fault_to_a_gone_process_is_not_recorded(tmp_path: Path) -> None:
    """The local backend: a collector pid that no longer exists is a refusal, not a survived fault."""
    run = _run(tmp_path, _info("local", shards=1))
    backend = LocalBackend(run.local_dir)
    job = backend.submit(_sleeper(tmp_path))
    run.ledger(0).append(Submitted(job_id=job))
    run.ledger(0).append(Started(job_id=job))
    gone = subprocess.Popen(["true"])
    gone.wait()
    live.write_heartbeat(
        run.heartbeat(0),
        live.Heartbeat(
            job_id=job, start="t", at="t", epoch=0.0, interval_s=15, pid=1, collector_pid=gone.pid
        ),
    )
    try:
        _wait_running(backend, job)
        with pytest.raises(ConfigError, match="was not delivered"):
            inject(run, 0, "crash", backend)
        assert [r.kind for r in run.ledger(0).read()] == ["submitted", "start"]
    finally:
        backend.cancel([job])


def _sleeper(tmp_path: Path) -> Path:
    script = tmp_path / "sleep.sbatch"
    # its own log in tmp_path (the local backend's default, local-%j.out, is relative to the cwd)
    script.write_text(f"#!/bin/bash\n#SBATCH --output={tmp_path}/sleep-%j.out\nsleep 30\n")
    return script


def _wait_running(backend: LocalBackend, job: str) -> None:
    import time

    for _ in range(100):
        row = backend.queue().get(job)
        if row is not None and row.state == "RUNNING":
            return
        time.sleep(0.1)
    raise AssertionError(f"local job {job} never ran")


def test_a_run_without_accounting_never_calls_sacct_for_a_dead_link() -> None:
    """Dead-link accounting on a cluster recorded without accounting asks scontrol, not sacct."""
    scontrol = (
        "JobId=194 ArrayJobId=193 ArrayTaskId=0 JobName=gs JobState=FAILED ExitCode=137:0 RunTime=00:00:02"
    )
    client = ScriptedSlurm({"scontrol": [reply(scontrol)], "sacct": [reply()]})
    row = SlurmBackend(client, accounting=False).ended("193_0")
    assert row is not None and (row.state, row.exit_code) == ("FAILED", 137)
    assert [call[0] for call in client.log] == ["scontrol"]


SCONTROL_FAILED = (
    "JobId=194 ArrayJobId=193 ArrayTaskId=0 JobName=gs JobState=FAILED ExitCode=137:0 RunTime=00:00:02"
)


def test_a_dead_link_is_judged_from_scontrol_when_sacct_cannot_reach_the_database() -> None:
    """sacct failing inside a job (slurmdbd without its database, seen on the sandbox) falls back to
    scontrol: the crashed link reads FAILED 137, not UNKNOWN."""
    down = reply(
        stderr="sacct: error: Problem talking to the database: Unable to connect to database", code=1
    )
    client = ScriptedSlurm({"sacct": [down], "scontrol": [reply(SCONTROL_FAILED)]})
    row = SlurmBackend(client, accounting=True).ended("193_0")
    assert row is not None and (row.state, row.exit_code) == ("FAILED", 137)
    assert [call[0] for call in client.log] == ["sacct", "scontrol"]


def test_a_link_sacct_still_shows_running_is_judged_from_scontrol() -> None:
    """slurmdbd learns of a job's end after slurmctld: a sacct row still RUNNING yields to scontrol's end."""
    lagging = reply("193_0|gs|RUNNING|0:0|2026-12-01T22:00:00|Unknown|2\n")
    client = ScriptedSlurm({"sacct": [lagging], "scontrol": [reply(SCONTROL_FAILED)]})
    row = SlurmBackend(client, accounting=True).ended("193_0")
    assert row is not None and (row.state, row.exit_code) == ("FAILED", 137)


def test_a_failing_sacct_is_raised_when_scontrol_forgot_the_job_too() -> None:
    """Neither sacct (failing) nor scontrol (job forgotten) knows the job: the error is raised, so the
    chain accounts the run as UNKNOWN, never as VANISHED."""
    down = reply(stderr="sacct: error: Unable to connect to database", code=1)
    forgotten = reply(stderr="slurm_load_jobs error: Invalid job id specified", code=1)
    client = ScriptedSlurm({"sacct": [down], "scontrol": [forgotten]})
    with pytest.raises(SlurmError, match="Unable to connect"):
        SlurmBackend(client, accounting=True).ended("193_0")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("failed", ("FAILED", set())), ("stalled", ("STALLED", set())), ("0,3,7-9", (None, {0, 3, 7, 8, 9}))],
)
def test_resubmit_shard_selection(text: str, expected: tuple[str | None, set[int]]) -> None:
    """--shards takes a verdict (chosen from status) or shard numbers and ranges."""
    assert parse_shard_selection(text, 10) == expected


@pytest.mark.parametrize("bad", ["10", "3-1", "a,b", "1-"])
def test_resubmit_shard_selection_refuses_what_is_not_a_shard(bad: str) -> None:
    """A shard outside the run, a backward range or a word that is not a verdict: refused, naming it."""
    with pytest.raises(ConfigError, match="--shards"):
        parse_shard_selection(bad, 10)
