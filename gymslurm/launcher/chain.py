"""One link of a chain, run inside a job: ``gymslurm chain-step --run-dir RUN --shard N``.

Order of work, chosen so that a job killed at any moment still leaves the chain able to go on:

0. take the shard's link lock (``shards/NNN/link.lock``, held for the whole link). A link that
   finds it taken, or finds another run of the chain whose job is still alive in the queue (a
   hand rerun of the script, a duplicate Slurm started), logs why and exits 0 at once: no
   decision, no successor, nothing spent. A job that is still running is never accounted for;
1. account for runs that started but never wrote a decision (the predecessor was SIGKILLed, its
   node failed, it crashed, or this very job was requeued): one ``decision`` record each,
   ``accounted_by`` us, from the facts :func:`gymslurm.launcher.decide.dead_run_end` weighs
   (Slurm's state, exit code and elapsed time, the run's start record, whether its collector
   saved new outcomes);
2. if the chain is already finished (a stop, a cancel), do nothing and exit 0;
3. record our start, then make sure a successor is queued (``afterany`` on us) *before* running
   anything, so that however this job ends, the next link starts after it. A requeued run of the
   same job finds its successor still pending (Slurm does not release ``afterany`` for a requeued
   job) and submits none: Slurm's requeue and the chain never both restart the same work;
4. reap what is left on this host of a predecessor's servers (pid + create time in the ledger),
   start configured servers (each recorded in the ledger with its pid, create time, start-up
   time and probes), run the collector with resume, forwarding USR1/TERM/INT to it once each,
   writing a heartbeat every 15 s, and supervising the servers (``supervise.py``: probes,
   restarts in place, the evidence channel that keeps a server's death off the rollouts' budget);
5. stop the servers (whole process trees, on every exit path), decide (``decide.py``), write the
   decision;
6. chain goes on: check the successor is still queued (resubmit it if someone cancelled it);
   chain stops: cancel the successor, then submit the aggregation job if every shard's chain is
   finished — exactly once, under a lock, even when shards end in the same second.

The job exits with :func:`gymslurm.launcher.decide.job_exit_code` so Slurm's state agrees with the
ledger (76 → FAILED). ``--aggregate`` runs the aggregation step instead of a link.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import psutil

from gymslurm.errors import SlurmError, StoreError
from gymslurm.exitcodes import ExitCode
from gymslurm.identity import redact_text
from gymslurm.launcher import servers as server_mod
from gymslurm.launcher.backend import LIVE_STATES, Backend
from gymslurm.launcher.decide import (
    Budgets,
    DeadRun,
    Decision,
    JobEnd,
    Limits,
    Progress,
    Verdict,
    dead_run_end,
    decide,
    job_exit_code,
)
from gymslurm.launcher.ledger import (
    BudgetsRecord,
    ChainState,
    DecisionRecord,
    Ledger,
    ServerRecord,
    Started,
    Submitted,
    summarize,
    utc_now,
)
from gymslurm.launcher.rundir import SECRETS_ENV, RunDir, ensure_shard_input
from gymslurm.launcher.settings import SERVER_REFERENCE, BenchmarkSettings
from gymslurm.launcher.supervise import Supervisor
from gymslurm.settings import SECRET_OVERRIDES_ENV
from gymslurm.store import live
from gymslurm.store.atomic import open_run_file
from gymslurm.store.paths import RunPaths

if TYPE_CHECKING:
    from gymslurm.coverage import Coverage
from gymslurm.supervision import SUPERVISION_FD_ENV

HEARTBEAT_S = live.HEARTBEAT_S
FORWARDED = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
# A job in one of these states may still be running a link (COMPLETING jobs are being torn down).
ALIVE_STATES = LIVE_STATES - {"COMPLETING", "STAGE_OUT"}


def log(message: str) -> None:
    """One timestamped line on the job's output."""
    print(f"[gymslurm chain-step {utc_now()}] {redact_text(message)}", file=sys.stderr, flush=True)


def saved_coverage(output: Path) -> Coverage | None:
    """The collector's coverage of ``output``, read through the store; None when none is usable.

    An unreadable or foreign-version file is said on the job's output and treated as no coverage
    (no evidence of progress), as a missing one is: the chain never stops on it.
    """
    from gymslurm.store.store import read_coverage  # at the link's end: keeps chain-step's start fast

    try:
        return read_coverage(RunPaths.for_output(output))
    except StoreError as error:
        log(f"no usable coverage: {error}")
        return None


def read_progress(output: Path) -> Progress | None:
    """The progress counts of the collector's coverage file, or None when it has none yet."""
    coverage = saved_coverage(output)
    if coverage is None:
        return None
    return Progress(
        successful=coverage.successful, failed=coverage.failed,
        intentionally_omitted=coverage.intentionally_omitted,
        progress_outcomes_recorded=coverage.progress_outcomes_recorded, written_at=coverage.written_at,
    )  # fmt: skip


LEDGER_COVERAGE_KEYS = ("expected", "successful", "failed", "intentionally_omitted", "retryable", "complete")


def coverage_summary(output: Path) -> dict[str, int | bool] | None:
    """The coverage fields the ledger keeps (for status without reading the collector's files)."""
    coverage = saved_coverage(output)
    if coverage is None:
        return None
    fields = coverage.model_dump()
    return {key: fields[key] for key in LEDGER_COVERAGE_KEYS}


def read_resubmit_offset(output: Path) -> str | None:
    """The failure-line count of the collector's ``<stem>_resubmit_offset`` (what the ledger keeps), if any.

    Parsed by the store's one reader; a malformed file is said on the job's output and kept as None.
    """
    from gymslurm.store.store import read_resubmit_offset as store_resubmit_offset

    paths = RunPaths.for_output(output)
    if not paths.resubmit_offset.exists():
        return None
    try:
        failures, _ = store_resubmit_offset(paths)
    except StoreError as error:
        log(f"unreadable resubmit offset: {error}")
        return None
    return str(failures)


def _address(url: str, part: str) -> str:
    parts = urlsplit(url)
    return {"url": url, "host": parts.hostname or "", "port": str(parts.port or "")}[part]


def collector_argv(
    settings: BenchmarkSettings, run: RunDir, shard: int, urls: dict[str, str], resubmit: bool
) -> list[str]:
    """The collector command of one link: resume, require completion, the shard's files, servers."""
    argv = [
        *settings.collector.command,
        f"+input_jsonl_fpath={run.shard_input(shard)}",
        f"+output_jsonl_fpath={run.shard_output(shard, settings.output_stem)}",
        "+resume_from_cache=true",
        "+require_complete=true",
    ]
    argv += [f"{s.collector_override}={urls[s.name]}" for s in settings.servers if s.collector_override]
    argv += [
        SERVER_REFERENCE.sub(lambda m: _address(urls[m.group(1)], m.group(2)), o)
        for o in settings.collector.overrides
    ]
    if resubmit:
        argv.append(settings.collector.resubmit_override)
    return argv


@dataclass
class Signals:
    """Signals this step received, forwarded once each to the current child."""

    received: list[int] = field(default_factory=list)
    child: subprocess.Popen[bytes] | None = None
    supervisor: Supervisor | None = None

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        """Remember the signal and forward it to the child the first time it arrives."""
        first = signum not in self.received
        self.received.append(signum)
        if self.supervisor is not None:
            self.supervisor.stop_requested()
        if first and self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(signum)

    def install(self) -> None:
        """Handle USR1, TERM and INT."""
        for signum in FORWARDED:
            signal.signal(signum, self.handle)

    @property
    def names(self) -> str:
        """The received signals' names."""
        return ",".join(dict.fromkeys(signal.Signals(s).name for s in self.received))


class Heartbeat:
    """Replaces the shard's heartbeat file every :data:`HEARTBEAT_S` seconds while a link runs.

    The file (``store/live.py``, version 1) names the job, the run's start, this process and its
    host, and the interval, so ``status`` can call a RUNNING link whose beats stopped UNRESPONSIVE.
    """

    def __init__(
        self, path: Path, job_id: str, restart: int, start: str, interval_s: float = HEARTBEAT_S
    ) -> None:
        self.path, self.stop_event, self.interval_s = path, threading.Event(), interval_s
        self.payload = {"job_id": job_id, "restart_count": restart, "start": start}
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def publish(self, **pids: object) -> None:
        """Add the pid of the link's collector (``collector_pid``) and beat now.

        ``gymslurm inject`` reads it to send a fault to the collector of this link (servers' pids
        are in the ledger's ``server`` records).
        """
        self.payload.update(pids)
        self.beat()

    def beat(self) -> None:
        """Write one heartbeat now."""
        record = live.Heartbeat(
            **self.payload, at=utc_now(), epoch=time.time(), interval_s=self.interval_s,  # type: ignore[arg-type]
            pid=os.getpid(), host=socket.gethostname(),
        )  # fmt: skip
        with contextlib.suppress(StoreError):
            live.write_heartbeat(self.path, record)

    def _loop(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            self.beat()

    def __enter__(self) -> Heartbeat:
        self.beat()
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop_event.set()
        self.beat()


def _seconds_between(start: str | None, end: str | None) -> float:
    if not start or not end:
        return 0.0
    try:
        return max(0.0, (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())
    except ValueError:
        return 0.0


def _limits(settings: BenchmarkSettings) -> Limits:
    slurm = settings.slurm
    return Limits(slurm.infra_retry_limit, slurm.max_walltime_s, slurm.max_links_without_progress)


def _record(
    ledger: Ledger, run: Started, end: JobEnd, before: Budgets, verdict: Verdict, **extra: object
) -> DecisionRecord:
    record = DecisionRecord(
        job_id=run.job_id, restart_count=run.restart_count, start=run.at, end=utc_now(),
        elapsed_s=end.elapsed_s, slurm_state=end.slurm_state, exit_code=end.exit_code,
        decision=verdict.decision, reason=verdict.reason,
        budgets_before=BudgetsRecord.of(before), budgets_after=BudgetsRecord.of(verdict.budgets_after),
        **extra,  # type: ignore[arg-type]
    )  # fmt: skip
    ledger.append(record)
    return record


def saved_bytes(output: Path) -> int:
    """The size of the shard's outcome files now (see :func:`gymslurm.store.store.saved_outcome_bytes`)."""
    from gymslurm.store.store import saved_outcome_bytes  # imported late: keeps chain-step's start fast

    return saved_outcome_bytes(RunPaths.for_output(output))


def dead_run_facts(run: Started, me: tuple[str, int], backend: Backend, output: Path) -> DeadRun:
    """What is known of a run that never wrote its decision: Slurm's word, its start, its saves."""
    since = _seconds_between(run.at, utc_now())
    saved = None if run.saved_bytes is None else saved_bytes(output) > run.saved_bytes
    if run.job_id == me[0]:  # an earlier run of this very job: Slurm requeued it
        return DeadRun("REQUEUED", since, saved_outcomes=saved)
    try:
        row = backend.ended(run.job_id)
    except Exception as error:  # a status query must not stop the chain from accounting
        log(f"could not ask the scheduler about job {run.job_id}: {error}")
        return DeadRun("UNKNOWN", since, saved_outcomes=saved)
    if row is None:
        return DeadRun("VANISHED", since, saved_outcomes=saved)
    return DeadRun(row.state, since, row.exit_code, row.signal, row.elapsed_s, saved)


def other_live_link(state: ChainState, me: tuple[str, int], backend: Backend) -> str | None:
    """The job of another started run of this chain that the queue still shows alive, else None."""
    others = [run.job_id for run in state.open_runs if run.job_id != me[0]]
    if not others:
        return None
    try:
        queue = backend.queue()
    except Exception as error:  # the link lock was free: the runs are very likely dead
        log(f"could not ask the scheduler whether jobs {' '.join(others)} still run: {error}")
        return None
    return next((job for job in others if job in queue and queue[job].state in ALIVE_STATES), None)


def account_for_dead_runs(
    state: ChainState,
    ledger: Ledger,
    me: tuple[str, int],
    backend: Backend,
    *,
    output: Path,
    limits: Limits,
) -> ChainState:
    """Write a decision for every run that started but never wrote one (except this run)."""
    for run in list(state.open_runs):
        if (run.job_id, run.restart_count) == me:
            continue
        end = dead_run_end(dead_run_facts(run, me, backend, output))
        before = state.budgets
        verdict = decide(end, before, limits)
        log(f"accounting for job {run.job_id} run {run.restart_count}: {verdict.decision} ({verdict.reason})")
        _record(ledger, run, end, before, verdict, accounted_by=me[0])
        state = summarize(ledger.read())
    return state


def _live(job_id: str | None, backend: Backend) -> bool:
    if job_id is None:
        return False
    row = backend.queue().get(job_id)
    return row is not None and row.state in LIVE_STATES


def submit_link(run: RunDir, shard: int, backend: Backend, after: list[str]) -> str:
    """Queue a link of ``shard``: a one-task array of ``scripts/links.sbatch`` in an array run."""
    from gymslurm.launcher.backend import SlurmBackend

    if isinstance(backend, SlurmBackend) and run.read_info().array:
        return f"{backend.submit_array(run.links_script, str(shard), after=after)}_{shard}"
    return backend.submit(run.script(shard), after=after)


def ensure_successor(run: RunDir, shard: int, ledger: Ledger, me: str, backend: Backend) -> str:
    """The queued link that follows this job, submitting one if there is none."""
    existing = summarize(ledger.read()).successor_of.get(me)
    if existing and _live(existing, backend):
        return existing
    successor = submit_link(run, shard, backend, after=[me])
    ledger.append(Submitted(job_id=successor, after=me, by=me))
    log(f"successor {successor} queued after {me}")
    if summarize(ledger.read()).cancelled:  # cancel ran meanwhile (it looks again after recording)
        backend.cancel([successor])
        log(f"the run was cancelled meanwhile: cancelled {successor} again")
    return successor


def split_secret_arguments(argv: list[str], first_override: int) -> tuple[list[str], list[str]]:
    """(the command line, the overrides that carry a credential): the latter go in the environment.

    A command line is readable by every user of the node (``ps``, ``/proc/*/cmdline``); an override
    that the one redaction rule would change (``+policy_api_key=V``, a URL with a password...) is
    passed in ``GYMSLURM_COLLECT_OVERRIDES`` instead, which the collector appends to its overrides.
    Pure.
    """
    public = argv[:first_override]
    secret: list[str] = []
    for item in argv[first_override:]:
        (secret if redact_text(item) != item else public).append(item)
    return public, secret


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This job's environment for a child process, without the benchmark's secrets bundle.

    Each process gets only its own secrets: the collector its overrides and ``collector.env``, each
    server its ``env`` (already merged back into the settings), never ``GYMSLURM_SECRETS``.
    """
    env = {key: value for key, value in os.environ.items() if key not in (SECRETS_ENV, SECRET_OVERRIDES_ENV)}
    return {**env, **(extra or {})}


def run_collector(
    argv: list[str],
    signals: Signals,
    env: dict[str, str] | None = None,
    supervisor: Supervisor | None = None,
    *,
    heartbeat: Heartbeat | None = None,
    first_override: int | None = None,
) -> tuple[int | None, int | None]:
    """Run the collector; returns (exit code, signal that killed it when we had not forwarded one).

    With a ``supervisor``, the collector inherits the read end of the supervision channel and
    this thread runs a probe round every ``interval_s`` until the collector exits.
    """
    if signals.received:
        log(f"received {signals.names} before the collector started; not starting it")
        return None, None
    public, secret = split_secret_arguments(argv, len(argv) if first_override is None else first_override)
    hidden = f" (+{len(secret)} override(s) with credentials, in {SECRET_OVERRIDES_ENV})" if secret else ""
    log("collector: " + " ".join(public) + hidden)
    extra = {**(env or {}), **({SECRET_OVERRIDES_ENV: json.dumps(secret)} if secret else {})}
    child_env, read_fd = child_environment(extra), None
    pass_fds: tuple[int, ...] = ()
    if supervisor is not None:
        read_fd, supervisor.write_fd = os.pipe()
        child_env[SUPERVISION_FD_ENV] = str(read_fd)
        pass_fds = (read_fd,)
        supervisor.begin()
    child = subprocess.Popen(
        public, stdin=subprocess.DEVNULL, env=child_env, pass_fds=pass_fds,
        preexec_fn=server_mod.stop_with_parent,  # noqa: PLW1509  a collector never outlives its link
    )  # fmt: skip
    if read_fd is not None:
        os.close(read_fd)
    signals.child, signals.supervisor = child, supervisor
    if heartbeat is not None:
        heartbeat.publish(collector_pid=child.pid)
    try:
        code = _wait_supervising(child, supervisor)
    finally:
        signals.child = signals.supervisor = None
        if supervisor is not None and supervisor.write_fd is not None:
            os.close(supervisor.write_fd)
            supervisor.write_fd = None
    if code >= 0:
        return code, None
    return None, (None if signals.received else -code)


def _wait_supervising(child: subprocess.Popen[bytes], supervisor: Supervisor | None) -> int:
    if supervisor is None:
        return child.wait()
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return child.wait(timeout=supervisor.interval_s)
        supervisor.round()
        if supervisor.gave_up is not None and not supervisor.stopping:
            supervisor.stop_requested()  # the collector stops itself on gave_up; TERM in case it hangs
            with contextlib.suppress(subprocess.TimeoutExpired):
                return child.wait(timeout=30)
            child.terminate()


def job_started_at() -> float:
    """When this job started: the batch shell (our parent) was created then; else this process."""
    for pid in (os.getppid(), os.getpid()):
        with contextlib.suppress(psutil.Error):
            return float(psutil.Process(pid).create_time())
    return time.time()


def try_link_lock(path: Path) -> int | None:
    """Take the shard's link lock without waiting: its descriptor, or None when a live link holds it.

    The descriptor is not inherited by the collector or servers (PEP 446), so the lock is released
    exactly when this chain step ends, however it ends (SIGKILL included).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _holder(heartbeat: Path) -> str:
    with contextlib.suppress(StoreError):
        beat = live.read_heartbeat(heartbeat)
        if beat is not None:
            return f"job {beat.job_id} (heartbeat {beat.at})"
    return "a link whose heartbeat is not readable"


def run_link(
    run: RunDir, shard: int, settings: BenchmarkSettings, backend: Backend, me: tuple[str, int]
) -> int:
    """Run one link of shard ``shard``'s chain as job ``me`` (job id, restart count)."""
    signals = Signals()
    signals.install()
    duplicate = f"this job {me[0]} exits without a decision, a successor or spending anything"
    lock = try_link_lock(run.link_lock(shard))
    if lock is None:
        log(f"another link of shard {shard} is live: {_holder(run.heartbeat(shard))} holds "
            f"{run.link_lock(shard)}; {duplicate}")  # fmt: skip
        return 0
    try:
        other = other_live_link(summarize(run.ledger(shard).read()), me, backend)
        if other is not None:
            log(f"another link of shard {shard} is live: job {other} started and is still in the queue; "
                f"{duplicate}")  # fmt: skip
            return 0
        return _run_link_locked(run, shard, settings, backend, me, signals=signals)
    finally:
        os.close(lock)


def _run_link_locked(
    run: RunDir, shard: int, settings: BenchmarkSettings, backend: Backend, me: tuple[str, int], *,
    signals: Signals,
) -> int:  # fmt: skip
    ledger, limits = run.ledger(shard), _limits(settings)
    output = run.shard_output(shard, settings.output_stem)
    state = account_for_dead_runs(summarize(ledger.read()), ledger, me, backend, output=output, limits=limits)
    if state.finished:
        log(f"the chain of shard {shard} is already finished ({_finished_why(state)}); nothing to do")
        if not state.cancelled:  # a stop written by accounting above: the aggregation may be due
            maybe_submit_aggregation(run, settings, backend, me[0])
        return ExitCode.DONE
    bytes_before = saved_bytes(output)
    started = Started(job_id=me[0], restart_count=me[1], host=socket.gethostname(), saved_bytes=bytes_before)
    ledger.append(started)
    reap_predecessors(state, ledger, me)
    try:
        successor: str | None = ensure_successor(run, shard, ledger, me[0], backend)
    except SlurmError as error:  # collect anyway; queuing is tried again after the decision
        log(f"could not queue a successor now: {error}")
        successor = None
    output.parent.mkdir(parents=True, exist_ok=True)
    if run.read_info().array:
        ensure_shard_input(run, shard, settings.shards)
    before_progress = read_progress(output)
    with Heartbeat(run.heartbeat(shard), me[0], me[1], started.at) as heartbeat:
        resubmit = state.resubmit_pending
        code, killer, note = _collect(run, shard, settings, signals, resubmit, me, heartbeat=heartbeat)
    elapsed = time.time() - job_started_at()
    slurm_state = f"SIGNALLED:{signals.names}" if signals.received else "RUNNING"
    end = JobEnd(
        slurm_state, code, elapsed, before_progress, read_progress(output), killer,
        saved_outcomes=saved_bytes(output) > bytes_before,
    )  # fmt: skip
    verdict = decide(end, state.budgets, limits)
    if note:
        verdict = replace(verdict, reason=f"{note}; {verdict.reason}")
    log(f"decision {verdict.decision}: {verdict.reason}")
    _record(ledger, started, end, state.budgets, verdict, resubmit_offset=read_resubmit_offset(output),
            coverage=coverage_summary(output))  # fmt: skip
    _after_decision(run, shard, settings, backend, me=me[0], successor=successor, decision=verdict.decision)
    refresh_report(run, backend)
    return job_exit_code(verdict.decision)


def refresh_report(run: RunDir, backend: Backend) -> None:
    """Rewrite ``report.html`` (best effort: a report that cannot be written never fails a link)."""
    from gymslurm.launcher.report import write_report

    try:
        log(f"report: {write_report(run, backend)}")
    except Exception as error:  # the report is a view; the ledger already holds the truth
        log(f"could not rewrite the report: {error}")


def _collect(  # noqa: PLR0917
    run: RunDir,
    shard: int,
    settings: BenchmarkSettings,
    signals: Signals,
    resubmit: bool,
    me: tuple[str, int],
    *,
    heartbeat: Heartbeat,
) -> tuple[int | None, int | None, str | None]:
    ledger, host = run.ledger(shard), socket.gethostname()

    def note(event: str, server: server_mod.RunningServer, cause: str) -> None:
        log(f"server {server.settings.name!r} {event}: {cause}")
        ledger.append(_server_record(me, host, event, server, cause))

    started: list[server_mod.RunningServer] = []
    try:
        try:
            for wanted in settings.servers:
                log_path = run.root / "logs" / f"server-{wanted.name}-s{shard:03d}.log"
                known = {s.settings.name: s for s in started}
                server = server_mod.start(wanted, log_path, started=known)
                started.append(server)
                if server.process is not None:
                    probes = ", ".join(server.probes[-5:])
                    note(
                        "started", server, f"healthy at {server.url} after {server.startup_s:.1f}s ({probes})"
                    )
        except server_mod.ServerStartError as error:
            return ExitCode.RETRY, None, f"server start failed: {error}"
        urls = {server.settings.name: server.url for server in started}
        argv = collector_argv(settings, run, shard, urls, resubmit)
        supervisor = Supervisor(started, None, note) if any(s.process for s in started) else None
        env_code, killer = run_collector(
            argv, signals, settings.collector.env, supervisor, heartbeat=heartbeat,
            first_override=len(settings.collector.command),
        )  # fmt: skip
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


def _server_record(
    me: tuple[str, int], host: str, event: str, server: server_mod.RunningServer, cause: str | None
) -> ServerRecord:
    return ServerRecord(
        job_id=me[0], restart_count=me[1], name=server.settings.name, event=event,  # type: ignore[arg-type]
        host=host, pid=server.pid, create_time=server.create_time or None, url=server.url,
        startup_s=round(server.startup_s, 3) if event in ("started", "restarted") else None,
        restarts=server.restarts, cause=cause, probes=server.probes[-20:],
    )  # fmt: skip


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


def _after_decision(
    run: RunDir, shard: int, settings: BenchmarkSettings, backend: Backend, *, me: str, successor: str | None,
    decision: Decision,
) -> None:  # fmt: skip
    ledger = run.ledger(shard)
    if summarize(ledger.read()).cancelled:
        log(f"the chain of shard {shard} was cancelled; not queuing anything")
        return
    if decision.continues:
        if not _live(successor, backend):
            ensure_successor(run, shard, ledger, me, backend)
        return
    if successor is not None:
        backend.cancel([successor])
    log(f"chain of shard {shard} finished ({decision}); cancelled the queued successor {successor}")
    maybe_submit_aggregation(run, settings, backend, me)


def _finished_why(state: ChainState) -> str:
    if state.cancelled:
        return "cancelled"
    return state.last_decision.decision if state.last_decision else "finished"


@contextlib.contextmanager
def _locked(path: Path):  # type: ignore[no-untyped-def]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_run_file(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def maybe_submit_aggregation(
    run: RunDir, settings: BenchmarkSettings, backend: Backend, me: str | None
) -> str | None:
    """Submit the aggregation job if every shard's chain finished and nobody did yet (under a lock)."""
    if not settings.aggregation.enabled:
        return None
    with _locked(run.aggregate_lock):
        states = [summarize(run.ledger(s).read()) for s in range(settings.shards)]
        if not all(s.finished and not s.cancelled for s in states):
            return None
        if summarize(run.aggregate_ledger.read()).epoch_jobs:
            return None
        job = backend.submit(run.script(None), after=[me] if me else [])
        run.aggregate_ledger.append(Submitted(job_id=job, after=me, by=me or "resubmit"))
    log(f"every shard's chain finished: aggregation job {job} queued")
    return job


def aggregate_argv(
    settings: BenchmarkSettings, inputs: list[Path], output: Path, inputs_glob: str = ""
) -> list[str]:
    """The aggregation command: ``{inputs}`` becomes one argument per shard output, ``{inputs_glob}``
    one glob matching them all (no per-file argv at 1,000 shards), ``{output}`` the merged path."""
    argv: list[str] = []
    for part in settings.aggregation.command:
        if part == "{inputs}":
            argv += [str(path) for path in inputs]
        elif part == "{inputs_glob}":
            argv.append(inputs_glob)
        else:
            argv.append(part.replace("{output}", str(output)))
    return argv


def shard_outputs_glob(run: RunDir, stem: str) -> str:
    """A glob matching every shard's output of a run (and nothing else: not the merged output)."""
    import glob

    return f"{glob.escape(str(run.root / 'output'))}/shard-*/{glob.escape(stem)}.jsonl"


def run_aggregation(run: RunDir, settings: BenchmarkSettings, me: tuple[str, int]) -> int:
    """The aggregation step: apply the FAILED-shard policy, run ``aggregate``, record the outcome."""
    signals = Signals()
    signals.install()
    ledger = run.aggregate_ledger
    started = Started(job_id=me[0], restart_count=me[1], host=socket.gethostname())
    ledger.append(started)
    states = [summarize(run.ledger(s).read()) for s in range(settings.shards)]
    incomplete = [
        s for s, st in enumerate(states) if not st.last_decision or st.last_decision.decision != Decision.DONE
    ]
    outputs = [run.shard_output(s, settings.output_stem) for s in range(settings.shards)]
    t0 = time.monotonic()
    if incomplete and settings.aggregation.on_failed_shard == "fail":
        code: int | None = ExitCode.STOP
        reason = f"shards {incomplete} did not complete and on_failed_shard=fail: nothing merged"
    else:
        existing = [path for path in outputs if path.exists()]
        merged = run.merged_output(settings.output_stem)
        merged.parent.mkdir(parents=True, exist_ok=True)
        pattern = shard_outputs_glob(run, settings.output_stem)
        code, _ = run_collector(aggregate_argv(settings, existing, merged, pattern), signals)
        reason = f"aggregate exited {code}"
        if incomplete:
            reason += f"; merged what exists: shards {incomplete} are incomplete (aggregate-what-exists)"
    decision = Decision.DONE if code == 0 else Decision.STOP_FAILED
    end = JobEnd("RUNNING", code, time.monotonic() - t0)
    verdict = Verdict(decision, reason, Budgets(jobs=1, walltime_s=end.elapsed_s))
    _record(ledger, started, end, Budgets(), verdict)
    log(f"aggregation {decision}: {reason}")
    from gymslurm.launcher.backend import choose_backend

    refresh_report(run, choose_backend(run.read_info().backend, local_dir=run.local_dir))
    return ExitCode.DONE if code == ExitCode.DONE else ExitCode.STOP
