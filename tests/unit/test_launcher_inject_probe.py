"""The pure parts of `gymslurm inject` (which command sends which fault) and of the doctor probe
(what its report means), plus the link lock a second link of a shard finds taken."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymslurm.commands.inject import slurm_argv, target_pids
from gymslurm.commands.probe import findings_of
from gymslurm.job.link import try_link_lock
from gymslurm.launcher.rundir import RunDir
from gymslurm.store import live


@pytest.mark.parametrize(
    ("fault", "pid", "argv"),
    [
        ("timeout", None, ["scancel", "--signal=USR1", "--batch", "42"]),
        ("preempt", None, ["scancel", "--signal=TERM", "--full", "42"]),
        ("cancel", None, ["scancel", "42"]),
        ("requeue", None, ["scontrol", "requeue", "42"]),
        ("crash", 7, ["srun", "--jobid=42", "--overlap", "--nodes=1", "--ntasks=1", "kill", "-KILL", "7"]),
        (
            "server-crash",
            8,
            ["srun", "--jobid=42", "--overlap", "--nodes=1", "--ntasks=1", "kill", "-KILL", "8"],
        ),
        ("hang", 7, ["srun", "--jobid=42", "--overlap", "--nodes=1", "--ntasks=1", "kill", "-STOP", "7"]),
    ],
)
def test_each_fault_is_an_ordinary_user_command(fault: str, pid: int | None, argv: list[str]) -> None:
    """Each injected fault is one scancel / scontrol / srun command an ordinary user may run."""
    assert slurm_argv(fault, "42", pid) == argv


def test_a_collector_fault_reaches_every_collector_of_a_suite_link(tmp_path: Path) -> None:
    """A suite link's heartbeat lists each collector it started: crash and hang go to all of them
    (one srun kill naming every pid); a benchmark link's heartbeat names its one collector."""
    run = RunDir(tmp_path)
    beat = live.Heartbeat(job_id="42", start="s", at="a", epoch=1.0, interval_s=15, pid=1, collector_pid=7)
    live.write_heartbeat(run.heartbeat(0), beat.model_copy(update={"collector_pids": [7, 8, 9]}))
    assert target_pids(run, 0, "42", "crash") == [7, 8, 9]
    assert slurm_argv("hang", "42", [7, 8, 9])[-4:] == ["-STOP", "7", "8", "9"]
    live.write_heartbeat(run.heartbeat(1), beat)
    assert target_pids(run, 1, "42", "hang") == [7]


REPORT = {
    "python": "3.11.2",
    "executable": "/v/bin/python",
    "gymslurm": "1.0",
    "time": 1000.0,
    "flock": "refused",
}


@pytest.mark.parametrize(
    ("changes", "setting", "level"),
    [
        ({}, "flock on the run root", "ok"),
        ({"flock": "granted"}, "flock on the run root", "error"),
        ({"flock": "error: [Errno 38] Function not implemented"}, "flock on the run root", "error"),
        ({}, "gymslurm on the compute node", "ok"),
        ({"gymslurm": "0.9"}, "gymslurm on the compute node", "warning"),
        ({"time": 1003.0}, "clock of the compute node", "ok"),
        ({"time": 1060.0}, "clock of the compute node", "warning"),
    ],
    ids=[
        "flock refused while held",
        "flock granted (localflock)",
        "flock unsupported (noflock)",
        "same gymslurm",
        "another gymslurm",
        "clock within 10 s",
        "clock a minute off",
    ],
)
def test_probe_report_findings(changes: dict[str, object], setting: str, level: str) -> None:
    """The probe job's report becomes findings: flock must be refused, versions equal, clocks close."""
    (finding,) = [f for f in findings_of({**REPORT, **changes}, 1000.0, "1.0") if f.setting == setting]
    assert finding.level == level, finding


def test_a_second_link_finds_the_link_lock_taken(tmp_path: Path) -> None:
    """While one link holds the shard's link lock a second cannot take it; once released it can."""
    path = tmp_path / "shards/000/link.lock"
    first = try_link_lock(path)
    assert first is not None
    try:
        assert try_link_lock(path) is None
    finally:
        os.close(first)
    again = try_link_lock(path)
    assert again is not None
    os.close(again)
