"""status's compact queue query lists the same jobs as ``squeue -r`` does, task by task (issue 32).

Why: status asks squeue without ``-r`` (an array's pending tasks on one line: a held 10,000-shard
run is 30 lines, not 30,000) and expands those lines itself. That is only right if the expansion
gives exactly ``-r``'s rows in every state a run's arrays pass through. Both are asked here of the
same jobs in the same second, as the non-root test user, on the real Slurm: held and pending arrays
(a step list, a throttle, a dependency), a pending array cancelled whole, pending tasks cancelled
one by one, a task released and run, tasks completed and failed. On squeue's default 64-byte task
list (without ``SLURM_BITSTR_LEN=0``) a long list is cut short and parsing it fails. Found on the way:
22.05's ``-r`` leaves out the last task of a stepped array (``0-300:3`` lists 100 tasks, and all 101
run once released); the compact line names it, as ``scontrol show job`` does.
"""

from __future__ import annotations

import time

import pytest

from gymslurm.site.slurm import SQUEUE_FORMAT, SlurmClient, parse_squeue
from tests.support import wait_until

from .helpers import SlurmUser

pytestmark = pytest.mark.slurm

SLEEP = "#!/bin/bash\nsleep 60\n"
ODD_FAILS = "#!/bin/bash\nexit $((SLURM_ARRAY_TASK_ID % 2))\n"


def test_the_compact_query_gives_squeue_r_rows_task_by_task(
    slurm_user: SlurmUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """parse_squeue of status's query (no -r) equals parse_squeue of ``squeue -r``, in each state."""
    name = f"compact-{time.time_ns()}"  # this test's jobs only (an earlier run's may still be listed)
    args = ("-t", "2", "--hold")

    def submit(*extra: str, script: str = SLEEP) -> int:
        return slurm_user.sbatch(script, *extra, name=name)

    stepped = submit("--array=0-300:3", *args)  # 101 tasks, on one line as 0-300:3
    listed = submit("--array=0-300:3", *args)  # one cancelled: 100 ids, a list far past 64 bytes
    submit("--array=0-20%4,30,41-45", *args)
    whole = submit("--array=0-5", *args)
    partly = submit("--array=0-9", *args)
    submit(f"--dependency=afterany:{stepped}", "--array=0-7%2", "-t", "2")
    finished = submit("--array=0-3", "-t", "2", script=ODD_FAILS)
    slurm_user.run(["scancel", str(whole), f"{partly}_2", f"{partly}_3", f"{listed}_6"])
    slurm_user.run(["scontrol", "release", f"{partly}_5"])

    def states_of(job: str) -> list[str]:
        return slurm_user.run(["squeue", "-h", "-r", "-t", "all", "-j", job, "-o", "%T"]).split()

    wait_until(lambda: sorted(set(states_of(str(finished)))) == ["COMPLETED", "FAILED"], 120, "tasks ended")
    wait_until(lambda: states_of(f"{partly}_5") == ["RUNNING"], 120, f"the released task {partly}_5 runs")
    monkeypatch.setenv("USER", slurm_user.name)  # squeue -u USER: the test user's queue
    compact = SlurmClient().queue_text([name])
    per_task = slurm_user.run(["squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT, f"--name={name}"])

    def rows(text: str) -> list[tuple[str, ...]]:
        return sorted((r.job_id, r.state, r.reason, r.dependency) for r in parse_squeue(text))

    assert len(compact.splitlines()) < len(per_task.splitlines()) / 3, compact
    shown, shown_r = set(rows(compact)), set(rows(per_task))
    assert shown_r <= shown, sorted(shown_r - shown)
    # Slurm 22.05's -r leaves out the last task of a stepped array (0-300:3: 0..297, 100 tasks; 101
    # run once released): the compact line, and scontrol's ArrayTaskId=0-300:3, name it
    assert {job for job, *_ in shown - shown_r} <= {f"{stepped}_300"}, sorted(shown - shown_r)
    assert sorted(job for job, *_ in shown if job.startswith(f"{stepped}_")) == sorted(
        f"{stepped}_{k}" for k in range(0, 301, 3)
    )
    states = {state for _, state, _, _ in shown}
    assert {"PENDING", "CANCELLED", "COMPLETED", "FAILED"} <= states, states
