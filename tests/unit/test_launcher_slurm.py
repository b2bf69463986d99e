"""Parsers of Slurm 22.05 output (sbatch, squeue, sacct, scontrol) and the client's command seam."""

from __future__ import annotations

import pytest

from gymslurm.errors import SlurmError
from gymslurm.site.scontrol import parse_scontrol_job
from gymslurm.site.slurm import (
    SlurmClient,
    end_from_scontrol,
    fold_runs,
    parse_exit_code,
    parse_sacct,
    parse_sbatch,
    parse_squeue,
)
from tests.unit.scripted_slurm import ScriptedSlurm, reply

# Pasted from the sandbox's Slurm 22.05.8 (squeue -h -r -t all -u slurmtest -o '%i|%j|%T|%r|%E|%M|%l|%S'):
# plain jobs, then array tasks (a finished one, a one-task successor array, held pending ones).
SQUEUE = """\
12|capB|PENDING|Dependency|afterany:11(unfulfilled)|0:00|UNLIMITED|N/A
10|capA|RUNNING|None|(null)|0:02|UNLIMITED|2026-11-29T15:17:18
1|gymslurm-test|FAILED|NonZeroExitCode|(null)|0:00|UNLIMITED|2026-11-29T15:08:14
162_3|wrap|COMPLETED|None|(null)|0:05|UNLIMITED|2026-12-01T09:54:18
166_7|wrap|COMPLETED|None|(null)|0:00|UNLIMITED|2026-12-01T09:54:29
167_0|arrB|PENDING|JobHeldUser|(null)|0:00|UNLIMITED|N/A
167_1|arrB|PENDING|JobHeldUser|(null)|0:00|UNLIMITED|N/A
"""
# sacct -n -P -X -o JobID,JobName,State,ExitCode,Start,End,ElapsedRaw: the sandbox has no slurmdbd, so
# these rows follow the -P format RECIPE.md records from 22.05 with slurmdbd
# (FAILED|75:0, "CANCELLED by UID").
SACCT = """\
44|gs-demo-s000|FAILED|75:0|2026-11-29T15:10:01|2026-11-29T15:10:09|8|billing=1,cpu=1,node=1
46|gs-demo-s001|CANCELLED by 1001|0:15|2026-11-29T15:11:00|2026-11-29T15:11:30|30|billing=1,cpu=1,node=1
47|gs-demo-s002|PENDING|0:0|Unknown|Unknown|0|
"""
# Pasted from the sandbox (sacct -D -X -n -P -o SACCT_FIELDS): a GPU job requeued once (its first run
# REQUEUED, then the run that completed; gres/gpu=2 written in) and a job whose typed count was written in.
SACCT_RUNS = """\
20_0|gs-bench-0192|REQUEUED|0:0|2026-12-01T21:10:54|2026-12-01T21:11:51|57|billing=1,cpu=1,gres/gpu=2,node=1
20_0|gs-bench-0192|COMPLETED|0:0|2026-12-01T21:12:04|2026-12-01T21:12:08|4|billing=1,cpu=1,gres/gpu=2,node=1
166|acct|FAILED|75:0|2026-12-01T21:46:32|2026-12-01T21:46:33|1|billing=1,cpu=1,gres/gpu:a100=3,gres/gpu=3,node=1
"""
# Pasted from the sandbox (scontrol show job -o 11, a job that exited 75), with Command= given a space.
SCONTROL = (
    "JobId=11 JobName=capA UserId=slurmtest(1001) GroupId=slurmtest(1001) MCS_label=N/A Priority=4294901749 "
    "Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 "
    "Restarts=0 BatchFlag=1 Reboot=0 ExitCode=75:0 RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-11-29T15:17:18 EligibleTime=2026-11-29T15:17:18 AccrueTime=2026-11-29T15:17:18 "
    "StartTime=2026-11-29T15:17:18 EndTime=2026-11-29T15:17:21 Deadline=N/A SuspendTime=None "
    "SecsPreSuspend=0 "
    "LastSchedEval=2026-11-29T15:17:18 Scheduler=Main Partition=debug AllocNode:Sid=localhost:5862 "
    "ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 "
    "CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* "
    "CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/tmp/cap/my j.sh WorkDir=/tmp/cap "
    "StdErr=/tmp/cap/o-11.out StdIn=/dev/null StdOut=/tmp/cap/o-11.out Power= "
)


@pytest.mark.parametrize(
    ("stdout", "job_id"),
    [
        ("Submitted batch job 42\n", "42"),
        ("42\n", "42"),
        ("42;gymslurm\n", "42"),
        ("Submitted batch job 7 on cluster gymslurm\n", "7"),
    ],
)
def test_parse_sbatch(stdout: str, job_id: str) -> None:
    """sbatch's plain and --parsable outputs both give the job id."""
    assert parse_sbatch(stdout) == job_id


def test_parse_sbatch_rejects_other_text() -> None:
    """Unexpected sbatch output raises SlurmError quoting it."""
    with pytest.raises(SlurmError, match="sbatch: error: Batch job submission failed"):
        parse_sbatch("sbatch: error: Batch job submission failed: Invalid account")


def test_parse_squeue_rows() -> None:
    """squeue's pipe-separated rows become QueueRows with state, reason and dependency."""
    rows = parse_squeue(SQUEUE)
    assert [(r.job_id, r.state, r.reason) for r in rows[:3]] == [
        ("12", "PENDING", "Dependency"),
        ("10", "RUNNING", "None"),
        ("1", "FAILED", "NonZeroExitCode"),
    ]
    assert rows[0].dependency == "afterany:11(unfulfilled)"


def test_parse_squeue_keeps_array_tasks_apart() -> None:
    """Array tasks are ARRAY_TASK ids (one row each with -r), so each shard's first link has its own id."""
    rows = parse_squeue(SQUEUE)
    assert [(r.job_id, r.state) for r in rows[3:]] == [
        ("162_3", "COMPLETED"),
        ("166_7", "COMPLETED"),
        ("167_0", "PENDING"),
        ("167_1", "PENDING"),
    ]


@pytest.mark.parametrize(
    ("env", "job"),
    [
        ({"SLURM_JOB_ID": "165", "SLURM_ARRAY_JOB_ID": "162", "SLURM_ARRAY_TASK_ID": "2"}, ("162_2", 0)),
        ({"SLURM_JOB_ID": "165", "SLURM_RESTART_COUNT": "1"}, ("165", 1)),
        ({"GYMSLURM_JOB_ID": "local-3"}, ("local-3", 0)),
    ],
)
def test_a_job_knows_its_own_id_as_the_scheduler_names_it(env: dict[str, str], job: tuple[str, int]) -> None:
    """An array task is ARRAY_TASK (what sbatch, squeue -r, scancel and afterany use), else SLURM_JOB_ID."""
    from gymslurm.site.backend import current_job

    assert current_job(env) == job


def test_parse_squeue_reads_padded_fields_and_skips_blank_lines_as_plain_ones() -> None:
    """A line padded with spaces or tabs (squeue -o with field widths), and blank lines, give the same
    rows as squeue's plain lines: only padded lines are stripped, field by field."""
    padded = "\n  \n" + "".join(
        " | ".join(line.split("|")) + "\t\n" if i % 2 else line + "\n"
        for i, line in enumerate(SQUEUE.splitlines())
    )
    assert parse_squeue(padded) == parse_squeue(SQUEUE)
    assert (
        parse_squeue(padded)[1].job_id == "10" and parse_squeue(padded)[1].start_time == "2026-11-29T15:17:18"
    )


def test_parse_squeue_rejects_other_format() -> None:
    """A squeue line with the wrong number of fields raises SlurmError quoting it."""
    with pytest.raises(SlurmError, match="JOBID PARTITION"):
        parse_squeue("JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n")
    with pytest.raises(SlurmError, match=r"167_\[0,3,9,1.*SLURM_BITSTR_LEN=0"):  # squeue's 64-byte cut
        parse_squeue("167_[0,3,9,1|arrB|PENDING|JobHeldUser|(null)|0:00|UNLIMITED|N/A\n")


# squeue's id of an array's tasks that have not started (one line for them all, without -r), and the
# ids -r lists for the same tasks (shapes seen on the sandbox's Slurm 22.05.8)
PENDING_TASKS = [
    ("167_[2-3%2]", ["167_2", "167_3"]),
    ("31_[0,3,9]", ["31_0", "31_3", "31_9"]),
    ("32_[0-2,6,8-9,30%4]", ["32_0", "32_1", "32_2", "32_6", "32_8", "32_9", "32_30"]),
    ("33_[0-6:3]", ["33_0", "33_3", "33_6"]),
    ("34_[1000]", ["34_1000"]),
    ("167_2", None),
    ("167", None),
    ("167_[2-3", None),
    ("167_[]", None),
    ("167_[2-]", None),
]


@pytest.mark.parametrize(("job_id", "tasks"), PENDING_TASKS)
def test_pending_task_ids(job_id: str, tasks: list[str] | None) -> None:
    """An array's pending tasks on one squeue line stand for each task id its list names (ranges,
    steps, a throttle after %); any other id is no such line."""
    from gymslurm.site.slurm import pending_task_ids

    assert pending_task_ids(job_id) == tasks


def test_parse_squeue_expands_an_arrays_pending_tasks_into_the_rows_squeue_r_prints() -> None:
    """squeue without -r prints an array's tasks that have not started on one line; parse_squeue gives
    each its own row with that line's fields, as -r's line per task would (a started task has its own
    line either way)."""
    compact = (
        "32_[0-1,4%2]|arrB|PENDING|JobArrayTaskLimit|(null)|0:00|5:00|N/A\n"
        "32_2|arrB|RUNNING|None|(null)|0:05|5:00|2026-12-07T23:52:52\n"
    )
    per_task = (
        "32_0|arrB|PENDING|JobArrayTaskLimit|(null)|0:00|5:00|N/A\n"
        "32_1|arrB|PENDING|JobArrayTaskLimit|(null)|0:00|5:00|N/A\n"
        "32_4|arrB|PENDING|JobArrayTaskLimit|(null)|0:00|5:00|N/A\n"
        "32_2|arrB|RUNNING|None|(null)|0:05|5:00|2026-12-07T23:52:52\n"
    )
    assert parse_squeue(compact) == parse_squeue(per_task)


def test_parse_sacct_rows() -> None:
    """sacct -P rows give state (first word), exit code, signal and elapsed seconds."""
    rows = parse_sacct(SACCT)
    assert (rows[0].state, rows[0].exit_code, rows[0].signal, rows[0].elapsed_s) == ("FAILED", 75, None, 8)
    assert (rows[1].state, rows[1].exit_code, rows[1].signal) == ("CANCELLED", 0, 15)
    assert rows[2].state == "PENDING"


def test_parse_sacct_reads_the_gpus_slurm_allocated() -> None:
    """AllocTRES's untyped gres/gpu count is each run's GPUs; a job without GPUs (or not started) holds 0."""
    rows = parse_sacct(SACCT_RUNS)
    assert [(r.gpus, r.gpu_s) for r in rows] == [(2, 114.0), (2, 8.0), (3, 3.0)]
    assert [r.gpus for r in parse_sacct(SACCT)] == [0, 0, 0]


def test_fold_runs_keeps_the_newest_run_and_sums_gpu_seconds_over_every_run() -> None:
    """sacct -D lists a requeued job once per run: state from the newest run, GPU-seconds from all runs."""
    folded = fold_runs(parse_sacct(SACCT_RUNS))
    assert (folded["20_0"].state, folded["20_0"].gpu_s) == ("COMPLETED", 122.0)
    assert folded["166"].gpu_s == 3.0


def test_parse_sacct_rejects_other_text() -> None:
    """sacct output that is not our -P fields raises SlurmError quoting it."""
    with pytest.raises(SlurmError, match="accounting"):
        parse_sacct("Slurm accounting storage is disabled\n")


@pytest.mark.parametrize(("text", "parsed"), [("75:0", (75, None)), ("0:9", (0, 9)), ("139:0", (139, None))])
def test_parse_exit_code(text: str, parsed: tuple[int, int | None]) -> None:
    """Slurm's STATUS:SIGNAL exit codes split into the status and the signal."""
    assert parse_exit_code(text) == parsed


def test_parse_scontrol_job() -> None:
    """scontrol show job -o gives a mapping; a value with a space stays whole."""
    fields = parse_scontrol_job(SCONTROL)
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("FAILED", "75:0", "0")
    assert fields["Command"] == "/tmp/cap/my j.sh" and fields["AllocNode:Sid"] == "localhost:5862"
    assert fields["Power"] == ""


# Pasted from the sandbox (scontrol show job -o 949 while array 949's three tasks ran), cut after
# ExitCode: the array's own id lists every task; task 2 still carries the id 949.
SCONTROL_ARRAY = "".join(
    f"JobId={job} ArrayJobId=949 ArrayTaskId={task} JobName=wrap UserId=slurmtest(1001) "
    "GroupId=slurmtest(1001) MCS_label=N/A Priority=4294900857 Nice=0 Account=sandbox QOS=normal "
    "JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n"
    for job, task in (("949", 2), ("951", 1), ("950", 0))
)


@pytest.mark.parametrize(("asked", "job"), [("949", "949_2"), ("951", "949_1"), ("949_0", "949_0")])
def test_an_array_task_asking_by_its_job_id_reads_its_own_line(asked: str, job: str) -> None:
    """scontrol show job ARRAY_ID lists every task: the task holding that id is itself, not task 0."""
    from gymslurm.site.backend import current_job

    assert current_job({}, slurm_says=parse_scontrol_job(SCONTROL_ARRAY, asked)) == (job, 0)


def test_parse_scontrol_rejects_other_text() -> None:
    """scontrol output that does not start with JobId= raises SlurmError quoting it."""
    with pytest.raises(SlurmError, match="Invalid job id"):
        parse_scontrol_job("slurm_load_jobs error: Invalid job id specified")


def test_accounting_disabled_gives_none() -> None:
    """sacct on a cluster without accounting storage reports None, not an error."""
    client = ScriptedSlurm(
        {"sacct": reply(stderr="sacct: error: Slurm accounting storage is disabled\n", code=1)}
    )
    assert client.accounting(["44"]) is None


def test_show_job_after_min_job_age_gives_none() -> None:
    """A job Slurm has forgotten (Invalid job id) gives None."""
    client = ScriptedSlurm(
        {"scontrol": reply(stderr="slurm_load_jobs error: Invalid job id specified\n", code=1)}
    )
    assert client.show_job("44") is None


def test_submit_passes_afterany_dependency() -> None:
    """submit asks for --parsable and an afterany dependency on every given job."""
    client = ScriptedSlurm({"sbatch": reply("51\n")})
    assert client.submit(__import__("pathlib").Path("/x.sbatch"), after=["44", "45"]) == "51"
    assert client.log[0] == ["sbatch", "--parsable", "--dependency=afterany:44:45", "/x.sbatch"]


def test_submit_joins_afterany_and_afterok_in_one_dependency() -> None:
    """Both kinds of condition are one --dependency (a second one would replace the first): the
    watch's suite run waits for the previous array and for its checkpoint's conversion to succeed."""
    client = ScriptedSlurm({"sbatch": reply("52\n")})
    client.submit(__import__("pathlib").Path("/x.sbatch"), after=["44"], after_ok=["7"])
    client.submit(__import__("pathlib").Path("/x.sbatch"), after_ok=["7", "8"])
    assert client.log[0] == ["sbatch", "--parsable", "--dependency=afterany:44,afterok:7", "/x.sbatch"]
    assert client.log[1] == ["sbatch", "--parsable", "--dependency=afterok:7:8", "/x.sbatch"]


def test_sbatch_runs_without_the_submitters_array_task_and_restart_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job submitted from inside an array task (the aggregation, a successor) or a requeued job does not
    inherit its submitter's SLURM_ARRAY_* or SLURM_RESTART_COUNT: it reads only what Slurm says of it."""
    for name, value in [
        ("SLURM_ARRAY_JOB_ID", "188"),
        ("SLURM_ARRAY_TASK_ID", "0"),
        ("SLURM_RESTART_COUNT", "4"),
        ("SLURM_JOB_ID", "190"),
        ("KEEP_ME", "1"),
    ]:
        monkeypatch.setenv(name, value)
    client = ScriptedSlurm({"sbatch": reply("189\n")})
    client.submit(__import__("pathlib").Path("/aggregate.sbatch"), after=["188_0"])
    env = client.envs[0]
    assert env is not None and env["KEEP_ME"] == "1"
    assert not {"SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT"} & set(env)


def test_array_ids_cancel_each_array_once() -> None:
    """cancel of a run: one scancel argument per array, not one per task (8,889 characters at 1,000)."""
    from gymslurm.site.slurm import array_ids

    tasks = [f"162_{i}" for i in range(1000)] + ["170_3", "171_9", "180"]
    assert array_ids(tasks) == ["162", "170", "171", "180"]


def test_assoc_and_site_limits_are_read_from_pasted_output() -> None:
    """sacctmgr -n -P show assoc format=MaxSubmitJobs,MaxJobs: the smallest limit set; scontrol's
    MaxArraySize and MaxJobCount, else Slurm's defaults."""
    from gymslurm.site.slurm import parse_assoc_limits, site_limits

    assert parse_assoc_limits("5000|\n|200\n3000|\n") == {"MaxSubmitJobs": 3000, "MaxJobs": 200}
    assert parse_assoc_limits("|\n") == {}
    assert site_limits({"MaxArraySize": "40001", "MaxJobCount": "50000"}) == {
        "MaxArraySize": 40001,
        "MaxJobCount": 50000,
    }
    assert site_limits({}) == {"MaxArraySize": 1001, "MaxJobCount": 10000}


def test_failed_command_quotes_its_output() -> None:
    """A Slurm command that fails raises SlurmError with its command line and stderr."""
    client = SlurmClient()
    with pytest.raises(SlurmError, match="exited 3"):
        client.run(["bash", "-c", "echo boom >&2; exit 3"])


@pytest.mark.parametrize(
    ("wanted", "sbatch_on_path", "expected"),
    [("slurm", False, "slurm"), ("local", True, "local"), ("auto", True, "slurm"), ("auto", False, "local")],
)
def test_backend_name_resolves_auto_by_sbatch_on_path(
    monkeypatch: pytest.MonkeyPatch, wanted: str, sbatch_on_path: bool, expected: str
) -> None:
    """'auto' is Slurm exactly when sbatch is on PATH; an explicit choice is kept."""
    import shutil

    from gymslurm.site.backend import backend_name

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/sbatch" if sbatch_on_path else None)
    assert backend_name(wanted) == expected


# Pasted from the sandbox (Slurm 22.05.8, no accounting): a link whose chain step was SIGKILLed.
SCONTROL_CRASHED = (
    "JobId=11 JobName=gs-bench-20261201T094009Z-s000 UserId=slurmtest(1001) GroupId=slurmtest(1001) "
    "MCS_label=N/A Priority=4294901749 Nice=0 Account=(null) QOS=(null) JobState=FAILED "
    "Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=137:0 "
    "RunTime=00:00:03 TimeLimit=00:05:00 TimeMin=N/A SubmitTime=2026-12-01T09:40:19 "
    "EligibleTime=2026-12-01T09:40:22 AccrueTime=2026-12-01T09:40:22 StartTime=2026-12-01T09:40:22 "
    "EndTime=2026-12-01T09:40:25 Deadline=N/A Partition=debug NodeList=vm BatchHost=vm Power= "
    "KillOInInvalidDependent=Yes\n"
)


def test_end_from_scontrol_without_accounting() -> None:
    """Without sacct, scontrol show job gives a dead link's state, exit code and elapsed seconds."""
    row = end_from_scontrol(parse_scontrol_job(SCONTROL_CRASHED))
    assert (row.job_id, row.state, row.exit_code, row.signal, row.elapsed_s) == ("11", "FAILED", 137, None, 3)
    assert row.start == "2026-12-01T09:40:22"


def test_end_from_scontrol_reads_day_run_times() -> None:
    """A RunTime of D-HH:MM:SS is read in seconds; an unreadable one gives None."""
    assert end_from_scontrol({"JobId": "1", "RunTime": "1-00:00:05"}).elapsed_s == 86405
    assert end_from_scontrol({"JobId": "1", "RunTime": "INVALID"}).elapsed_s is None


INHERITED = {
    "SLURM_JOB_ID": "189",
    "SLURM_ARRAY_JOB_ID": "188",
    "SLURM_ARRAY_TASK_ID": "0",
    "SLURM_RESTART_COUNT": "4",
}


@pytest.mark.parametrize(
    ("says", "job"),
    [
        ({"JobId": "189", "Restarts": "0"}, ("189", 0)),
        ({"JobId": "191", "ArrayJobId": "188", "ArrayTaskId": "3", "Restarts": "1"}, ("188_3", 1)),
    ],
)
def test_a_job_reads_what_slurm_says_of_it_not_inherited_variables(
    says: dict[str, str], job: tuple[str, int]
) -> None:
    """The aggregation (job 189) queued by array task 188_0 is 189, restart 0: scontrol's word wins."""
    from gymslurm.site.backend import current_job

    assert current_job(INHERITED, slurm_says=says) == job


def test_sbatch_never_hands_a_job_its_submitters_array_or_restart_variables() -> None:
    """The environment sbatch exports has no array or restart variable of the submitting job."""
    from gymslurm.site.slurm import submit_environment

    env = submit_environment({**INHERITED, "PATH": "/bin", "SLURM_CONF": "/etc/slurm/slurm.conf"})
    assert env == {"SLURM_JOB_ID": "189", "PATH": "/bin", "SLURM_CONF": "/etc/slurm/slurm.conf"}


def test_a_local_job_is_the_local_queues_job_whatever_slurm_variables_it_inherited() -> None:
    """A local-backend job started from inside a Slurm allocation is still its local id."""
    from gymslurm.site.backend import current_job

    env = {**INHERITED, "GYMSLURM_BACKEND": "local", "GYMSLURM_JOB_ID": "local-7"}
    assert current_job(env) == ("local-7", 0)
