"""``gymslurm inject RUN SHARD --kind K``: send one fault to a shard's live link, as a user can.

Rehearse on your own cluster what the chain survives, with only what an ordinary user may do:

=============  ===========================================================================
kind           what is sent to the live link's job
=============  ===========================================================================
timeout        ``scancel --signal=USR1 --batch JOB``: the warning Slurm sends before --time
preempt        ``scancel --signal=TERM --full JOB``: what a preemption sends first
cancel         ``scancel JOB``
requeue        ``scontrol requeue JOB``
crash          SIGKILL of the collector inside the job (``srun --jobid=JOB --overlap kill``)
server-crash   SIGKILL of the link's newest Environment Server process
hang           SIGSTOP of the collector (the link then hangs until its time limit)
=============  ===========================================================================

The collector's pid comes from the shard's heartbeat, which the live link writes; a server's from
the ledger's ``server`` records (issue 13).
The fault is recorded in the shard's ledger (an ``injected`` record) once it was delivered, so
``status`` and the final report show which faults a run survived, and never one that was not
sent. On the local backend, signals
go to the processes directly and cancel/requeue are the local queue's.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Sequence
from pathlib import Path

from gymslurm.commands.runs import DEFAULT_RUN_ROOT
from gymslurm.errors import ConfigError, SlurmError, StoreError
from gymslurm.launcher.ledger import FAULTS, Fault, Injected, summarize
from gymslurm.launcher.rundir import RunDir
from gymslurm.site.backend import ALIVE_STATES, Backend, SlurmBackend
from gymslurm.site.slurm import SlurmClient
from gymslurm.store import live

_PROCESS_SIGNAL = {"crash": signal.SIGKILL, "server-crash": signal.SIGKILL, "hang": signal.SIGSTOP}


def live_link(run: RunDir, shard: int, backend: Backend) -> str:
    """The job id of the shard's running link, or a ConfigError saying there is none."""
    state = summarize(run.ledger(shard).read())
    queue = backend.queue()
    jobs = [link.job_id for link in state.open_runs]
    running = [job for job in jobs if job in queue and queue[job].state in ALIVE_STATES]
    if not running:
        raise ConfigError(
            f"shard {shard} of run {run.name} has no running link to inject a fault into; "
            f"'gymslurm status {run.root}' shows its chain"
        )
    return running[-1]


def target_pids(run: RunDir, shard: int, job: str, fault: str) -> list[int]:
    """The pids a process fault goes to: the collector's from the live link's heartbeat (every
    collector of a suite link), a server's from the newest ``server`` record (started or
    restarted) of that job in the ledger."""
    if fault == "server-crash":
        servers = [r for r in summarize(run.ledger(shard).read()).server_processes if r.job_id == job]
        if not servers or servers[-1].pid is None:
            raise ConfigError(f"job {job} started no Environment Server (benchmark servers use url only)")
        return [servers[-1].pid]
    heartbeat = run.heartbeat(shard)
    try:
        beat = live.read_heartbeat(heartbeat)
    except StoreError as error:
        raise ConfigError(f"cannot read the link's heartbeat {heartbeat}: {error}; is it running?") from error
    if beat is None:
        raise ConfigError(f"the link has written no heartbeat {heartbeat} yet; is it running?")
    if beat.job_id != job:
        raise ConfigError(f"the heartbeat {heartbeat} is of job {beat.job_id}, not {job}; try again")
    if beat.collector_pid is None:
        raise ConfigError(f"job {job} has not started its collector yet; try again in a few seconds")
    return [int(pid) for pid in beat.collector_pids] or [int(beat.collector_pid)]


def slurm_argv(fault: str, job: str, pid: int | Sequence[int] | None) -> list[str]:
    """The Slurm command that sends ``fault`` to ``job`` (pure)."""
    if fault == "timeout":
        return ["scancel", "--signal=USR1", "--batch", job]
    if fault == "preempt":
        return ["scancel", "--signal=TERM", "--full", job]
    if fault == "cancel":
        return ["scancel", job]
    if fault == "requeue":
        return ["scontrol", "requeue", job]
    name = _PROCESS_SIGNAL[fault].name.removeprefix("SIG")
    pids = [pid] if isinstance(pid, int) else list(pid or ())
    return [
        "srun",
        f"--jobid={job}",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "kill",
        f"-{name}",
        *map(str, pids),
    ]


def inject(run: RunDir, shard: int, fault: str, backend: Backend) -> str:
    """Send one fault to the shard's live link, then record it; returns what was done, in words.

    A fault is recorded (an ``injected`` record) only once it was delivered: a Slurm command that
    failed, or a signal to a process that is gone, raises and leaves the ledger as it was, so the
    report never lists a fault that was not sent as survived. ``srun --jobid`` takes no array task
    id (``193_0``), so process faults go to the task's own numeric job id (``squeue -o %A``).
    """
    if fault not in FAULTS:
        raise ConfigError(f"unknown fault {fault!r}; one of: {', '.join(FAULTS)}")
    job = live_link(run, shard, backend)
    pids = target_pids(run, shard, job, fault) if fault in _PROCESS_SIGNAL else []
    if backend.name == "slurm":
        client = backend.client if isinstance(backend, SlurmBackend) else SlurmClient()
        slurm_id = backend.raw(job) if isinstance(backend, SlurmBackend) else job  # b:12_3 -> 12_3 on b
        target = client.numeric_id(slurm_id) if fault in _PROCESS_SIGNAL else slurm_id
        argv = slurm_argv(fault, target, pids)
        how = " ".join(argv)
        try:
            client.run(argv)
        except SlurmError as error:
            raise ConfigError(
                f"shard {shard}: {fault} was not delivered to job {job}, nothing recorded: {error}"
            ) from error
    else:
        shown = ", ".join(map(str, pids))
        how = f"local: {fault} of job {job}" + (f" (pid {shown})" if pids else "")
        try:
            _local(fault, job, pids, backend)
        except ProcessLookupError as error:
            raise ConfigError(
                f"shard {shard}: {fault} was not delivered: process {shown} of job {job} is gone ({error}); "
                "nothing recorded"
            ) from error
    kind: Fault = fault  # type: ignore[assignment]
    run.ledger(shard).append(Injected(job_id=job, fault=kind, how=how))
    return f"shard {shard}: {fault} sent to job {job} ({how}); recorded in {run.ledger(shard).path}"


def _local(fault: str, job: str, pids: list[int], backend: Backend) -> None:
    if pids:
        for pid in pids:
            os.kill(pid, _PROCESS_SIGNAL[fault])
    elif fault in ("cancel", "requeue"):
        backend.cancel([job])  # the local queue has no requeue: its successor carries on
    else:
        raise ConfigError(f"the local backend cannot send {fault!r}; use the Slurm backend to rehearse it")


def main(argv: list[str]) -> int:
    """``gymslurm inject``: parse its arguments and run it."""
    from gymslurm.launcher.ledger import FAULTS

    parser = argparse.ArgumentParser(
        prog="gymslurm inject",
        description="Send one fault to a shard's live link (recorded in its ledger); docs/inject.md.",
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("shard", type=int)
    parser.add_argument("--kind", required=True, choices=FAULTS)
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.commands.inject import inject
    from gymslurm.launcher.run_site import run_backend
    from gymslurm.launcher.rundir import resolve_run_or_job

    run = resolve_run_or_job(args.run, Path(args.run_root).resolve())
    print(inject(run, args.shard, args.kind, run_backend(run, args.shard)))
    return 0
