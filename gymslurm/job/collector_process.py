"""The collector as a child of the link: its command line, its environment, and the wait.

The child gets only its own secrets and no configuration on its command line (every override
travels in its environment) and never outlives the link.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gymslurm.dispatch.calls import serves_model_load
from gymslurm.job import servers as server_mod
from gymslurm.job.collector_files import read_live_progress
from gymslurm.job.heartbeat import Heartbeat, Signals, log
from gymslurm.job.server_watch import Supervisor
from gymslurm.launcher import environment
from gymslurm.launcher.adaptive_load import (
    AdaptiveChoice,
    adaptive_overrides,
    chosen_by_benchmark,
    metrics_urls,
    model_servers,
)
from gymslurm.launcher.decide import collector_unresponsive, life_of
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.server_refs import SERVER_REFERENCE, override_value
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.process_env import SECRET_OVERRIDES_ENV, SECRETS_ENV, environment_string_problem
from gymslurm.redaction import redact_value, remember
from gymslurm.supervision import SUPERVISION_FD_ENV


def adaptive_choice(
    settings: BenchmarkSettings, urls: dict[str, str], loading: frozenset[str] = frozenset()
) -> AdaptiveChoice:
    """How this link's collector adapts its load (launcher/adaptive_load.py): asks each model
    server's metrics once, unless the benchmark chose (or the server still loads: ``loading``)."""
    overrides, models = settings.collector.overrides, model_servers(settings.servers)
    if chosen_by_benchmark(overrides):
        return adaptive_overrides(overrides, models, urls, {})
    timeout = {s.name: s.probe_timeout_s for s in settings.servers}
    serves = {
        n: n not in loading and any(serves_model_load(u, timeout[n]) for u in metrics_urls(n, urls))
        for n in models
    }
    return adaptive_overrides(overrides, models, urls, serves, loading)


def collector_argv(
    settings: BenchmarkSettings,
    run: RunDir,
    shard: int,
    urls: dict[str, str],
    resubmit: bool,
    *,
    adaptive: Iterable[str] = (),
) -> list[str]:
    """The collector command of one link: resume, require completion, the shard's files, servers,
    and how its load adapts (``adaptive``: :func:`adaptive_choice`'s overrides)."""
    argv = [
        *settings.collector.command,
        f"+input_jsonl_fpath={run.shard_input(shard)}",
        f"+output_jsonl_fpath={run.shard_output(shard, settings.output_stem)}",
        "+resume_from_cache=true",
        "+require_complete=true",
    ]
    argv += [f"{s.collector_override}={urls[s.name]}" for s in settings.servers if s.collector_override]
    argv += [
        SERVER_REFERENCE.sub(lambda m: override_value(m.group(1), m.group(2), urls), o)
        for o in settings.collector.overrides
    ]
    argv += adaptive
    if resubmit:
        argv.append(settings.collector.resubmit_override)
    return argv


# What ``gymslurm reverify`` takes of the collector's overrides: the grader and how to speak to it,
# by address or, in NeMo Gym's spelling, by name through the head server (as collect finds it).
REVERIFY_KEYS = frozenset(
    {
        "environment_server_url",
        "environment_protocol",
        "request_timeout_s",
        "environment_server_name",
        "environment_routing_mode",
        "head_server_url",
        "head_server.host",
        "head_server.port",
    }
)
REVERIFY_COMMAND_LENGTH = 5  # interpreter -m gymslurm reverify --judge-failed-only: then the overrides


def reverify_argv(
    settings: BenchmarkSettings, run: RunDir, shard: int, urls: dict[str, str], source: RunDir
) -> list[str]:
    """The command of one link of ``submit --reverify``: re-grade the source run's shard into this one's.

    The grader is the collector's (its ``REVERIFY_KEYS`` overrides, the servers' ``collector_override``
    included), then ``reverify.overrides``; ``+require_complete=true`` gives the chain's exit codes.
    """
    collect = collector_argv(settings, run, shard, urls, resubmit=False)[len(settings.collector.command) :]
    grader = [item for item in collect if item.lstrip("+~").partition("=")[0] in REVERIFY_KEYS]
    grader += [
        SERVER_REFERENCE.sub(lambda m: override_value(m.group(1), m.group(2), urls), o)
        for o in settings.reverify.overrides
    ]
    stem = settings.output_stem
    return [
        settings.slurm.interpreter,
        "-m",
        "gymslurm",
        "reverify",
        "--judge-failed-only",
        f"+input_jsonl_fpath={source.shard_output(shard, stem)}",
        f"+output_jsonl_fpath={run.shard_output(shard, stem)}",
        "+require_complete=true",
        *grader,
    ]


def split_command(argv: list[str], first_override: int) -> tuple[list[str], list[str]]:
    """(the collector's command, its overrides): the overrides go in the environment, never argv.

    A command line is readable by every user of the node (``ps``, ``/proc/*/cmdline``), an
    environment by its owner only; whatever an override looks like (a path, a URL, a credential
    inside another assignment), it is passed in ``GYMSLURM_COLLECT_OVERRIDES`` (a JSON list), which
    ``gymslurm collect`` appends to its own and removes from its environment. Pure.
    """
    return argv[:first_override], argv[first_override:]


def overrides_problem(overrides: list[str]) -> str | None:
    """Why the collector's overrides cannot travel in ``GYMSLURM_COLLECT_OVERRIDES`` (too long), or None."""
    if not overrides:
        return None
    what = "the collector's overrides (collector.overrides, the shard's paths, the servers' URLs)"
    return environment_string_problem(SECRET_OVERRIDES_ENV, json.dumps(overrides), what)


def environment_problem(settings: BenchmarkSettings, run: RunDir, secrets: dict[str, object]) -> str | None:
    """Why one environment string the job would need is too long for Linux, or None (submit asks first).

    The job passes the secrets bundle to the chain step, each shard's overrides to its collector
    and each ``env`` entry to its process, each as one environment string; checked with the
    longest shard name, a resubmit and a server address of the longest port. Pure.
    """
    address = {s.name: s.url or f"http://{s.host}:65535" for s in settings.servers}
    argv = collector_argv(settings, run, settings.shards - 1, address, resubmit=True)
    checks = [(SECRETS_ENV, json.dumps(secrets), "the benchmark's secrets")]
    checks += [(name, value, f"collector.env.{name}") for name, value in settings.collector.env.items()]
    for server in settings.servers:
        checks += [(name, value, f"servers.{server.name}.env.{name}") for name, value in server.env.items()]
    problems = [overrides_problem(argv[len(settings.collector.command) :])]
    problems += [environment_string_problem(*check) for check in checks]
    return next((problem for problem in problems if problem), None)


def child_environment(extra: dict[str, str] | None = None, withheld: Iterable[str] = ()) -> dict[str, str]:
    """This job's environment for the collector, without the benchmark's secrets bundle.

    Each process gets only its own secrets: the collector its overrides and ``collector.env``
    (``${oc.env:NAME}`` resolved here, inside the job), each server its ``env``, never
    ``GYMSLURM_SECRETS``, and no variable ``withheld`` for another process (launcher/environment.py).
    """
    own = extra or {}
    child_env = environment.child_environment(os.environ, own, withheld=withheld, where="collector.env")
    remember(environment.secret_values(own, child_env))  # scrubbed by value from all the link writes
    return child_env


@dataclass
class ProgressWatch:
    """The link's watch over its collector's progress (not its process): liveness from progress.

    Every ``interval_s`` it reads the collector's live progress record and applies
    :func:`gymslurm.launcher.decide.collector_unresponsive`; ``reason`` is set once it fires.
    """

    output: Path
    window_s: float | None
    interval_s: float = 2.0
    started: float = field(default_factory=time.time)
    reason: str | None = None

    def check(self, pid: int) -> str | None:
        """Read the record now; the reason the collector is unresponsive, or None."""
        now = time.time()
        life = life_of(read_live_progress(self.output), pid, now - self.started, now)
        self.reason = collector_unresponsive(life, self.window_s, fresh_s=self.window_s or 0.0)
        return self.reason


def run_collector(
    argv: list[str],
    signals: Signals,
    env: dict[str, str] | None = None,
    supervisor: Supervisor | None = None,
    *,
    heartbeat: Heartbeat | None = None,
    first_override: int | None = None,
    withheld: Iterable[str] = (),
    watch: ProgressWatch | None = None,
) -> tuple[int | None, int | None]:
    """Run the collector; returns (exit code, signal that killed it when we had not forwarded one).

    With a ``supervisor``, the collector inherits the read end of the supervision channel and
    this thread runs a probe round every ``interval_s`` until the collector exits. With a
    ``watch``, a collector that does nothing (``watch.reason``) is stopped: CONT and TERM (so a
    SIGSTOPped one saves what it has), KILL 10 s later.
    """
    if signals.received:
        log(f"received {signals.names} before the collector started; not starting it")
        return None, None
    public, overrides = split_command(argv, len(argv) if first_override is None else first_override)
    shown = f"; its overrides, in {SECRET_OVERRIDES_ENV}: {redact_value(overrides)}" if overrides else ""
    log("collector: " + " ".join(public) + shown)
    child_env, read_fd = child_environment(env, withheld), None
    if overrides:
        child_env[SECRET_OVERRIDES_ENV] = json.dumps(overrides)
    pass_fds: tuple[int, ...] = ()
    if supervisor is not None:
        read_fd, supervisor.write_fd = os.pipe()
        child_env[SUPERVISION_FD_ENV] = str(read_fd)
        pass_fds = (read_fd,)
        supervisor.begin()
    child = subprocess.Popen(
        public,
        stdin=subprocess.DEVNULL,
        env=child_env,
        pass_fds=pass_fds,
        preexec_fn=server_mod.stop_with_parent,  # noqa: PLW1509  a collector never outlives its link
    )
    if read_fd is not None:
        os.close(read_fd)
    signals.child, signals.supervisor = child, supervisor
    if watch is not None:
        watch.started = time.time()
    if heartbeat is not None:
        heartbeat.publish(
            collector_pid=child.pid,
            collector_started=time.time(),
            stall_window_s=None if watch is None else watch.window_s,
        )
    try:
        code = _wait_supervising(child, supervisor, watch)
    finally:
        signals.child = signals.supervisor = None
        if supervisor is not None and supervisor.write_fd is not None:
            os.close(supervisor.write_fd)
            supervisor.write_fd = None
    if code >= 0:
        return code, None
    return None, (None if signals.received else -code)


def _wait_supervising(
    child: subprocess.Popen[bytes], supervisor: Supervisor | None, watch: ProgressWatch | None
) -> int:
    if supervisor is None and watch is None:
        return child.wait()
    step = min(x.interval_s for x in (supervisor, watch) if x is not None)
    next_round = time.monotonic() + (supervisor.interval_s if supervisor is not None else 0.0)
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return child.wait(timeout=step)
        if watch is not None and watch.reason is None and watch.check(child.pid) is not None:
            log(f"unresponsive: {watch.reason}; stopping the collector")
            return stop_unresponsive(child)
        if supervisor is None or time.monotonic() < next_round:
            continue
        next_round = time.monotonic() + supervisor.interval_s
        supervisor.round()
        if supervisor.gave_up is not None and not supervisor.stopping:
            supervisor.stop_requested()  # the collector stops itself on gave_up; TERM in case it hangs
            with contextlib.suppress(subprocess.TimeoutExpired):
                return child.wait(timeout=30)
            child.terminate()


def stop_unresponsive(child: subprocess.Popen[bytes]) -> int:
    """CONT (a SIGSTOPped collector cannot take TERM), TERM, and KILL after 10 s: its exit code."""
    for signum in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)
    try:
        return child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()
