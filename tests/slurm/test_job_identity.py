"""Each task of a job array reads its own identity from the real Slurm (docs/identity.md).

Why: a link records its job id in the ledger (start record, decision), and the chain's successor,
``status`` and dead-link accounting all look that id up. Slurm hands one task of an array the
array's own job id (``JobId=949 ArrayJobId=949 ArrayTaskId=2``), and ``scontrol show job 949``
lists every task of the array: read as one answer, task 949_2 called itself 949_0 (seen in CI:
node-DOWN run, shard 2's start record carried shard 0's id 5732_0).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import SlurmCluster, SlurmUser, wait_for_job

pytestmark = pytest.mark.slurm

TASKS = 3
# Each task asks who it is the way a link does (this_job on the Slurm backend) once every task of
# the array has started, so the array's own id is held by a task and lists them all.
SCRIPT = """#!/bin/bash
while [ "$(squeue -h -r -j "$SLURM_ARRAY_JOB_ID" -t RUNNING -o %i | wc -l)" -lt {tasks} ]; do sleep 0.5; done
exec {python} -c 'from gymslurm.site.backend import SlurmBackend, this_job
print(this_job(SlurmBackend())[0])' > "identity-$SLURM_ARRAY_TASK_ID.txt"
"""


def test_every_array_task_records_its_own_id_not_another_tasks(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_user: SlurmUser
) -> None:
    """Tasks 0..2 of array J each read J_<own task>, including the task whose job id is J itself."""
    script = SCRIPT.format(tasks=TASKS, python=slurm_python)
    array = slurm_user.sbatch(script, f"--array=0-{TASKS - 1}", "--time=00:02:00", name="identity")
    for task in range(TASKS):
        outcome = wait_for_job(f"{array}_{task}", timeout=180)
        assert outcome.state == "COMPLETED", outcome.raw
    seen = {task: (slurm_user.workdir / f"identity-{task}.txt").read_text().strip() for task in range(TASKS)}
    assert seen == {task: f"{array}_{task}" for task in range(TASKS)}
