"""The local queue's supervisor writes a running job's file only when it changes the job, so a reader
that waits for a change (``run_records`` in the tests, anything watching mtimes) is not woken five
times a second per running job."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from gymslurm.site.local import Supervisor


def _stat(path: Path) -> tuple[int, int, int]:
    found = path.stat()
    return (found.st_ino, found.st_size, found.st_mtime_ns)


def _pending_sleeper(local: Path) -> Path:
    """A pending job whose script sleeps a minute; its file."""
    script = local / "sleep.sbatch"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/bash\nsleep 60\n")
    (local / "jobs").mkdir()
    job = {"id": "local-1", "script": str(script), "after": [], "state": "PENDING", "reason": "None"}
    job |= {"name": "j", "output": "j.out", "time_s": None, "signal": None, "signal_lead_s": 0}
    job |= {"workdir": str(local), "submitted_at": time.time(), "begin_at": None, "exit_code": None}
    job |= {"signal_code": None, "pid": None, "started_at": None, "ended_at": None}
    path = local / "jobs" / "local-1.json"
    path.write_text(json.dumps(job))
    return path


def test_a_tick_that_changes_nothing_leaves_a_running_jobs_file_alone(tmp_path: Path) -> None:
    """Started (its file written RUNNING), then ticks with nothing to do: the same file, byte for
    byte and inode; a cancel marker then changes the job and its file is written again."""
    path = _pending_sleeper(tmp_path / "local")
    supervisor = Supervisor(tmp_path / "local", cap=1)
    supervisor.tick()
    started = json.loads(path.read_text())
    try:
        assert started["state"] == "RUNNING"
        before = _stat(path)
        for _ in range(3):
            time.sleep(0.01)  # a rewrite would show in the mtime (ns) and the inode (a new file renamed)
            assert supervisor.tick()
        assert _stat(path) == before
        (tmp_path / "local/jobs/local-1.cancel").touch()
        supervisor.tick()
        assert _stat(path) != before and json.loads(path.read_text())["ended_by"] == "CANCELLED"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(started["pid"], signal.SIGKILL)
        supervisor.procs["local-1"].wait()
