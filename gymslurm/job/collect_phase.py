"""The link's collect phase: the servers a job runs, then its collector, supervised, then the servers
stopped on every exit path; before it, what a link prepares (earlier links' servers reaped, the first
links a killed submit left, the lookahead, the shard's input)."""

from __future__ import annotations

import socket
from pathlib import Path

from gymslurm.errors import ConfigError, SlurmError, StoreError
from gymslurm.exitcodes import ExitCode
from gymslurm.job import servers as server_mod
from gymslurm.job.collector_process import (
    REVERIFY_COMMAND_LENGTH,
    ProgressWatch,
    adaptive_choice,
    collector_argv,
    overrides_problem,
    reverify_argv,
    run_collector,
)
from gymslurm.job.context import Chain, LinkContext
from gymslurm.job.first_links import complete_queuing
from gymslurm.job.heartbeat import Heartbeat, log
from gymslurm.job.server_watch import Supervisor
from gymslurm.job.stack import start_stack
from gymslurm.launcher.environment import withheld_in_job
from gymslurm.launcher.ledger import ChainState, Ledger, ServerRecord, last_reason
from gymslurm.launcher.rundir import RunDir, ensure_shard_input


def prepare(link: LinkContext, state: ChainState) -> None:
    """Before the collector starts: what earlier links' servers left on this host is reaped; the first
    links a killed submit left unqueued and this chain's lookahead are queued (both tried again later
    when they fail now); the output folder and the shard's input are made. ``link.chain`` gets what
    was queued (read again only when a killed submit's first links were queued here: array.json's
    spare tasks are links of this chain too)."""
    reap_predecessors(state, link.ledger, link.me)
    try:  # a submit killed midway left first links unqueued: the run's first job queues them
        if complete_queuing(link.run, link.backend, link.settings.slurm.lookahead, link.job):
            link.chain = Chain.read(link.run, link.shard)
    except (SlurmError, StoreError, OSError) as error:
        log(f"could not complete the first links a killed submit left: {error}")
    try:
        link.ensure_lookahead(recheck=False)
    except (SlurmError, OSError) as error:  # collect anyway; queuing is tried again after the decision
        log(f"could not queue the next links now: {error}")
    link.output.parent.mkdir(parents=True, exist_ok=True)
    if link.run.read_info().array:
        ensure_shard_input(link.run, link.shard, link.settings.shards)


def collect(
    link: LinkContext, heartbeat: Heartbeat, resubmit: bool
) -> tuple[int | None, int | None, str | None]:
    """Start the stack, run the collector (or the re-grading of ``submit --reverify``) supervised, stop
    the stack on every exit path: the collector's exit code, the signal that killed it, and a note."""
    run, shard, settings, signals, me = link.run, link.shard, link.settings, link.signals, link.me
    ledger, host = link.ledger, socket.gethostname()

    def note(event: str, server: server_mod.RunningServer, cause: str) -> None:
        log(f"server {server.name!r} {event}: {cause}")
        ledger.append(server_record(me, host, event, server, cause))

    started: list[server_mod.RunningServer] = []
    withheld = withheld_in_job(settings)
    try:
        try:
            start_stack(settings.servers, run.root / "logs", shard, started, note=note, withheld=withheld)
        except server_mod.ServerStartError as error:
            code, repeated = server_mod.start_failure_exit(error, last_reason(link.chain.records))
            return code, None, f"server start failed{repeated}: {error}"
        urls = {server.name: server.url for server in started}
        source = run.read_info().reverify_of  # submit --reverify: re-grade that run's answers instead
        watch: ProgressWatch | None = None  # reverify keeps no progress record: each call has a timeout
        if source is None:
            adaptive = adaptive_choice(settings, urls)
            log(adaptive.why)
            argv = collector_argv(settings, run, shard, urls, resubmit, adaptive=adaptive.overrides)
            first = len(settings.collector.command)
            output = run.shard_output(shard, settings.output_stem)
            watch = ProgressWatch(output, settings.slurm.stall_window_s)
        else:
            argv = reverify_argv(settings, run, shard, urls, RunDir(Path(source)))
            first = REVERIFY_COMMAND_LENGTH
        if too_long := overrides_problem(argv[first:]):  # submit checked it
            return ExitCode.REFUSED, None, f"collector not started: {too_long}"
        supervisor = Supervisor(started, None, note, say=log) if any(s.process for s in started) else None
        try:
            env_code, killer = run_collector(
                argv,
                signals,
                settings.collector.env,
                supervisor,
                heartbeat=heartbeat,
                first_override=first,
                withheld=withheld,
                watch=watch,
            )
        except ConfigError as error:  # collector.env names a variable this job does not have
            return ExitCode.RETRY, None, f"collector not started: {error}"
        if watch is not None and watch.reason is not None:
            return (
                ExitCode.RETRY,
                None,
                (
                    f"unresponsive: {watch.reason}; the link stopped the collector (exit {env_code}, counted "
                    "as 1: retryable, the next link starts it afresh)"
                ),
            )
        if supervisor is not None and supervisor.gave_up is not None:
            name = supervisor.gave_up
            limit = next(s.settings.restart_limit for s in started if s.settings.name == name)
            return (
                ExitCode.RETRY,
                None,
                (
                    f"server {name!r} went down more than restart_limit={limit} times; the collector was "
                    f"stopped (exit {env_code}, counted as 1: retryable, the next link starts it afresh)"
                ),
            )
    finally:
        for server in started:  # every exit path: a return, an exception, a signal's unwinding
            server_mod.stop(server)
    return env_code, killer, None


def server_record(
    me: tuple[str, int], host: str, event: str, server: server_mod.RunningServer, cause: str | None
) -> ServerRecord:
    return ServerRecord(
        job_id=me[0],
        restart_count=me[1],
        name=server.name,
        event=event,  # type: ignore[arg-type]
        host=host,
        pid=server.pid,
        create_time=server.create_time or None,
        url=server.url,
        startup_s=round(server.startup_s, 3) if event in ("started", "restarted") else None,
        restarts=server.restarts,
        cause=cause,
        probes=server.probes[-20:],
    )


def reap_predecessors(state: ChainState, ledger: Ledger, me: tuple[str, int]) -> int:
    """Kill what is left on this host of earlier links' servers (proved theirs by pid + create time)."""
    host, reaped = socket.gethostname(), 0
    for record in state.server_processes:
        if (record.job_id, record.restart_count) == me or record.host != host or record.pid is None:
            continue
        if server_mod.reap(record.pid, record.create_time or 0.0):
            reaped += 1
            log(f"reaped server {record.name!r} (pid {record.pid}) left by job {record.job_id}")
            cause = f"left running; reaped by job {me[0]}"
            ledger.append(record.model_copy(update={"event": "reaped", "cause": cause}))
    return reaped
