"""The text of ``scontrol show job -o`` (pure): one job's fields, and the answers of one ``scontrol``
reading several ``show job ID`` lines on its stdin (a link asking about its own jobs, issue 32).

Why that way: Slurm 22.05's ``squeue -j A,B`` sends ``REQUEST_JOB_INFO``, for which slurmctld packs
every job record it holds (the client filters), whatever the ids; ``scontrol show job ID`` sends
``REQUEST_JOB_INFO_SINGLE``, which packs that job (an array task: its array's records). One
``scontrol`` process asks each id in turn: one command, one small RPC per id (bench/job_info_rpcs.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gymslurm.errors import SlurmError

UNKNOWN_JOB = "Invalid job id specified"
_PROMPT = "scontrol: "  # printed before each command read from stdin (readline echoes the command)
_NOT_FOUND = re.compile(r"^Job \S+ not found$")  # an array task Slurm no longer has (stdout)
_ASKED = re.compile(r"^show job \S+$")  # readline's echo of a command read


def quote(text: str) -> str:
    """Slurm's output for an error message, cut at 2,000 characters."""
    return text if len(text) < 2000 else text[:2000] + "...[truncated]"


def parse_scontrol_job(stdout: str, job_id: str | None = None) -> dict[str, str]:
    """``scontrol show job -o ID`` as a mapping; a token without ``=`` continues the previous value.

    ``job_id``: the id asked of. An array's own id (``scontrol show job 949``) lists every task of
    the array, one line each, and the task still carrying that id (``JobId=949``, often the last
    task) is one of them: the line whose ``JobId`` (or ``ARRAYJOB_TASK``) is ``job_id`` is the
    answer, never the lines merged (seen on the sandbox: task 949_2 read itself as 949_0).
    """
    text = stdout.strip()
    if not text.startswith("JobId="):
        raise SlurmError(f"unexpected scontrol output (expected 'JobId=...'): {quote(text)!r}")
    lines = [key_values(line.strip()) for line in text.splitlines() if line.strip()]
    if job_id is None or len(lines) == 1:
        return lines[0]
    for fields in lines:
        if job_id in (fields.get("JobId"), f"{fields.get('ArrayJobId')}_{fields.get('ArrayTaskId')}"):
            return fields
    raise SlurmError(f"scontrol show job {job_id} lists no job {job_id}: {quote(text)!r}")


def key_values(text: str) -> dict[str, str]:
    """``Key=Value Key2=Value with spaces`` as a mapping (a token without ``=`` continues the value)."""
    fields: dict[str, str] = {}
    last = ""
    for token in text.split(" "):
        key, sep, value = token.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_:/]*", key):
            fields[key] = value
            last = key
        elif last:
            fields[last] += " " + token
    return fields


def run_time_s(text: str) -> int | None:
    """``RunTime`` of ``scontrol show job`` (``[D-]HH:MM:SS``) in seconds, None when unreadable."""
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or not (days.isdigit() or days == ""):
        return None
    hours, minutes, seconds = (int(p) for p in parts)
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def job_key(fields: dict[str, str]) -> str:
    """The id a job's line answers for: ``ARRAY_TASK`` for one task of an array (split off, or still in
    its array's record, which scontrol prints as that task), else ``JobId``."""
    array, task = fields.get("ArrayJobId"), fields.get("ArrayTaskId", "")
    return f"{array}_{task}" if array and task.isdigit() else fields.get("JobId", "")


def parse_job_answers(stdout: str, stderr: str, asked: Sequence[str]) -> dict[str, dict[str, str]]:
    """The fields of each asked job found by one ``scontrol -o`` reading ``show job ID`` lines, by id.

    A job Slurm no longer has is absent (stderr ``Invalid job id specified``; stdout ``Job 12_3 not
    found`` for a task its array no longer holds). The prompt ``scontrol: `` (and readline's echo of
    the command) is skipped. Any other line, on stdout or stderr, is a SlurmError quoting it: a
    controller that did not answer never reads as jobs gone.
    """
    wanted, found = set(asked), {}
    for raw in stdout.splitlines():
        line = raw
        while line.startswith(_PROMPT):
            line = line[len(_PROMPT) :]
        line = line.strip()
        if not line or _ASKED.match(line) or _NOT_FOUND.match(line):
            continue
        if not line.startswith("JobId="):
            raise SlurmError(f"unexpected scontrol output (expected 'JobId=...'): {quote(line)!r}")
        fields = key_values(line)
        key = job_key(fields)
        if key in wanted or (key := fields.get("JobId", "")) in wanted:
            found[key] = fields
    if any(line.strip() and UNKNOWN_JOB not in line for line in stderr.splitlines()):
        raise SlurmError(f"scontrol show job {' '.join(asked)} failed: {quote(stderr.strip())!r}")
    return found
