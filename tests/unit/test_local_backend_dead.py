"""The local queue never shows a dead job as live: a RUNNING job file whose batch shell is gone
(pid + create time) reads NODE_FAIL, so ``resubmit`` never refuses because of it (issue 19 §4)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gymslurm.site.local import LocalBackend


def _job(folder: Path, pid: int, create_time: float | None) -> None:
    (folder / "jobs").mkdir(parents=True, exist_ok=True)
    job = {
        "id": "local-1",
        "script": "x",
        "after": [],
        "state": "RUNNING",
        "reason": "None",
        "name": "j",
        "output": "o",
        "time_s": None,
        "signal": None,
        "signal_lead_s": 0,
        "workdir": str(folder),
        "submitted_at": 1.0,
        "exit_code": None,
        "signal_code": None,
        "pid": pid,
        "started_at": 1.0,
        "ended_at": None,
        "pid_create_time": create_time,
    }
    (folder / "jobs" / "local-1.json").write_text(json.dumps(job))


def test_a_running_job_whose_process_is_gone_is_not_live(tmp_path: Path) -> None:
    """A supervisor that died on a full disk left RUNNING behind; the queue says NODE_FAIL."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    _job(tmp_path, gone.pid, 123.0)
    assert LocalBackend(tmp_path).queue()["local-1"].state == "NODE_FAIL"


def test_a_reused_pid_is_not_the_job(tmp_path: Path) -> None:
    """The pid is alive but was created at another time: another process, the job is dead."""
    import os

    _job(tmp_path, os.getpid(), 1.0)
    assert LocalBackend(tmp_path).queue()["local-1"].state == "NODE_FAIL"


def test_a_running_job_is_live(tmp_path: Path) -> None:
    """The batch shell lives with its recorded create time: RUNNING."""
    import os

    import psutil

    _job(tmp_path, os.getpid(), psutil.Process().create_time())
    assert LocalBackend(tmp_path).queue()["local-1"].state == "RUNNING"


def test_a_pending_job_no_supervisor_can_run_is_not_live(tmp_path: Path) -> None:
    """No supervisor holds the queue and none can be started (its interpreter is gone): the pending
    job is shown as a job nobody will run, not as live work to wait on."""
    from gymslurm.site.backend import LIVE_STATES

    _job(tmp_path, 0, None)
    job = json.loads((tmp_path / "jobs" / "local-1.json").read_text())
    job.update(state="PENDING", pid=None, started_at=None)
    (tmp_path / "jobs" / "local-1.json").write_text(json.dumps(job))
    backend = LocalBackend(tmp_path, python=str(tmp_path / "no-such-python"))
    row = backend.queue()["local-1"]
    assert row.state not in LIVE_STATES
    assert "no supervisor" in row.reason
    assert backend.job_rows(["local-1"])["local-1"].state == row.state
