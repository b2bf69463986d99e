"""A link asks Slurm about its own jobs by id with one ``scontrol -o`` reading ``show job ID`` lines
(issue 32): slurmctld packs each job's record alone (``REQUEST_JOB_INFO_SINGLE``), where 22.05's
``squeue -j A,B`` packs every record it holds. The answers are read strictly: a job Slurm forgot is
absent; anything else Slurm prints is an error, never jobs gone.
"""

from __future__ import annotations

import pytest

from gymslurm.errors import SlurmError
from gymslurm.site.scontrol import job_key, key_values, parse_job_answers
from gymslurm.site.slurm import SlurmClient, queue_row_of
from tests.unit.scripted_slurm import ScriptedSlurm, reply

# Pasted from the sandbox's Slurm 22.05.8 (cluster b), as slurmtest:
#   printf 'show job 1238_5\nshow job 1238_4\nshow job 99999\nshow job 1239_3\n' | scontrol -M b -o
# 1238: a held 10-task array (task 4 cancelled); 1239: a one-task array; 99999: no such job. The
# prompt and readline's echo of each command come first; the unknown id's error goes to stderr.
TAIL = (
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED "
    "TimeMin=N/A SubmitTime=2026-12-07T13:46:48 EligibleTime=Unknown StartTime=Unknown EndTime=Unknown "
    "Partition=debug NodeList= NumNodes=1 Command=/tmp/probe.sh WorkDir=/tmp StdOut=/dev/null Power= "
)
STDOUT = (
    "scontrol: show job 1238_5\n"
    "JobId=1238 ArrayJobId=1238 ArrayTaskId=5 JobName=probe-x UserId=slurmtest(1001) "
    f"JobState=PENDING Reason=JobHeldUser Dependency=(null) {TAIL}\n"
    "scontrol: show job 1238_4\n"
    "Job 1238_4 not found\n"
    "scontrol: show job 99999\n"
    "scontrol: show job 1239_3\n"
    "JobId=1239 ArrayJobId=1239 ArrayTaskId=3 JobName=probe-y UserId=slurmtest(1001) "
    f"JobState=PENDING Reason=JobHeldUser Dependency=(null) {TAIL}\n"
    "scontrol: \n"
)
STDERR = "slurm_load_jobs error: Invalid job id specified\n"
ASKED = ["1238_5", "1238_4", "99999", "1239_3"]


def test_the_sandboxs_answers_are_read_by_the_id_asked() -> None:
    """A task in its array's record, a one-task array: found; a cancelled task, an unknown id: absent."""
    found = parse_job_answers(STDOUT, STDERR, ASKED)
    assert sorted(found) == ["1238_5", "1239_3"]
    assert found["1238_5"]["JobState"] == "PENDING" and found["1239_3"]["JobName"] == "probe-y"


def test_without_readline_the_prompt_precedes_each_answer() -> None:
    """An scontrol built without readline prints ``scontrol: `` and no echo: the answer follows it."""
    stdout = "".join(
        f"scontrol: {line}\n" for line in STDOUT.splitlines() if line.startswith(("JobId=", "Job "))
    )
    assert sorted(parse_job_answers(stdout + "scontrol: ", STDERR, ASKED)) == ["1238_5", "1239_3"]


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("JobId=1240 ArrayJobId=1238 ArrayTaskId=6 JobState=PENDING", "1238_6"),  # a task split off
        ("JobId=1238 ArrayJobId=1238 ArrayTaskId=7 JobState=PENDING", "1238_7"),  # still in the array
        ("JobId=1238 ArrayJobId=1238 ArrayTaskId=0-9 JobState=PENDING", "1238"),  # the array's record
        ("JobId=77 JobName=gs-r-agg JobState=RUNNING", "77"),  # a plain job
    ],
)
def test_each_line_answers_for_its_task_or_its_job(line: str, key: str) -> None:
    """``ARRAY_TASK`` for one task of an array, split off or not; else the job id."""
    assert job_key(key_values(line)) == key


def test_an_array_asked_by_its_own_id_is_its_record() -> None:
    """Asking ``1238`` (a plain id that is an array): the line carrying that JobId answers."""
    line = "JobId=1238 ArrayJobId=1238 ArrayTaskId=0-9 JobState=PENDING"
    assert parse_job_answers(line, "", ["1238"])["1238"]["ArrayTaskId"] == "0-9"


@pytest.mark.parametrize(
    ("stdout", "stderr", "said"),
    [
        ("", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n", "connect"),
        ("", "scontrol: error: Invalid user for SlurmUser\n", "Invalid user"),
        (STDOUT, STDERR + "slurm_load_jobs error: Socket timed out on send/recv operation\n", "timed out"),
        ("scontrol: show job 5\nsomething else\n", "", "something else"),
    ],
)
def test_any_other_answer_is_an_error_never_jobs_gone(stdout: str, stderr: str, said: str) -> None:
    """A controller that did not answer (or text not recognised) raises, quoting Slurm."""
    with pytest.raises(SlurmError, match=said):
        parse_job_answers(stdout, stderr, ASKED)


def test_a_row_in_squeues_terms() -> None:
    """What the chain reads of a row (its state above all) is what squeue would have said."""
    row = queue_row_of("1238_5", parse_job_answers(STDOUT, STDERR, ASKED)["1238_5"])
    assert (row.job_id, row.name, row.state, row.reason) == ("1238_5", "probe-x", "PENDING", "JobHeldUser")


def test_the_client_asks_every_id_with_one_scontrol_reading_its_stdin() -> None:
    """One command, one ``show job`` line per id (repeats asked once), a row per job Slurm knows."""
    client = ScriptedSlurm({"scontrol": reply(STDOUT, STDERR, code=1)})
    rows = client.jobs([*ASKED, "1238_5"])
    assert client.log == [["scontrol", "-o"]] and client.stdins == ["".join(f"show job {j}\n" for j in ASKED)]
    assert [row.job_id for row in rows] == ["1238_5", "1239_3"] and client.rows == 2


@pytest.mark.parametrize("bad", ["12\nupdate JobId=12 TimeLimit=1", "12\n", "12 34", "a12", "12_", ""])
def test_an_id_that_is_no_job_id_is_refused_before_scontrol_runs(bad: str) -> None:
    """What reaches scontrol's stdin is ``show job`` of a job id, never another command."""
    client = ScriptedSlurm()
    with pytest.raises(SlurmError, match="not Slurm job ids"):
        client.jobs(["12_3", bad])
    assert client.log == []


def test_no_id_asked_runs_nothing() -> None:
    """No job asked: no call."""
    client = SlurmClient()
    assert client.jobs([]) == [] and client.queries == 0
