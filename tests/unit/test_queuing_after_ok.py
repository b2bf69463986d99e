"""A killed submit's first links keep waiting for its ``afterok`` jobs (issue 35; docs/watch.md).

A watch submits a checkpoint's suite run whose arrays wait for the conversion job (``afterok``).
When that submit is killed midway, array.json records the jobs waited for; a completion from the
login side (``status``) asks Slurm about them once and keeps the wait while the conversion runs,
drops it once the conversion completed (slurmctld may have forgotten it: sbatch would refuse the
dependency), and queues nothing when it failed. A job of the run completing it needs no wait.

Slurm is :class:`ScriptedSlurm` (tests/unit/scripted_slurm.py): the real client and backend, the
commands answered from its in-memory queue.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.errors import SlurmError
from gymslurm.formats import version_of
from gymslurm.job import first_links
from gymslurm.job.first_links import completion_wait, finish_queuing, queuing, record_plan, submit_arrays
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.site.arrays import plan_arrays
from gymslurm.site.backend import SlurmBackend
from tests.run_info import run_info
from tests.unit.scripted_slurm import ScriptedSlurm, reply

CONVERT = "7"  # the watch's conversion job
SACCT_COMPLETED = f"{CONVERT}|convert|COMPLETED|0:0|t|t|10|billing=1\n"


@pytest.mark.parametrize(
    ("states", "waits", "refused"),
    [
        ({"7": "PENDING"}, ["7"], None),
        ({"7": "RUNNING"}, ["7"], None),
        ({"7": "COMPLETING"}, ["7"], None),
        ({"7": "COMPLETED"}, [], None),
        ({"7": "FAILED"}, [], "job 7, which the first links wait for, ended FAILED"),
        ({"7": "CANCELLED"}, [], "ended CANCELLED"),
        ({"7": "TIMEOUT"}, [], "ended TIMEOUT"),
        ({}, [], "Slurm no longer knows job 7"),
        ({"7": "COMPLETED", "8": "RUNNING"}, ["8"], None),
        ({"7": "RUNNING", "8": "FAILED"}, [], "job 8"),
    ],
)
def test_completion_wait_by_rule(states: dict[str, str], waits: list[str], refused: str | None) -> None:
    """Live: still waited for; completed: no longer (sbatch would refuse a forgotten job); ended any
    other way or unknown to Slurm: nothing may be queued, and why."""
    after_ok = sorted({"7", *states})
    kept, reason = completion_wait(after_ok, states)
    assert kept == waits
    assert (reason is None) == (refused is None) and (refused is None or refused in (reason or ""))


def _run_json(run: RunDir) -> None:
    """run.json of a 3-shard array run on Slurm, and its (secret-free) benchmark config."""
    run.root.mkdir(parents=True)
    info = run_info(shards=3, array=True, lookahead=2)
    atomic_write(run.info_path, info.model_dump_json().encode())
    atomic_write(run.config_path, b"dataset: d.jsonl\n")


def _killed_watch_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, convert_state: str | None
) -> tuple[RunDir, ScriptedSlurm]:
    """A watch's submit waiting for the conversion (afterok) whose third sbatch failed (submit dies
    there): shards 0-1's array and spare queued, shard 2's not, the mark left. ``convert_state``:
    the conversion as squeue shows it (None: slurmctld forgot it; sacct says it completed)."""
    run = RunDir(tmp_path / "runs" / "r")
    _run_json(run)
    dying = reply(stderr="sbatch: error: Batch job submission failed: Socket timed out", code=1)
    client = ScriptedSlurm({"sbatch": ["100\n", "101\n", dying]})
    plan = plan_arrays(3, {"MaxArraySize": 2}, None, lookahead=2)
    record_plan(run, 3, None, plan, [CONVERT])
    with pytest.raises(SlurmError), queuing(run):
        submit_arrays(
            run,
            SlurmBackend(client),
            3,
            plan,
            max_running=None,
            counts=[1] * 3,
            lookahead=2,
            after_ok=[CONVERT],
        )
    assert run.queuing_mark.exists()
    client.replies, client.next_id, client.log, client.stdins = (
        {},
        200,
        [],
        [],
    )  # Slurm answers again, from its queue
    if convert_state is not None:
        client.states[CONVERT] = convert_state
    else:
        client.replies["sacct"] = [SACCT_COMPLETED]
    monkeypatch.setattr(first_links, "run_backend", lambda _run: SlurmBackend(client))
    return run, client


def _sbatches(client: ScriptedSlurm) -> list[list[str]]:
    return [argv for argv in client.log if argv[0] == "sbatch"]


def test_submit_records_the_jobs_its_arrays_wait_for(tmp_path: Path) -> None:
    """array.json (version 2) names the afterok jobs from the plan on, so a completion knows them."""
    run = RunDir(tmp_path / "runs" / "r")
    _run_json(run)
    record_plan(run, 3, None, plan_arrays(3, {"MaxArraySize": 2}, None, lookahead=2), [CONVERT])
    record = run.read_array()
    assert record is not None and record.after_ok == [CONVERT] and record.v == version_of("array") == 2


def test_status_completing_while_the_conversion_runs_keeps_the_afterok(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """status completes the queuing: shard 2's array and its spare still wait for the conversion."""
    run, client = _killed_watch_submit(tmp_path, monkeypatch, "RUNNING")
    assert finish_queuing(run, "status") == ["200", "201"]
    first, spare = _sbatches(client)
    assert f"--dependency=afterok:{CONVERT}" in first
    assert f"--dependency=afterany:200,afterok:{CONVERT}" in spare
    assert not run.queuing_mark.exists()
    record = run.read_array()
    assert record is not None and record.after_ok == [CONVERT]


@pytest.mark.parametrize("convert_state", ["COMPLETED", None], ids=["known", "forgotten-by-slurmctld"])
def test_status_completing_after_the_conversion_completed_adds_no_dependency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, convert_state: str | None
) -> None:
    """The conversion completed (squeue still shows it, or only sacct knows it after MinJobAge): the
    remaining arrays wait for nothing, since sbatch refuses a dependency on a job slurmctld forgot."""
    run, client = _killed_watch_submit(tmp_path, monkeypatch, convert_state)
    assert finish_queuing(run, "status") == ["200", "201"]
    assert not any(
        arg.startswith("--dependency=") and "afterok" in arg for argv in _sbatches(client) for arg in argv
    )
    # by id (scontrol's show job lines, sacct -j; not the intent's squeue --name)
    asked = [argv[0] for argv, lines in zip(client.log, client.stdins, strict=True) if "-j" in argv or lines]
    assert asked == (
        ["scontrol"] if convert_state else ["scontrol", "sacct"]
    )  # sacct only for a forgotten job


def test_status_queues_nothing_when_the_conversion_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The conversion failed: no array is queued (the run must not evaluate a half-converted
    checkpoint), the mark stays, and stderr says why (the watch's tick cancels the run)."""
    run, client = _killed_watch_submit(tmp_path, monkeypatch, "FAILED")
    assert finish_queuing(run, "status") == []
    assert _sbatches(client) == [] and run.queuing_mark.exists()
    assert f"job {CONVERT}, which the first links wait for, ended FAILED" in capsys.readouterr().err


def test_a_job_of_the_run_completing_asks_nothing_and_adds_no_dependency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's first job completes it: a job of the run ran, so the conversion completed."""
    run, client = _killed_watch_submit(tmp_path, monkeypatch, "RUNNING")
    assert first_links.complete_queuing(run, SlurmBackend(client), 2, "100_0") == ["200", "201"]
    assert [argv[0] for argv in client.log] == ["squeue", "sbatch", "sbatch"]  # squeue: the intent's lookup
    assert not any("afterok" in arg for argv in _sbatches(client) for arg in argv)
