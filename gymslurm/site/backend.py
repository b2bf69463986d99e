"""Where jobs run: Slurm, or local processes with the same scripts, chains, ledger and status.

A :class:`Backend` submits a rendered script (optionally after other jobs end: ``afterany``),
cancels jobs, and answers one queue query (and one accounting query) for ``status``. The chain
logic above it does not know which backend runs it: the local backend executes the very same
sbatch scripts with the same signals (USR1 ``signal_lead`` seconds before ``--time``, then TERM,
then KILL) so that ``gymslurm submit demo`` behaves on a laptop as on a cluster.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from gymslurm.errors import SlurmError
from gymslurm.site.job_names import RunJobs
from gymslurm.site.slurm import (
    AccountingRow,
    QueueRow,
    SlurmClient,
    end_from_scontrol,
    fold_runs,
    qualified,
    split_job_id,
)

if TYPE_CHECKING:
    pass

# States in which a job still counts as part of a live chain. The held ones (REQUEUE_HOLD,
# SPECIAL_EXIT: requeued and held by RequeueExitHold or ``scontrol requeuehold``; RESV_DEL_HOLD)
# never run again by themselves, but they are queued: ``cancel`` must cancel them and ``status``
# must show them.
LIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SUSPENDED",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "SPECIAL_EXIT",
        "RESV_DEL_HOLD",
    }
)
HELD_STATES = frozenset({"REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD"})
# A job in one of these states may still be running a link (COMPLETING jobs are being torn down).
ALIVE_STATES = LIVE_STATES - {"COMPLETING", "STAGE_OUT"}


class Backend(Protocol):
    """What the launcher needs from a scheduler."""

    name: str

    @property
    def queries(self) -> int:
        """Scheduler commands run so far."""
        ...

    def submit(self, script: Path, after: Sequence[str] = ()) -> str:
        """Queue ``script``; it starts after every job in ``after`` ended (however it ended)."""
        ...

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel these jobs (ended ones are ignored)."""
        ...

    def queue(self, jobs: RunJobs | None = None) -> dict[str, QueueRow]:
        """Every job the scheduler still knows, by id: one query (the run-wide views: ``status``);
        ``jobs``: only one run's jobs (the other runs' rows are neither asked for nor typed)."""
        ...

    def job_rows(self, job_ids: Sequence[str]) -> dict[str, QueueRow]:
        """These jobs as the queue still shows them, by id: one query that reads only their rows (none
        asked: no query). What a link asks of its own chain, whatever the size of the run."""
        ...

    def accounting(self, job_ids: Sequence[str], every_run: bool = False) -> dict[str, AccountingRow] | None:
        """Final states and exit codes of these jobs, or None without accounting: one query.

        ``every_run``: each row's ``gpu_s`` sums every run of a requeued job (``sacct -D``)."""
        ...

    def ended(self, job_id: str) -> AccountingRow | None:
        """How one job ended (state, exit code, elapsed) as far as the scheduler remembers, else None."""
        ...


class SlurmBackend:
    """The Slurm backend: every command goes through :class:`SlurmClient`.

    ``qualify`` (a run across clusters): every job id it hands out or takes names the client's
    cluster (``b:123_4``, slurm.qualified), because the clusters' ids repeat each other; an id of
    another cluster is refused (Slurm has no dependency, cancel or query across clusters).
    """

    name = "slurm"

    def __init__(
        self, client: SlurmClient | None = None, accounting: bool | None = None, qualify: bool = False
    ) -> None:
        self.client = client or SlurmClient()
        self.accounting_known = accounting  # run.json's word: False = never ask sacct
        if qualify and self.client.cluster is None:
            raise ValueError("qualified job ids need the client's cluster")
        self.qualify = qualify

    @property
    def queries(self) -> int:
        """Slurm commands run so far."""
        return self.client.queries

    def own(self, job_id: str) -> str:
        """The id as this backend hands it out (``C:ID`` when qualified)."""
        return qualified(self.client.cluster, job_id) if self.qualify and self.client.cluster else job_id

    def raw(self, job_id: str) -> str:
        """Slurm's own id of one of this backend's jobs; an id of another cluster is a SlurmError."""
        cluster, raw = split_job_id(job_id)
        if cluster is not None and cluster != self.client.cluster:
            raise SlurmError(
                f"job {job_id} is on cluster {cluster}, not {self.client.cluster}: Slurm has no dependency "
                "or command across clusters outside a federation"
            )
        return raw

    def submit(self, script: Path, after: Sequence[str] = (), begin_s: int | None = None) -> str:
        """``sbatch --parsable [--dependency=afterany:...] [--begin=now+N] SCRIPT``."""
        extra = [f"--begin=now+{begin_s}"] if begin_s else []
        return self.own(self.client.submit(script, after=[self.raw(job) for job in after], extra=extra))

    def submit_array(
        self,
        script: Path,
        indices: str,
        after: Sequence[str] = (),
        comment: str | None = None,
        exclude: Sequence[str] = (),
        *,
        after_ok: Sequence[str] = (),
    ) -> str:
        """``sbatch --parsable --array=INDICES [--dependency=afterany:...,afterok:...] [--comment=C]
        [--exclude=NODES] SCRIPT``: the array job's id."""
        raws = [self.raw(job) for job in after]
        extra = [f"--exclude={','.join(exclude)}"] if exclude else []
        oks = [self.raw(job) for job in after_ok]
        return self.own(
            self.client.submit(script, after=raws, extra=extra, array=indices, comment=comment, after_ok=oks)
        )

    def exclude(self, job_ids: Sequence[str], nodes: Sequence[str]) -> None:
        """Keep these pending jobs off ``nodes`` (``scontrol update ... ExcNodeList``)."""
        self.client.exclude([self.raw(job) for job in job_ids], nodes)

    def commented(self, name: str, comment: str) -> list[str]:
        """The jobs named ``name`` that were submitted with ``comment`` (one ``squeue``): an intent's
        job, when its ``sbatch`` went through though its submitter died before it learned the id."""
        return [self.own(job) for job in self.client.commented(name, comment)]

    def cancel(self, job_ids: Sequence[str]) -> None:
        """``scancel``."""
        self.client.cancel([self.raw(job) for job in job_ids])

    def queue(self, jobs: RunJobs | None = None) -> dict[str, QueueRow]:
        """One ``squeue`` call (``jobs``: of one run's job names)."""
        if not self.qualify:
            return {row.job_id: row for row in self.client.queue(jobs)}
        rows = (replace(row, job_id=self.own(row.job_id)) for row in self.client.queue(jobs))
        return {row.job_id: row for row in rows}

    def job_rows(self, job_ids: Sequence[str]) -> dict[str, QueueRow]:
        """One ``scontrol show job`` command of these jobs (of this cluster: SlurmClient.jobs)."""
        rows = self.client.jobs([self.raw(job) for job in job_ids])
        return {self.own(row.job_id): replace(row, job_id=self.own(row.job_id)) for row in rows}

    def accounting(self, job_ids: Sequence[str], every_run: bool = False) -> dict[str, AccountingRow] | None:
        """One ``sacct`` call (None when accounting is disabled, without asking when the run knows)."""
        if self.accounting_known is False:
            return None
        rows = self.client.accounting([self.raw(job) for job in job_ids], every_run=every_run)
        if rows is None:
            return None
        return fold_runs([replace(row, job_id=self.own(row.job_id)) for row in rows])

    def ended(self, job_id: str) -> AccountingRow | None:
        """How a job ended: ``sacct`` when accounting exists, else (or when ``sacct`` fails or does not
        have the job's end yet) ``scontrol show job`` (until MinJobAge), else None.

        A run that recorded at submit that the cluster keeps no accounting never calls ``sacct``.
        ``sacct`` fails when slurmdbd cannot reach its database (seen on the sandbox: "Unable to
        connect to database" from a job while mariadb was down), and slurmctld hands a job's end
        to slurmdbd asynchronously, so a successor asking right after its predecessor ended may
        read it still RUNNING there: slurmctld, which ended the job, knows better. When neither
        knows the job, the ``sacct`` failure is raised (the caller cannot tell how the job ended).
        """
        raw = self.raw(job_id)
        failure: SlurmError | None = None
        row = None
        if self.accounting_known is not False:
            try:
                rows = self.client.accounting([raw])
            except SlurmError as error:
                failure, rows = error, []
            if rows is None:  # the cluster keeps no accounting
                rows = []
            row = next((r for r in rows if r.job_id == raw), None)
            if row is not None and row.state not in LIVE_STATES:
                return replace(row, job_id=self.own(row.job_id))
        fields = self.client.show_job(raw)
        if fields is not None:
            row = end_from_scontrol(fields)
        elif failure is not None and row is None:
            raise failure
        return None if row is None else replace(row, job_id=self.own(row.job_id))


class ClusterSetBackend:
    """The login side of a run across clusters: one :class:`SlurmBackend` (qualified ids) per cluster.

    ``queue`` is one ``squeue`` per cluster, ``accounting`` one ``sacct`` per cluster that has jobs
    asked of it; ``cancel`` and ``ended`` go to each id's own cluster. It submits nothing: what
    queues a job names its cluster (:meth:`on`).
    """

    name = "slurm"

    def __init__(self, backends: Mapping[str, SlurmBackend]) -> None:
        self.backends = dict(backends)

    @property
    def queries(self) -> int:
        """Slurm commands run so far, on every cluster."""
        return sum(backend.queries for backend in self.backends.values())

    def on(self, cluster: str) -> SlurmBackend:
        """The backend of one cluster of the run."""
        return self.backends[cluster]

    def _by_cluster(self, job_ids: Sequence[str]) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for job in job_ids:
            cluster, _ = split_job_id(job)
            if cluster not in self.backends:
                raise SlurmError(f"job {job} names no cluster of this run ({', '.join(self.backends)})")
            groups.setdefault(cluster, []).append(job)
        return groups

    def submit(self, script: Path, after: Sequence[str] = ()) -> str:
        """Refused: a job of a run across clusters is queued on a named cluster (:meth:`on`)."""
        raise SlurmError(f"a run across clusters queues {script.name} on a named cluster, not on all of them")

    def cancel(self, job_ids: Sequence[str]) -> None:
        """One ``scancel`` per cluster that holds some of these jobs."""
        for cluster, jobs in self._by_cluster(job_ids).items():
            self.backends[cluster].cancel(jobs)

    def queue(self, jobs: RunJobs | None = None) -> dict[str, QueueRow]:
        """One ``squeue`` per cluster (the ids name their cluster, so none collide)."""
        merged: dict[str, QueueRow] = {}
        for backend in self.backends.values():
            merged |= backend.queue(jobs)
        return merged

    def job_rows(self, job_ids: Sequence[str]) -> dict[str, QueueRow]:
        """One ``scontrol show job`` command per cluster that holds some of these jobs."""
        merged: dict[str, QueueRow] = {}
        for cluster, jobs in self._by_cluster(job_ids).items():
            merged |= self.backends[cluster].job_rows(jobs)
        return merged

    def accounting(self, job_ids: Sequence[str], every_run: bool = False) -> dict[str, AccountingRow] | None:
        """One ``sacct`` per cluster asked; None when no cluster asked keeps accounting."""
        groups = self._by_cluster(job_ids).items()
        answers = [self.backends[c].accounting(jobs, every_run=every_run) for c, jobs in groups]
        if answers and all(answer is None for answer in answers):
            return None
        return {job: row for answer in answers if answer for job, row in answer.items()}

    def ended(self, job_id: str) -> AccountingRow | None:
        """How one job ended, asked of its own cluster."""
        (cluster,) = self._by_cluster([job_id])
        return self.backends[cluster].ended(job_id)


def job_states(backend: Backend, job_ids: Sequence[str]) -> dict[str, str]:
    """Each of these jobs' state as Slurm knows it now, by id: one ``scontrol show job`` command
    (slurmctld: live jobs and those ended less than MinJobAge ago), then ``sacct`` only for the ones
    slurmctld forgot (never when the run knows the cluster keeps no accounting). A job neither knows
    is left out."""
    states = {job: row.state for job, row in backend.job_rows(job_ids).items()}
    forgotten = [job for job in job_ids if job not in states]
    rows = backend.accounting(forgotten) if forgotten else None
    return {**states, **{job: row.state for job, row in (rows or {}).items() if job in forgotten}}


def scheduler_use(backend: Backend) -> str:
    """What this process asked of the scheduler, for a job's log: ``scheduler calls: 4 (scontrol 3,
    sbatch 1), rows read: 5`` (the local backend counts queries only)."""
    clients = (
        [backend.client]
        if isinstance(backend, SlurmBackend)
        else [b.client for b in backend.backends.values()]
        if isinstance(backend, ClusterSetBackend)
        else []
    )
    if not clients:
        return f"scheduler queries: {backend.queries}"
    calls = sum((client.calls for client in clients), Counter[str]())
    rows = sum(client.rows for client in clients)
    by_command = ", ".join(f"{name} {n}" for name, n in sorted(calls.items()))
    return f"scheduler calls: {sum(calls.values())} ({by_command or 'none'}), rows read: {rows}"


def backend_name(wanted: str) -> Literal["slurm", "local"]:
    """``slurm`` or ``local`` for a wanted backend: ``auto`` is Slurm when ``sbatch`` is on PATH."""
    if wanted == "auto":
        return "slurm" if shutil.which("sbatch") else "local"
    return "slurm" if wanted == "slurm" else "local"


def choose_backend(
    wanted: str,
    run_root: Path | None = None,
    local_dir: Path | None = None,
    accounting: bool | None = None,
    cluster: str | None = None,
) -> Backend:
    """The backend for ``slurm``, ``local``, or ``auto`` (see :func:`backend_name`); ``cluster``: the
    Slurm cluster its commands go to (``slurm.cluster``; None: the default one)."""
    from gymslurm.site.local import LocalBackend

    if backend_name(wanted) == "slurm":
        return SlurmBackend(SlurmClient(cluster=cluster), accounting=accounting)
    if local_dir is None:
        raise ValueError("the local backend needs the run's local/ folder")
    return LocalBackend(local_dir)


def current_job(
    environ: Mapping[str, str] | None = None, slurm_says: Mapping[str, str] | None = None
) -> tuple[str, int]:
    """This job's id and restart count, as the scheduler says of it.

    ``slurm_says``: ``scontrol show job $SLURM_JOB_ID`` of this job (``JobId``, ``ArrayJobId``,
    ``ArrayTaskId``, ``Restarts``), read first: Slurm sets ``SLURM_JOB_ID`` for every job but the
    array variables only for array tasks and ``SLURM_RESTART_COUNT`` only after a requeue, so
    variables inherited from a submitting job would lie. Without it (scontrol could not be
    asked), the variables. An array task is ``ARRAYJOB_TASK`` (``162_7``), the id ``sbatch``,
    ``squeue -r``, ``scancel`` and ``--dependency`` all use for it. The local backend's jobs have
    ``GYMSLURM_JOB_ID`` and ``GYMSLURM_RESTART_COUNT``, set by its supervisor.
    """
    env = os.environ if environ is None else environ
    if env.get("GYMSLURM_BACKEND") == "local" and env.get("GYMSLURM_JOB_ID"):
        return env["GYMSLURM_JOB_ID"], int(env.get("GYMSLURM_RESTART_COUNT") or "0")
    if slurm_says and slurm_says.get("JobId"):
        array, task = slurm_says.get("ArrayJobId"), slurm_says.get("ArrayTaskId", "")
        job = f"{array}_{task}" if array and task.isdigit() else slurm_says["JobId"]
        restarts = slurm_says.get("Restarts", "0")
        return job, int(restarts) if restarts.isdigit() else 0
    array_job, array_task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    job_id = (
        f"{array_job}_{array_task}"
        if array_job and array_task
        else env.get("SLURM_JOB_ID") or env.get("GYMSLURM_JOB_ID") or f"pid-{os.getpid()}"
    )
    restarts = env.get("SLURM_RESTART_COUNT") or env.get("GYMSLURM_RESTART_COUNT") or "0"
    return job_id, int(restarts)


def this_job(backend: Backend) -> tuple[str, int]:
    """This job's identity (:func:`current_job`), asking Slurm of it on the Slurm backend."""
    own = os.environ.get("SLURM_JOB_ID")
    says = None
    if isinstance(backend, SlurmBackend) and own:
        try:
            says = backend.client.show_job(own)
        except SlurmError:
            says = None  # the variables, then: Slurm could not be asked
    job, restarts = current_job(slurm_says=says)
    return (backend.own(job) if isinstance(backend, SlurmBackend) else job), restarts
