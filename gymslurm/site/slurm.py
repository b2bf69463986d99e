"""The only module that runs ``sbatch``, ``squeue``, ``sacct``, ``scontrol`` and ``scancel``.

Two layers: pure parsers of Slurm 22.05's text output (tested on pasted real output) and
:class:`SlurmClient`, which runs the commands through one seam (:meth:`SlurmClient.run`) and
counts the queries it makes (``bench/status.py`` reports them). We parse ``-P``/``-o`` text, never
the 22.05 JSON: ``squeue --json`` ignores its filters and ``sacct --json`` reports wrong exit codes
(shared/slurm/RECIPE.md). Text we do not recognise raises :class:`SlurmError` quoting it, rather
than being guessed at.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from gymslurm.errors import SlurmError
from gymslurm.site.job_names import RunJobs, squeue_name
from gymslurm.site.scontrol import (
    UNKNOWN_JOB,
    key_values,
    parse_job_answers,
    parse_scontrol_job,
    quote,
    run_time_s,
)

# %i job id (``ARRAY_TASK`` form for array tasks, e.g. 162_7; an array's tasks that have not started
# share one line, ``162_[0-3,7%2]``, which parse_squeue expands), %j name, %T state, %r reason,
# %E dependency, %M time used, %l limit, %S start time.
SQUEUE_FORMAT = "%i|%j|%T|%r|%E|%M|%l|%S"
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")
# An array's pending tasks in one squeue line: ARRAY_[LIST%THROTTLE], LIST items N, N-M or N-M:STEP.
_PENDING_TASKS = re.compile(r"^(\d+)_\[((?:\d+(?:-\d+(?::\d+)?)?,)*\d+(?:-\d+(?::\d+)?)?)(?:%\d+)?\]$")
# squeue cuts an array's task list at 64 bytes unless told otherwise (man squeue, %i): 0 prints it whole.
SQUEUE_ENV = {"SLURM_BITSTR_LEN": "0"}
MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize: task ids 0..1000
MAX_JOB_COUNT = 10000  # Slurm's default MaxJobCount: job records slurmctld holds at once
# What sbatch passes on from the submitting environment (--export=ALL) but Slurm sets only for some
# jobs: a job submitted from inside an array task, or from a requeued job, would read its
# submitter's values as its own identity (issue 19). They are removed from sbatch's environment.
INHERITED_IDENTITY = (
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_STEP",
    "SLURM_RESTART_COUNT",
)
SACCT_FIELDS = "JobID,JobName,State,ExitCode,Start,End,ElapsedRaw,AllocTRES"
_GPU_TRES = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")  # the untyped count (gres/gpu:a100=2 is a part of it)
_SUBMITTED = re.compile(r"^Submitted batch job (\d+)(?: on cluster \S+)?$")
_PARSABLE = re.compile(r"^(\d+)(?:;\S+)?$")
_EXIT = re.compile(r"^(\d+):(\d+)$")
_ACCOUNTING_OFF = "accounting storage is disabled"


@dataclass(slots=True)
class QueueRow:
    """One job as ``squeue`` shows it.

    Slots and not frozen: ``status`` of a 10,000-shard run types ~30,000 of these (every pending array
    task is a line), and a frozen dataclass's ``__init__`` (each field set through
    ``object.__setattr__``) costs twice the rest of a line's parse. Nothing changes a row once parsed.
    """

    job_id: str
    name: str
    state: str
    reason: str
    dependency: str
    time_used: str
    time_limit: str
    start_time: str


@dataclass(frozen=True)
class AccountingRow:
    """One job allocation as ``sacct -X`` shows it."""

    job_id: str
    name: str
    state: str
    exit_code: int | None
    signal: int | None
    start: str
    end: str
    elapsed_s: int | None
    gpus: int = 0  # AllocTRES gres/gpu of this run (0: none allocated, or not started)
    gpu_s: float = 0.0  # GPU-seconds Slurm recorded: gpus × elapsed, summed over every run asked for


_Row = TypeVar("_Row", QueueRow, AccountingRow)


def parse_sbatch(stdout: str) -> str:
    """The job id from ``sbatch`` (plain ``Submitted batch job 42`` or ``--parsable`` ``42[;cluster]``)."""
    text = stdout.strip()
    for pattern in (_SUBMITTED, _PARSABLE):
        match = pattern.match(text)
        if match:
            return match.group(1)
    raise SlurmError(f"sbatch printed something that is not a job id: {quote(text)!r}")


def parse_squeue(stdout: str | Iterable[str]) -> list[QueueRow]:
    """Rows of ``squeue -h -o '{SQUEUE_FORMAT}'`` (its text, or some of its lines)."""
    rows = []
    for line in stdout.splitlines() if isinstance(stdout, str) else stdout:
        fields = line.split("|")
        if " " in line or "\t" in line:  # padded (squeue -o prints none without field widths)
            if not line.strip():
                continue
            fields = [field.strip() for field in fields]
        if len(fields) != 8 or not _JOB_ID.match(fields[0]):
            if len(fields) == 8 and (tasks := pending_task_ids(fields[0])) is not None:
                rows.extend([QueueRow(task, *fields[1:]) for task in tasks])
                continue
            if not line:
                continue
            cut = " (an array's task list cut short: squeue must run with SLURM_BITSTR_LEN=0)"
            raise SlurmError(
                f"unexpected squeue line (format {SQUEUE_FORMAT}): {quote(line)!r}"
                + (cut if "_[" in fields[0] else "")
            )
        rows.append(QueueRow(*fields))
    return rows


def pending_task_ids(job_id: str) -> list[str] | None:
    """The task ids of squeue's line of an array's tasks that have not started (pure):
    ``162_[0-2,7,9-13:2%4]`` → 162_0, 162_1, 162_2, 162_7, 162_9, 162_11, 162_13; None for any other
    id. One line stands for every task ``squeue -r`` would list on its own, with the same fields."""
    match = _PENDING_TASKS.match(job_id)
    if match is None:
        return None
    array, tasks = match.group(1), []
    for part in match.group(2).split(","):
        span, _, step = part.partition(":")
        low, _, high = span.partition("-")
        tasks += [f"{array}_{k}" for k in range(int(low), int(high or low) + 1, int(step or 1))]
    return tasks


def queue_row_of(job_id: str, fields: Mapping[str, str]) -> QueueRow:
    """A job as ``scontrol show job`` says it, in squeue's terms (the state words are the same)."""
    return QueueRow(
        job_id,
        fields.get("JobName", ""),
        (fields.get("JobState") or "UNKNOWN").split()[0],
        fields.get("Reason", ""),
        fields.get("Dependency", ""),
        fields.get("RunTime", ""),
        fields.get("TimeLimit", ""),
        fields.get("StartTime", ""),
    )


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """``75:0`` → (75, None); ``0:9`` → (0, 9): the exit status and the signal that ended the job."""
    match = _EXIT.match(text.strip())
    if not match:
        raise SlurmError(f"unexpected Slurm exit code {text!r}: expected STATUS:SIGNAL such as 75:0")
    code, signal = int(match.group(1)), int(match.group(2))
    return code, (signal or None)


def parse_sacct(stdout: str) -> list[AccountingRow]:
    """Rows of ``sacct -n -P -X -o {SACCT_FIELDS}``; ``CANCELLED by 1000`` becomes ``CANCELLED``."""
    rows = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 8 or not fields[0]:
            raise SlurmError(f"unexpected sacct line (fields {SACCT_FIELDS}): {quote(line)!r}")
        job_id, name, state, exit_text, start, end, elapsed, tres = fields
        code, signal = parse_exit_code(exit_text)
        state_word = state.split()[0] if state.strip() else "UNKNOWN"
        elapsed_s = int(elapsed) if elapsed.isdigit() else None
        gpu = _GPU_TRES.search(tres)
        gpus = int(gpu.group(1)) if gpu else 0
        rows.append(
            AccountingRow(
                job_id,
                name,
                state_word,
                code,
                signal,
                start,
                end,
                elapsed_s,
                gpus,
                float(gpus * (elapsed_s or 0)),
            )
        )
    return rows


def fold_runs(rows: Sequence[AccountingRow]) -> dict[str, AccountingRow]:
    """``sacct -D`` rows (every run of a requeued job, oldest first) by job: the newest run's row,
    its ``gpu_s`` the sum over every run of the job (pure)."""
    folded: dict[str, AccountingRow] = {}
    for row in rows:
        before = folded.get(row.job_id)
        folded[row.job_id] = row if before is None else replace(row, gpu_s=before.gpu_s + row.gpu_s)
    return folded


def parse_config(stdout: str) -> dict[str, str]:
    """``scontrol show config``: its ``Key = Value`` lines (the first of a repeated key wins)."""
    config: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition(" = ")
        key = key.strip()
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key):
            config.setdefault(key, value.strip())
    if "SLURM_VERSION" not in config and "ClusterName" not in config:
        raise SlurmError(f"unexpected 'scontrol show config' output (no SLURM_VERSION): {quote(stdout)!r}")
    return config


def parse_partitions(stdout: str) -> dict[str, dict[str, str]]:
    """``scontrol show partition -o``: one mapping per partition, by name."""
    partitions = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        if not line.startswith("PartitionName="):
            raise SlurmError(f"unexpected 'scontrol show partition -o' line: {quote(line)!r}")
        fields = key_values(line.strip())
        partitions[fields["PartitionName"]] = fields
    return partitions


_ACCOUNTING_TYPE = re.compile(r"^AccountingStorageType\s*=\s*(\S+)\s*$", re.M)


def parse_accounting_storage(config: str) -> bool:
    """Whether ``scontrol show config`` says the cluster keeps job accounting (``sacct`` answers)."""
    match = _ACCOUNTING_TYPE.search(config)
    if match is None:
        raise SlurmError(
            f"no AccountingStorageType line in `scontrol show config` output: {quote(config.strip())!r}"
        )
    return match.group(1) != "accounting_storage/none"


def end_from_scontrol(fields: Mapping[str, str]) -> AccountingRow:
    """How a job ended as ``scontrol show job`` says it (for clusters without accounting)."""
    code, signal = parse_exit_code(fields.get("ExitCode", "0:0"))
    return AccountingRow(
        job_id=fields.get("JobId", ""),
        name=fields.get("JobName", ""),
        state=(fields.get("JobState") or "UNKNOWN").split()[0],
        exit_code=code,
        signal=signal,
        start=fields.get("StartTime", ""),
        end=fields.get("EndTime", ""),
        elapsed_s=run_time_s(fields.get("RunTime", "")),
    )


CLUSTER_COMMANDS = frozenset({"sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "srun"})


def on_cluster(argv: Sequence[str], cluster: str | None) -> list[str]:
    """``argv`` aimed at ``cluster``: ``--clusters=C`` (``-M C``) after a Slurm command's name.

    An option, not ``SLURM_CLUSTERS``: 22.05's ``sacct`` ignores that variable and would answer for
    the default cluster, whose job ids repeat the other cluster's. None: ``argv`` as it is.
    """
    if cluster is None or not argv or os.path.basename(argv[0]) not in CLUSTER_COMMANDS:
        return list(argv)
    return [argv[0], f"--clusters={cluster}", *argv[1:]]


def qualified(cluster: str, job_id: str) -> str:
    """A job id that names its cluster, ``b:123_4``: a run across clusters records these, because
    every cluster counts its job ids from 1 (cluster a's 123 is not cluster b's; pure)."""
    return f"{cluster}:{job_id}"


def split_job_id(job_id: str) -> tuple[str | None, str]:
    """``b:123_4`` -> ("b", "123_4"); ``123_4`` -> (None, "123_4"): the cluster and Slurm's own id (pure)."""
    cluster, sep, raw = job_id.rpartition(":")
    return (cluster, raw) if sep and cluster else (None, job_id)


class SlurmClient:
    """Runs Slurm commands; every call goes through :meth:`run`, which counts it."""

    def __init__(self, env: Mapping[str, str] | None = None, cluster: str | None = None) -> None:
        self.queries = 0
        self.calls: Counter[str] = Counter()  # commands run, by name (squeue, sacct, sbatch, ...)
        self.rows = 0  # rows parsed from squeue, sacct and scontrol answers
        self._env = dict(env) if env is not None else None
        self.cluster = cluster  # every command goes to this cluster (slurm.cluster); None: the default

    def run(
        self,
        argv: Sequence[str],
        check: bool = True,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run one Slurm command (``stdin``: its input); a failure raises SlurmError with its command,
        code and output."""
        self.queries += 1
        self.calls[os.path.basename(argv[0]) if argv else "?"] += 1
        argv = on_cluster(argv, self.cluster)
        done = self.execute(list(argv), dict(env) if env is not None else self._env, stdin)
        if check and done.returncode != 0:
            raise SlurmError(
                f"{' '.join(argv)} exited {done.returncode}\nstdout: {quote(done.stdout)}\n"
                f"stderr: {quote(done.stderr)}"
            )
        return done

    def execute(
        self, argv: list[str], env: dict[str, str] | None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The subprocess seam: run one command as given, its output captured (tests script it here)."""
        try:
            return subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, check=False)
        except OSError as error:
            raise SlurmError(f"cannot run {argv[0]}: {error}; is Slurm installed and on PATH?") from error

    def submit(
        self,
        script: Path,
        after: Sequence[str] = (),
        extra: Sequence[str] = (),
        array: str | None = None,
        comment: str | None = None,
        *,
        after_ok: Sequence[str] = (),
    ) -> str:
        """``sbatch --parsable [--array=...] [--dependency=afterany:...,afterok:...] [--comment=...]
        SCRIPT``: the (array) job id. ``comment``: the intent this job fulfils, found again by
        :meth:`commented`; ``after_ok``: jobs that must complete successfully first (a watch's
        conversion job; if one fails, Slurm keeps this job pending: DependencyNeverSatisfied).

        sbatch runs without :data:`INHERITED_IDENTITY`, so the new job reads only what Slurm says of it.
        """
        argv = ["sbatch", "--parsable", *extra]
        if array is not None:
            argv.append(f"--array={array}")
        if comment is not None:
            argv.append(f"--comment={comment}")
        if depends := dependency(after, after_ok):
            argv.append(f"--dependency={depends}")
        return parse_sbatch(self.run([*argv, str(script)], env=submit_environment(self._env)).stdout)

    def queue_text(self, names: Sequence[str] | None = None) -> str:
        """squeue's text of every job of the current user that it still knows (finished ones for
        MinJobAge), an array's tasks that have not started on one line (not ``-r``'s line per task:
        a held 10,000-shard run is 30 lines, not 30,000; parse_squeue expands them); ``names``: only
        the jobs of these names (``--name``). One call."""
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or ""
        argv = ["squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT]
        if user:
            argv += ["-u", user]
        if names:
            argv.append(f"--name={','.join(names)}")
        return self.run(argv, env={**(os.environ if self._env is None else self._env), **SQUEUE_ENV}).stdout

    def queue(self, jobs: RunJobs | None = None) -> list[QueueRow]:
        """:meth:`queue_text`'s rows; ``jobs``: one run's rows only, asked by name, or (too many names
        to list) the user's lines kept by name before any is typed."""
        names = jobs.squeue_names() if jobs is not None else None
        text = self.queue_text(names)
        if jobs is None or names is not None:
            return self._counted(parse_squeue(text))
        kept = (line for line in text.splitlines() if (name := squeue_name(line)) is None or jobs.keeps(name))
        return self._counted(parse_squeue(kept))

    def jobs(self, job_ids: Sequence[str]) -> list[QueueRow]:
        """These jobs as Slurm shows them (finished ones for MinJobAge), however many the user has
        queued (none asked: no call): one ``scontrol -o`` reading a ``show job ID`` line per id, so
        slurmctld packs each job's record alone (``squeue -j A,B`` makes it pack every record it
        holds: site/scontrol.py). A job Slurm forgot has no row."""
        asked = list(dict.fromkeys(job_ids))
        if not asked:
            return []
        if bad := [job for job in asked if not _JOB_ID.fullmatch(job)]:
            raise SlurmError(f"not Slurm job ids: {bad!r} (expected 123 or 123_4)")
        lines = "".join(f"show job {job}\n" for job in asked)
        done = self.run(["scontrol", "-o"], check=False, stdin=lines)
        found = parse_job_answers(done.stdout, done.stderr, asked)
        return self._counted([queue_row_of(job, found[job]) for job in asked if job in found])

    def commented(self, name: str, comment: str) -> list[str]:
        """The (array) job ids Slurm still knows (for MinJobAge after their end) that were submitted with
        job name ``name`` and ``comment``: one ``squeue --name`` of the run's own jobs, an array one
        line per array (and per started task)."""
        argv = ["squeue", "-h", "-t", "all", f"--name={name}", "-o", "%F|%k"]
        rows = [line.split("|", 1) for line in self.run(argv).stdout.splitlines() if "|" in line]
        self.rows += len(rows)
        return list(dict.fromkeys(job.strip() for job, said in rows if said.strip() == comment))

    def _counted(self, rows: list[_Row]) -> list[_Row]:
        self.rows += len(rows)
        return rows

    def accounting(self, job_ids: Sequence[str], every_run: bool = False) -> list[AccountingRow] | None:
        """``sacct`` rows of these jobs (``every_run``: ``-D``, a row per run of a requeued job, oldest
        first), or None when the cluster keeps no accounting."""
        if not job_ids:
            return []
        argv = ["sacct", "-n", "-P", "-X", *(["-D"] if every_run else []), "-o", SACCT_FIELDS]
        done = self.run([*argv, "-j", ",".join(job_ids)], check=False)
        if _ACCOUNTING_OFF in (done.stderr + done.stdout):
            return None
        if done.returncode != 0:
            raise SlurmError(f"sacct exited {done.returncode}: {quote(done.stderr.strip())}")
        return self._counted(parse_sacct(done.stdout))

    def show_job(self, job_id: str) -> dict[str, str] | None:
        """``scontrol show job -o ID``, or None once Slurm forgot the job (after MinJobAge)."""
        done = self.run(["scontrol", "show", "job", "-o", job_id], check=False)
        if done.returncode != 0:
            if UNKNOWN_JOB in done.stderr:
                return None
            raise SlurmError(f"scontrol show job {job_id} exited {done.returncode}: {quote(done.stderr)}")
        self.rows += 1
        return parse_scontrol_job(done.stdout, job_id)

    def steps(self, job_id: str) -> list[tuple[str, str]]:
        """The steps of a job Slurm still runs, as ``(JOB.STEP, step name)``: one ``squeue -s``."""
        done = self.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j"], check=False)
        if done.returncode != 0:
            if UNKNOWN_JOB in done.stderr:
                return []
            raise SlurmError(f"squeue -s -j {job_id} exited {done.returncode}: {quote(done.stderr.strip())}")
        rows = [tuple(line.split("|", 1)) for line in done.stdout.splitlines() if "|" in line]
        self.rows += len(rows)
        return [(step.strip(), name.strip()) for step, name in rows]

    def kill_step(self, step_id: str) -> None:
        """``scancel --signal=KILL JOB.STEP``: the step's tasks killed now (a stopped one handles no TERM)."""
        self.run(["scancel", "--signal=KILL", step_id], check=False)

    def exclude(self, job_ids: Sequence[str], nodes: Sequence[str]) -> None:
        """``scontrol update JobId=J ExcNodeList=N1,N2`` for each of these pending jobs (one call each;
        a job that started or ended meanwhile is not an error: it is not placed again)."""
        for job in job_ids:
            self.run(["scontrol", "update", f"JobId={job}", f"ExcNodeList={','.join(nodes)}"], check=False)

    def cancel(self, job_ids: Sequence[str]) -> None:
        """``scancel`` these jobs; jobs that already ended are not an error."""
        if job_ids:
            self.run(["scancel", *job_ids], check=False)

    def numeric_id(self, job_id: str) -> str:
        """The job's own numeric id (``srun --jobid`` takes no ``ARRAY_TASK`` form): ``squeue -o %A``."""
        if "_" not in job_id:
            return job_id
        text = self.run(["squeue", "-h", "-j", job_id, "-o", "%A"]).stdout.split()
        if len(text) != 1 or not text[0].isdigit():
            raise SlurmError(f"squeue does not show array task {job_id} running (it printed {text!r})")
        return text[0]

    def submit_limits(self, user: str) -> dict[str, int]:
        """The user's association limits on queued jobs (``sacctmgr``: needs accounting), by name."""
        done = self.run(
            ["sacctmgr", "-n", "-P", "show", "assoc", f"where user={user}", "format=MaxSubmitJobs,MaxJobs"],
            check=False,
        )
        if done.returncode != 0:
            return {}
        return parse_assoc_limits(done.stdout)


def dependency(after: Sequence[str], after_ok: Sequence[str] = ()) -> str:
    """``sbatch --dependency``'s value (pure): ``afterany:A:B,afterok:C``, every condition needed."""
    parts = [
        f"{kind}:{':'.join(jobs)}" for kind, jobs in (("afterany", after), ("afterok", after_ok)) if jobs
    ]
    return ",".join(parts)


def submit_environment(base: Mapping[str, str] | None) -> dict[str, str]:
    """The environment sbatch runs with: ours without :data:`INHERITED_IDENTITY` (pure)."""
    env = dict(os.environ if base is None else base)
    for name in INHERITED_IDENTITY:
        env.pop(name, None)
    return env


def array_ids(job_ids: Sequence[str]) -> list[str]:
    """``scancel`` arguments for these jobs: one ``ARRAY`` per array of task ids (order kept; pure).

    Every job gymslurm submits on Slurm is its own array (or a plain job), so cancelling ``ARRAY``
    cancels exactly the tasks of the run that it holds.
    """
    return list(dict.fromkeys(job.split("_", 1)[0] for job in job_ids))


def parse_assoc_limits(stdout: str) -> dict[str, int]:
    """``MaxSubmitJobs|MaxJobs`` rows of ``sacctmgr -n -P``: the smallest limit set on any row."""
    limits: dict[str, int] = {}
    for line in stdout.splitlines():
        fields = line.strip().split("|")
        for name, value in zip(("MaxSubmitJobs", "MaxJobs"), fields, strict=False):
            if value.strip().isdigit():
                limits[name] = min(int(value), limits.get(name, int(value)))
    return limits


def site_limits(config: Mapping[str, str]) -> dict[str, int]:
    """``MaxArraySize`` and ``MaxJobCount`` of ``scontrol show config`` (Slurm's defaults when absent)."""
    limits = {"MaxArraySize": MAX_ARRAY_SIZE, "MaxJobCount": MAX_JOB_COUNT}
    for name in limits:
        value = config.get(name, "").strip()
        if value.isdigit():
            limits[name] = int(value)
    return limits


def slurm_seconds(text: str | int) -> int:
    """Seconds in a Slurm time: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``."""
    raw = str(text).strip()
    days, _, rest = raw.rpartition("-") if "-" in raw else ("0", "", raw)
    parts = rest.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        raise ValueError(f"{text!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")
    numbers = [int(p) for p in parts]
    if "-" in raw:  # D-HH[:MM[:SS]]
        numbers += [0] * (3 - len(numbers))
        hours, minutes, seconds = numbers
    elif len(numbers) == 3:
        hours, minutes, seconds = numbers
    else:  # MM or MM:SS
        hours, minutes, seconds = 0, numbers[0], numbers[1] if len(numbers) == 2 else 0
    return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
