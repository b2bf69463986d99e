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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from gymslurm.errors import SlurmError
from gymslurm.launcher.slurm import AccountingRow, QueueRow, SlurmClient, end_from_scontrol

if TYPE_CHECKING:
    from gymslurm.launcher.rundir import RunDir

# States in which a job still counts as part of a live chain. The held ones (REQUEUE_HOLD,
# SPECIAL_EXIT: requeued and held by RequeueExitHold or ``scontrol requeuehold``; RESV_DEL_HOLD)
# never run again by themselves, but they are queued: ``cancel`` must cancel them and ``status``
# must show them.
LIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
     "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT", "RESV_DEL_HOLD"}
)  # fmt: skip
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

    def queue(self) -> dict[str, QueueRow]:
        """Every job the scheduler still knows, by id: one query."""
        ...

    def accounting(self, job_ids: Sequence[str]) -> dict[str, AccountingRow] | None:
        """Final states and exit codes of these jobs, or None without accounting: one query."""
        ...

    def ended(self, job_id: str) -> AccountingRow | None:
        """How one job ended (state, exit code, elapsed) as far as the scheduler remembers, else None."""
        ...


class SlurmBackend:
    """The Slurm backend: every command goes through :class:`SlurmClient`."""

    name = "slurm"

    def __init__(self, client: SlurmClient | None = None, accounting: bool | None = None) -> None:
        self.client = client or SlurmClient()
        self.accounting_known = accounting  # run.json's word: False = never ask sacct

    @property
    def queries(self) -> int:
        """Slurm commands run so far."""
        return self.client.queries

    def submit(self, script: Path, after: Sequence[str] = ()) -> str:
        """``sbatch --parsable [--dependency=afterany:...] SCRIPT``."""
        return self.client.submit(script, after=after)

    def submit_array(self, script: Path, indices: str, after: Sequence[str] = ()) -> str:
        """``sbatch --parsable --array=INDICES [--dependency=afterany:...] SCRIPT``: the array job's id."""
        return self.client.submit(script, after=after, array=indices)

    def cancel(self, job_ids: Sequence[str]) -> None:
        """``scancel``."""
        self.client.cancel(job_ids)

    def queue(self) -> dict[str, QueueRow]:
        """One ``squeue`` call."""
        return {row.job_id: row for row in self.client.queue()}

    def accounting(self, job_ids: Sequence[str]) -> dict[str, AccountingRow] | None:
        """One ``sacct`` call (None when accounting is disabled, without asking when the run knows)."""
        if self.accounting_known is False:
            return None
        rows = self.client.accounting(list(job_ids))
        return None if rows is None else {row.job_id: row for row in rows}

    def ended(self, job_id: str) -> AccountingRow | None:
        """``sacct`` when accounting exists, else ``scontrol show job`` (until MinJobAge), else None.

        A run that recorded at submit that the cluster keeps no accounting never calls ``sacct``.
        """
        rows = None if self.accounting_known is False else self.client.accounting([job_id])
        if rows is not None:
            return next((row for row in rows if row.job_id == job_id), None)
        fields = self.client.show_job(job_id)
        return None if fields is None else end_from_scontrol(fields)


def backend_name(wanted: str) -> Literal["slurm", "local"]:
    """``slurm`` or ``local`` for a wanted backend: ``auto`` is Slurm when ``sbatch`` is on PATH."""
    if wanted == "auto":
        return "slurm" if shutil.which("sbatch") else "local"
    return "slurm" if wanted == "slurm" else "local"


def choose_backend(
    wanted: str, run_root: Path | None = None, local_dir: Path | None = None, accounting: bool | None = None,
    cluster: str | None = None,
) -> Backend:
    """The backend for ``slurm``, ``local``, or ``auto`` (see :func:`backend_name`); ``cluster``: the
    Slurm cluster its commands go to (``slurm.cluster``; None: the default one)."""
    from gymslurm.launcher.local import LocalBackend

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


def run_backend(run: RunDir) -> Backend:
    """The backend of a submitted run, knowing what its ``run.json`` says of accounting (False: no sacct)
    and on which Slurm cluster the run is (``slurm.cluster``)."""
    info = run.read_info()
    return choose_backend(
        info.backend, local_dir=run.local_dir, accounting=info.accounting, cluster=info.cluster
    )


def this_job(backend: Backend) -> tuple[str, int]:
    """This job's identity (:func:`current_job`), asking Slurm of it on the Slurm backend."""
    own = os.environ.get("SLURM_JOB_ID")
    says = None
    if isinstance(backend, SlurmBackend) and own:
        try:
            says = backend.client.show_job(own)
        except SlurmError:
            says = None  # the variables, then: Slurm could not be asked
    return current_job(slurm_says=says)
