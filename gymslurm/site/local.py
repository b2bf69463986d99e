"""The local backend: a tiny scheduler that runs the run's sbatch scripts as local processes.

Why: with no Slurm on the machine (or ``--backend local``) the same chains must run with the same
decisions, ledger and status. Rather than a second chain implementation, this backend executes the
rendered sbatch scripts themselves, honouring what the chain relies on: ``afterany`` dependencies,
``--output`` (appended), ``--time`` with ``--signal=B:USR1@N`` sent to the batch shell only, then
TERM to the whole job and KILL after 10 s, and ``scancel``-like cancellation.

Bounded: at most ``slurm.max_running`` jobs run at once (``local/cap``; default: one per core and
per 2 GiB of memory, :func:`default_max_running`); the others wait PENDING like jobs waiting for
resources, so a run of 500 shards on a laptop runs a few chains at a time rather than 1,500 processes at once.

How: each job is a JSON file in ``<run>/local/jobs/``, created by the submitter and from then on
written only by the supervisor (atomically). One supervisor per run holds ``supervisor.lock``; it
is started detached by the first submission and exits when nothing is pending or running.
A submitter writes its job file *before* checking the lock, and an exiting supervisor rescans
*after* releasing it, so a job is never left without a supervisor. A supervisor that died (killed,
or its machine's OOM killer) is replaced by whoever next asks the queue and finds a job pending and
no supervisor holding the lock (``status``, ``submit --wait``, a link asking of its chain): the
pending jobs run, and a queued job no one can run is not shown live. Cancellation is a
``<id>.cancel`` marker the supervisor acts on. Trade-off: 0.2 s polling instead of events, which
is simple and cheap at the scale of a laptop run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import psutil

from gymslurm.site.job_names import RunJobs
from gymslurm.site.slurm import AccountingRow, QueueRow
from gymslurm.store.atomic import publish_bytes
from gymslurm.store.flock import locked, try_lock

TICK_S = 0.2
KILL_WAIT_S = 10.0
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}
_DIRECTIVE = re.compile(r"^#SBATCH\s+--([a-z-]+)(?:=(.*))?$")


@dataclass(frozen=True)
class ScriptOptions:
    """The #SBATCH options the local backend honours."""

    name: str
    output: str
    time_s: int | None
    signal: str | None
    signal_lead_s: int


def script_options(text: str) -> ScriptOptions:
    """Read --job-name, --output, --time and --signal=B:SIG@N from a script's #SBATCH lines."""
    options: dict[str, str] = {}
    for line in text.splitlines():
        match = _DIRECTIVE.match(line.strip())
        if match:
            options[match.group(1)] = (match.group(2) or "").strip()
    from gymslurm.site.slurm import slurm_seconds

    sig, lead = None, 0
    if options.get("signal", "").startswith("B:"):
        sig, _, lead_text = options["signal"][2:].partition("@")
        lead = int(lead_text or 60)
    time_s = slurm_seconds(options["time"]) if "time" in options else None
    return ScriptOptions(
        options.get("job-name", "job"), options.get("output", "local-%j.out"), time_s, sig, lead
    )


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(path)


class LocalBackend:
    """Submit, cancel and query jobs of one run's local queue."""

    name = "local"

    def __init__(self, local_dir: Path, python: str | None = None) -> None:
        self.dir = local_dir
        self.jobs_dir = local_dir / "jobs"
        self.python = python or sys.executable
        self.queries = 0

    def _next_id(self) -> str:
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        with locked(self.dir / "counter") as fd:
            count = int(os.pread(fd, 32, 0).decode() or "0") + 1
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(count).encode(), 0)
        return f"local-{count}"

    def submit(self, script: Path, after: Sequence[str] = (), begin_s: int | None = None) -> str:
        """Queue the script (``begin_s``: not before that many seconds, as ``sbatch --begin=now+N``);
        start the supervisor if none is running."""
        options = script_options(script.read_text())
        job_id = self._next_id()
        job = {
            "id": job_id,
            "script": str(script),
            "after": list(after),
            "state": "PENDING",
            "reason": "Dependency" if after else "None",
            "name": options.name,
            "output": options.output,
            "time_s": options.time_s,
            "signal": options.signal,
            "signal_lead_s": options.signal_lead_s,
            "workdir": os.getcwd(),
            "submitted_at": time.time(),
            "begin_at": time.time() + begin_s if begin_s else None,
            "exit_code": None,
            "signal_code": None,
            "pid": None,
            "started_at": None,
            "ended_at": None,
        }
        _write_json(self.jobs_dir / f"{job_id}.json", job)
        self.ensure_supervisor()
        return job_id

    def limit(self, max_running: int | None) -> None:
        """Record the queue's cap on running jobs (``slurm.max_running``; None: the machine's default)."""
        if max_running is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            publish_bytes(self.dir / "cap", f"{max_running}\n".encode())

    def ensure_supervisor(self) -> bool:
        """Start a detached supervisor unless one holds the lock; False when none could be started."""
        fd = try_lock(self.dir / "supervisor.lock")
        if fd is None:
            return True
        os.close(fd)  # free: no supervisor; start one (a racing second one exits at once)
        try:
            with (self.dir / "supervisor.log").open("ab") as log:
                subprocess.Popen(
                    [self.python, "-m", "gymslurm.site.local", str(self.dir)],
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError:  # no interpreter, no room for a process or its log: nobody runs the queue
            return False
        return True

    def _run_pending(self, rows: dict[str, QueueRow]) -> dict[str, QueueRow]:
        """A job pending and no supervisor holding the lock (it died): start one, so the job runs. When
        none can be started, the pending jobs are shown as what they are, jobs nobody will run
        (:func:`unrun`), never live."""
        if not any(row.state == "PENDING" for row in rows.values()):
            return rows
        try:
            running = self.ensure_supervisor()
        except OSError:  # the lock file cannot be opened (a full disk, a read-only copy): leave the rows
            return rows
        return rows if running else {job: unrun(row) for job, row in rows.items()}

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Leave a cancel marker for the supervisor (it TERMs running jobs, KILLs after 10 s)."""
        for job_id in job_ids:
            if (self.jobs_dir / f"{job_id}.json").exists():
                (self.jobs_dir / f"{job_id}.cancel").touch()
        if job_ids:
            self.ensure_supervisor()

    def jobs(self) -> list[dict[str, Any]]:
        """Every job file of this queue."""
        found = []
        for path in sorted(self.jobs_dir.glob("local-*.json")):
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                found.append(json.loads(path.read_text()))
        return found

    def queue(self, jobs: RunJobs | None = None) -> dict[str, QueueRow]:
        """Every job of the queue as squeue would show it (one query; the queue is one run's: ``jobs``
        changes nothing)."""
        self.queries += 1
        return self._run_pending({job["id"]: _queue_row(job) for job in self.jobs()})

    def job_rows(self, job_ids: Sequence[str]) -> dict[str, QueueRow]:
        """These jobs of the queue (one query reading only their files; none asked: none)."""
        if not job_ids:
            return {}
        self.queries += 1
        rows = {}
        for job_id in dict.fromkeys(job_ids):
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                rows[job_id] = _queue_row(json.loads((self.jobs_dir / f"{job_id}.json").read_text()))
        return self._run_pending(rows)

    def accounting(self, job_ids: Sequence[str], every_run: bool = False) -> dict[str, AccountingRow] | None:
        """Exit codes of ended jobs (the queue keeps them for ever: one query; it records no GPUs)."""
        self.queries += 1
        wanted = set(job_ids)
        rows = {}
        for job in self.jobs():
            if job["id"] in wanted:
                elapsed = (
                    int(job["ended_at"] - job["started_at"])
                    if job["ended_at"] and job["started_at"]
                    else None
                )
                rows[job["id"]] = AccountingRow(
                    job["id"],
                    job["name"],
                    job["state"],
                    job["exit_code"],
                    job["signal_code"],
                    str(job["started_at"]),
                    str(job["ended_at"]),
                    elapsed,
                )
        return rows

    def ended(self, job_id: str) -> AccountingRow | None:
        """The job's row (the local queue never forgets a job)."""
        return (self.accounting([job_id]) or {}).get(job_id)


def default_max_running(cores: int | None = None, memory_bytes: int | None = None) -> int:
    """How many jobs the local queue runs at once when ``slurm.max_running`` is not set: one per core,
    and one per 2 GiB of memory (a link is a collector and its servers), at least one (pure when
    both are given)."""
    cores = cores if cores is not None else os.cpu_count() or 1
    memory = memory_bytes if memory_bytes is not None else psutil.virtual_memory().total
    return max(1, min(cores, memory // (2 * 2**30)))


def queue_cap(local_dir: Path) -> int:
    """The queue's cap on running jobs: ``local/cap`` (``slurm.max_running``, written at submit by
    :meth:`LocalBackend.limit`), else :func:`default_max_running`."""
    with contextlib.suppress(OSError, ValueError):  # none written (or unreadable): the machine's default
        cap = int((local_dir / "cap").read_text().strip())
        if cap >= 1:
            return cap
    return default_max_running()


def _job_number(job: dict[str, Any]) -> int:
    return int(str(job["id"]).rpartition("-")[2] or 0)


class Supervisor:
    """Runs the queue's jobs; one per run (it holds supervisor.lock).

    At most ``cap`` jobs run at once (:func:`queue_cap`); the others wait PENDING (reason
    ``Resources``, as Slurm says of a job waiting for room) and start in submission order.
    """

    def __init__(self, local_dir: Path, cap: int | None = None) -> None:
        self.backend = LocalBackend(local_dir)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.unsaved: dict[str, dict[str, Any]] = {}  # states a full disk kept us from writing
        self.cap = cap if cap is not None else queue_cap(local_dir)

    def tick(self) -> bool:
        """One pass over the queue; True while something is pending or running.

        A state that could not be written (a full disk) is kept here and written again every tick:
        the supervisor never dies of a full disk, and goes on by itself once space is back.
        """
        jobs = {job["id"]: job for job in self.backend.jobs()}
        jobs.update(self.unsaved)
        for job in list(self.unsaved.values()):
            self._save(job)
        busy = False
        running = sum(1 for job in jobs.values() if job["state"] == "RUNNING")
        for job in sorted(jobs.values(), key=_job_number):
            if job["state"] == "PENDING":
                was = job["state"]
                self._maybe_start(job, jobs, room=running < self.cap)
                running += job["state"] == "RUNNING" and was != "RUNNING"
            elif job["state"] == "RUNNING":
                self._watch(job)
                running -= job["state"] != "RUNNING"
            busy = busy or job["state"] in ("PENDING", "RUNNING")
        return busy

    def _save(self, job: dict[str, Any]) -> None:
        try:
            _write_json(self.backend.jobs_dir / f"{job['id']}.json", job)
        except OSError:
            self.unsaved[job["id"]] = job
            return
        self.unsaved.pop(job["id"], None)

    def _cancel_requested(self, job: dict[str, Any]) -> bool:
        return (self.backend.jobs_dir / f"{job['id']}.cancel").exists()

    def _maybe_start(
        self, job: dict[str, Any], jobs: dict[str, dict[str, Any]], *, room: bool = True
    ) -> None:
        if self._cancel_requested(job):
            job.update(state="CANCELLED", reason="None", ended_at=time.time())
            self._save(job)
            return
        if any(jobs.get(dep, {}).get("state", "COMPLETED") not in FINAL for dep in job["after"]):
            return
        if (job.get("begin_at") or 0) > time.time():  # sbatch --begin: it waits, as Slurm's BeginTime
            return
        if not room:  # every slot taken: it waits, as a Slurm job waits for resources
            if job["reason"] != "Resources":
                job["reason"] = "Resources"
                self._save(job)
            return
        log_path = Path(job["workdir"], job["output"].replace("%j", job["id"]))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "GYMSLURM_JOB_ID": job["id"],
            "GYMSLURM_BACKEND": "local",
            "GYMSLURM_RESTART_COUNT": "0",
        }
        try:
            log: IO[bytes] | int = log_path.open("ab")
        except OSError:  # a full disk: the job runs, its output is lost (Slurm's would be too)
            log = subprocess.DEVNULL
        try:
            proc = subprocess.Popen(
                ["bash", job["script"]],
                cwd=job["workdir"],
                env=env,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            if not isinstance(log, int):
                log.close()
        self.procs[job["id"]] = proc
        job.update(
            state="RUNNING",
            reason="None",
            pid=proc.pid,
            started_at=time.time(),
            pid_create_time=_create_time(proc.pid),
        )
        self._save(job)

    def _watch(self, job: dict[str, Any]) -> None:
        proc = self.procs.get(job["id"])
        if proc is None:  # started by a supervisor that died: we cannot collect its status
            if not _alive(job["pid"]):
                job.update(state="NODE_FAIL", reason="None", ended_at=time.time())
                self._save(job)
            return
        code = proc.poll()
        if code is not None:
            self._finish(job, code)
            return
        self._enforce(job, proc)

    def _enforce(self, job: dict[str, Any], proc: subprocess.Popen[bytes]) -> None:
        """Cancel, signal or time out a running job. Its file is written only when this changed the
        job: a tick that changes nothing leaves it alone (it was rewritten five times a second per
        running job, which made every reader that waits for a change, the tests' among them, read
        the whole run again at each poll)."""
        now = time.time()
        elapsed = now - job["started_at"]
        limit = job["time_s"]
        if self._cancel_requested(job) and not job.get("term_at"):
            job.update(term_at=now, ended_by="CANCELLED")
            _signal_group(proc.pid, signal.SIGTERM)
        elif (
            limit is not None
            and job["signal"]
            and not job.get("warned")
            and elapsed >= limit - job["signal_lead_s"]
        ):
            job["warned"] = True
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(getattr(signal, f"SIG{job['signal']}"))  # B: the batch shell only
        elif limit is not None and elapsed >= limit and not job.get("term_at"):
            job.update(term_at=now, ended_by="TIMEOUT")
            _signal_group(proc.pid, signal.SIGTERM)
        else:
            if job.get("term_at") and now - job["term_at"] >= KILL_WAIT_S:
                _signal_group(proc.pid, signal.SIGKILL)
            return
        self._save(job)

    def _finish(self, job: dict[str, Any], code: int) -> None:
        _signal_group(job["pid"], signal.SIGKILL)  # like Slurm: nothing of the job outlives it
        exit_code, sig = (code, None) if code >= 0 else (0, -code)
        state = job.get("ended_by") or ("COMPLETED" if code == 0 else "FAILED")
        job.update(state=state, exit_code=exit_code, signal_code=sig, ended_at=time.time())
        self.procs.pop(job["id"], None)
        self._save(job)


def _queue_row(found: dict[str, Any]) -> QueueRow:
    """One job file as squeue would show it: RUNNING with no such process is a dead job (NODE_FAIL)."""
    job = found
    if job["state"] == "RUNNING" and not _same_process(job.get("pid"), job.get("pid_create_time")):
        job = {**job, "state": "NODE_FAIL", "ended_at": job.get("ended_at") or time.time()}
    used = int((job["ended_at"] or time.time()) - job["started_at"]) if job["started_at"] else 0
    dependency = ":".join(job["after"]) if job["state"] == "PENDING" and job["after"] else "(null)"
    return QueueRow(
        job["id"],
        job["name"],
        job["state"],
        job["reason"],
        dependency,
        f"{used}s",
        str(job["time_s"]),
        str(job["started_at"] or "N/A"),
    )


def unrun(row: QueueRow) -> QueueRow:
    """A pending job of a queue no supervisor runs (none could be started): not live (pure)."""
    if row.state != "PENDING":
        return row
    return replace(row, state="BOOT_FAIL", reason="no supervisor runs the local queue")


def _create_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _same_process(pid: int | None, create_time: float | None) -> bool:
    """The job's batch shell still runs: its pid is alive with the create time recorded at start.

    A job file that says RUNNING while no such process exists (its supervisor died on a full disk,
    or was killed) is a dead job: ``resubmit`` never refuses because of it.
    """
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        return create_time is None or abs(proc.create_time() - create_time) < 1.0
    except psutil.Error:
        return False


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pid: int | None, sig: signal.Signals) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)


def supervise(local_dir: Path) -> int:
    """Hold the lock and run the queue until it is empty (rescanning after letting go of the lock)."""
    supervisor = Supervisor(local_dir)
    while True:
        fd = try_lock(local_dir / "supervisor.lock")
        if fd is None:
            return 0  # another supervisor owns the queue
        idle_since: float | None = None
        while True:
            try:
                busy = supervisor.tick()
            except OSError:  # a full disk (or a file gone meanwhile): look again at the next tick
                busy = True
            if busy:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > 1.0:
                break
            time.sleep(TICK_S)
        os.close(fd)  # let go, then look once more: a job submitted meanwhile needs us
        if not any(j["state"] in ("PENDING", "RUNNING") for j in supervisor.backend.jobs()):
            return 0


if __name__ == "__main__":
    raise SystemExit(supervise(Path(sys.argv[1])))
