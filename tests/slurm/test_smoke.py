"""Smoke test of the Slurm sandbox: a non-root user's job exit code reaches Slurm's job record.

gymslurm's launcher decides by JobState first and ExitCode second (RECIPE.md), so the sandbox
must report ``FAILED 75:0`` for a job exiting 75 and ``COMPLETED 0:0`` for a clean exit.
The parser rows pin real Slurm 22.05 output so the helpers fail loudly if it changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import SlurmCluster, SlurmTestError, SlurmUser, parse_scontrol_job, wait_for_job

SCONTROL_FAILED_75 = (
    "JobId=1 JobName=wrap UserId=slurmtest(1000) GroupId=slurmtest(1000) MCS_label=N/A Priority=1 "
    "Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) "
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=75:0 RunTime=00:00:00 TimeLimit=UNLIMITED"
)
SCONTROL_TIMEOUT_SIGNAL = (
    "JobId=7 JobName=t JobState=TIMEOUT Reason=TimeLimit Dependency=(null) Requeue=1 Restarts=2 "
    "BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:22"
)


@pytest.mark.parametrize(
    ("text", "state", "code", "signal", "restarts"),
    [
        (SCONTROL_FAILED_75, "FAILED", 75, 0, 0),
        (SCONTROL_TIMEOUT_SIGNAL, "TIMEOUT", 0, 15, 2),
    ],
)
def test_parse_scontrol_job_reads_state_exit_code_and_restarts(
    text: str, state: str, code: int, signal: int, restarts: int
) -> None:
    """`scontrol show job -o` text gives JobState, ExitCode code:signal and Restarts."""
    outcome = parse_scontrol_job(1, text)
    assert (outcome.state, outcome.exit_code, outcome.signal, outcome.restarts) == (
        state,
        code,
        signal,
        restarts,
    )


def test_parse_scontrol_job_rejects_text_without_state() -> None:
    """Output lacking JobState/ExitCode raises an error quoting it."""
    with pytest.raises(SlurmTestError, match="Invalid job id"):
        parse_scontrol_job(9, "slurm_load_jobs error: Invalid job id specified")


@pytest.mark.slurm
@pytest.mark.parametrize(("exit_code", "state"), [(75, "FAILED"), (0, "COMPLETED")])
def test_job_exit_code_is_reported_by_slurm(
    slurm_cluster: SlurmCluster, slurm_user: SlurmUser, exit_code: int, state: str
) -> None:
    """A non-root user's batch job exiting N ends in the expected JobState with ExitCode N:0."""
    job_id = slurm_user.sbatch(f"#!/bin/bash\necho running as $(id -un)\nexit {exit_code}\n")
    outcome = wait_for_job(job_id, timeout=60)
    assert (outcome.state, outcome.exit_code, outcome.signal) == (state, exit_code, 0), outcome.raw
    log = (slurm_user.workdir / f"gymslurm-test-{job_id}.out").read_text()
    assert log.strip() == f"running as {slurm_user.name}"


@pytest.mark.slurm
def test_job_user_runs_this_checkouts_gymslurm(slurm_user: SlurmUser, slurm_python: Path) -> None:
    """A job of the test user imports gymslurm with slurm_python and exits 0."""
    job_id = slurm_user.sbatch(f"#!/bin/bash\nexec {slurm_python} -c 'import gymslurm'\n")
    outcome = wait_for_job(job_id, timeout=60)
    assert (outcome.state, outcome.exit_code) == ("COMPLETED", 0), outcome.raw
