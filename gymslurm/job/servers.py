"""Environment Servers a job starts inside its allocation, health-checks, and stops afterwards.

A server configured with ``command`` is started in its own session (so its whole process tree can
be signalled), on ``host:port`` (port 0: a free port picked here), and must answer before
``startup_timeout_s``: a 2xx to ``GET health_path`` when set (``dispatch.probe_health``, the HTTP
boundary), else a TCP connection. Stopping sends
TERM to every process of the tree, then KILL to whatever is left after a grace period, so no
server outlives its job (RECIPE pitfall 12: orphans escape proctrack/linuxproc).

No server outlives its link on any exit path: the link stops them in a ``finally``; the kernel
kills a server whose link died (``PR_SET_PDEATHSIG``: SIGKILL when the link's process is gone);
and a next link on the same host reaps what is left of a predecessor's servers (grandchildren of
a killed link), but only processes it can prove are that predecessor's: the pid *and* the process
create time recorded in the ledger when the server started (:func:`reap`).
Trade-off: a free port picked here may in principle be taken before the server binds it; the
health check then fails and the job ends with exit 1 (a retry), which is rare and bounded.

A server's output goes to a pipe; a thread of the link appends it to the server's log with every
secret removed (:func:`pump_log`). Trade-off: a server printing faster than the link can scrub
(thousands of lines a second) waits on its pipe, and a link frozen by SIGSTOP blocks a chatty
server after 64 KiB.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from gymslurm.dispatch import probe_completion, probe_health
from gymslurm.errors import ConfigError, ServerStartError, SlurmError
from gymslurm.exitcodes import ExitCode
from gymslurm.launcher import environment
from gymslurm.launcher.server_placement import node_words, step_head
from gymslurm.launcher.server_refs import SERVER_REFERENCE, credential_url_on_argv, reference_value
from gymslurm.launcher.settings import ServerSettings
from gymslurm.redaction import redact_text, remember
from gymslurm.site.slurm import SlurmClient
from gymslurm.store.atomic import open_run_file


@dataclass
class RunningServer:
    """A server this job started (or one that was already running, with no process).

    A placed instance (``nodes`` set) is one ``srun --overlap`` step per node: ``process`` is rank
    0's ``srun`` (the one that serves), ``ranks`` the others'; it is probed at its head node.
    """

    settings: ServerSettings
    url: str
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    log: Path | None = None
    create_time: float = 0.0
    startup_s: float = 0.0
    restarts: int = 0
    probes: list[str] = field(default_factory=list)
    started: dict[str, RunningServer] = field(default_factory=dict, repr=False)
    withheld: frozenset[str] = frozenset()  # variables for other processes (launcher/environment.py)
    pumps: list[threading.Thread] = field(default_factory=list, repr=False)  # output into its log, scrubbed
    label: str = ""  # a replica's name (``policy-r1``); "" = the server's own
    nodes: tuple[str, ...] = ()  # the nodes a placed instance spans, its head first
    ranks: list[subprocess.Popen[bytes]] = field(default_factory=list)  # the steps of node ranks >= 1
    host: str = ""  # where it is probed: its head node when placed, else settings.host
    devices: tuple[str, ...] = ()  # the GPUs it was given (CUDA_VISIBLE_DEVICES), () = the link's own
    launched_at: float = 0.0  # time.monotonic() when its processes were started

    @property
    def pid(self) -> int | None:
        """The server's process id (its session and process group have the same number)."""
        return None if self.process is None else self.process.pid

    @property
    def name(self) -> str:
        """The name it goes by in the ledger, the job log and the supervision channel."""
        return self.label or self.settings.name

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        """Every process of it this link started: rank 0's, then the other ranks'."""
        return [*([self.process] if self.process is not None else []), *self.ranks]

    def exited(self) -> int | None:
        """The exit code of the first of its processes that ended, or None while all run."""
        for process in self.processes:
            if (code := process.poll()) is not None:
                return code
        return None


def free_port(host: str) -> int:
    """A port the kernel says is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def probe(host: str, port: int, settings: ServerSettings) -> bool:
    """One probe: a completion returning text, ``GET health_path`` answering 2xx, or a TCP connect."""
    if settings.probe != "health":
        chat = settings.probe == "chat_completions"
        return probe_completion(f"http://{host}:{port}", chat, settings.probe_model, settings.probe_timeout_s)
    if settings.health_path is None:
        with contextlib.suppress(OSError), socket.create_connection((host, port), settings.probe_timeout_s):
            return True
        return False
    return probe_health(f"http://{host}:{port}", settings.health_path, timeout_s=settings.probe_timeout_s)


def _die_with_parent(signum: int = signal.SIGKILL) -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG


def stop_with_parent() -> None:
    """In a child between fork and exec: SIGTERM it when its parent dies (the collector of a link)."""
    _die_with_parent(signal.SIGTERM)


def interpolate(text: str, started: Mapping[str, RunningServer], host: str = "", port: int = 0) -> str:
    """``{host}``, ``{port}`` (this server's) and ``{servers.NAME.*}`` (an earlier one's, server_refs.py)."""
    urls = {name: server.url for name, server in started.items()}
    text = SERVER_REFERENCE.sub(lambda m: reference_value(m.group(1), m.group(2), urls), text)
    return text.replace("{port}", str(port)).replace("{host}", host) if port else text


def container_argv(
    settings: ServerSettings, argv: list[str], node: str | None = None, step_name: str = ""
) -> list[str]:
    """``argv`` as the job runs it: wrapped in the server's container launcher, if it has one, and run
    as a step on ``node`` when the server is placed there (pure).

    Pyxis/enroot: ``srun --overlap --ntasks=1 --nodes=1 [--nodelist=NODE --job-name=STEP]
    --container-image=IMAGE [--container-mounts=A,B] EXTRA... -- ARGV`` (a step of the job, sharing
    its allocation); Apptainer: ``apptainer exec [--nv] [--bind M]... EXTRA... IMAGE ARGV``; a placed
    server without a container: ``srun --overlap --nodes=1 --ntasks=1 --nodelist=NODE --job-name=STEP
    -- ARGV`` (:func:`gymslurm.launcher.server_placement.step_head`).
    """
    box = settings.container
    step = [] if node is None else step_head(node, step_name)
    if box is not None and box.runtime == "pyxis":
        mounts = [f"--container-mounts={','.join(box.mounts)}"] if box.mounts else []
        head = step or ["srun", "--overlap", "--ntasks=1", "--nodes=1"]
        return [*head, f"--container-image={box.image}", *mounts, *box.extra_args, "--", *argv]
    if box is not None:
        binds = [part for mount in box.mounts for part in ("--bind", mount)]
        nv = ["--nv"] if box.gpus else []
        argv = ["apptainer", "exec", *nv, *binds, *box.extra_args, box.image, *argv]
    return [*step, "--", *argv] if step else list(argv)


def rank_argv(settings: ServerSettings, rank: int) -> list[str]:
    """The command node rank ``rank`` of a server runs, uninterpolated (``worker_command`` on ranks >= 1)."""
    assert settings.command is not None
    return settings.worker_command if rank and settings.worker_command is not None else settings.command


def start(
    settings: ServerSettings,
    log: Path,
    port: int | None = None,
    started: Mapping[str, RunningServer] | None = None,
    withheld: frozenset[str] = frozenset(),
    *,
    nodes: tuple[str, ...] = (),
    label: str = "",
    devices: tuple[str, ...] = (),
) -> RunningServer:
    """Start one server (or adopt its ``url``) and wait until it is healthy.

    ``started``: the servers already running, by name, whose addresses ``{servers.NAME.url}`` names.
    ``nodes``: the nodes a placed instance spans (one ``srun --overlap`` step on each), else () for a
    server in the link's process; ``label``: a replica's name; ``devices``: its GPUs
    (:func:`gymslurm.launcher.server_placement.device_slices`).
    """
    if settings.command is None:
        assert settings.url is not None
        return RunningServer(settings, settings.url)
    server = launch(settings, log, port, started, withheld, nodes=nodes, label=label, devices=devices)
    deadline = time.monotonic() + settings.startup_timeout_s
    while not started_yet(server, deadline):
        time.sleep(0.2)
    return server


def launch(
    settings: ServerSettings,
    log: Path,
    port: int | None = None,
    started: Mapping[str, RunningServer] | None = None,
    withheld: frozenset[str] = frozenset(),
    *,
    nodes: tuple[str, ...] = (),
    label: str = "",
    devices: tuple[str, ...] = (),
) -> RunningServer:
    """Start the processes of one server (every node rank of a placed one) without waiting for them.

    ``devices``, when given, is its ``CUDA_VISIBLE_DEVICES`` (server_placement.device_slices)."""
    host = nodes[0] if nodes else settings.host
    port = port or settings.port or free_port(settings.host if not nodes else "0.0.0.0")
    known = started or {}
    name = label or settings.name
    processes: list[subprocess.Popen[bytes]] = []
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if problem := credential_url_on_argv(
        [*(settings.command or []), *(settings.worker_command or [])], {n: s.url for n, s in known.items()}
    ):  # a URL resolved in the job (${oc.env:...}): the login side could not see its password
        raise ServerStartError(f"server {name!r} not started: {problem}")
    for rank in range(max(1, len(nodes))):
        here = nodes[rank] if nodes else host

        def fill(text: str, here: str = here, rank: int = rank) -> str:
            return node_words(interpolate(text, known, here, port), nodes, rank)

        argv = container_argv(
            settings,
            [fill(part) for part in rank_argv(settings, rank)],
            node=here if nodes else None,
            step_name=f"gs-{name}-{rank}",
        )
        env = {key: fill(value) for key, value in settings.env.items()}
        if devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
        try:
            where = f"servers.{settings.name}.env"
            child_env = environment.child_environment(os.environ, env, withheld=withheld, where=where)
            remember(environment.secret_values(env, child_env))  # scrubbed by value from all the link writes
        except ConfigError as error:
            for process in processes:
                _kill_tree(process.pid, 0.0)
            raise ServerStartError(f"server {name!r} not started: {error}") from error
        processes.append(
            subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=child_env,  # its own secrets only (process_env.child_environment)
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        )
    server = RunningServer(
        settings,
        f"http://{host}:{port}",
        processes[0],
        port,
        log,
        started=dict(known),
        withheld=withheld,
        label=label,
        nodes=nodes,
        ranks=processes[1:],
        host=host,
        launched_at=t0,
        devices=devices,
    )
    for process in processes:
        assert process.stdout is not None
        pump = threading.Thread(target=pump_log, args=(process.stdout, log), daemon=True, name="log")
        pump.start()
        server.pumps.append(pump)
    with contextlib.suppress(psutil.Error):
        server.create_time = psutil.Process(processes[0].pid).create_time()
    return server


def started_yet(server: RunningServer, deadline: float) -> bool:
    """One start-up probe of a launched server: True once healthy; raises when it exited or is too late."""
    settings, log = server.settings, server.log
    assert log is not None
    if (code := server.exited()) is not None:
        kill_now(server)
        first, transient = first_error_line(log, settings)
        said = f": {first}" if first else ""
        signature = f"server {server.name!r} exited with {code} during start-up{said}"
        raise ServerStartError(
            f"{signature}; see {log}" + log_tail(log, settings),
            signature=None if transient else signature,  # a port taken meanwhile: never the same twice
        )
    healthy = probe(server.host, server.port, settings)
    server.probes.append(f"{time.monotonic() - server.launched_at:.1f}s {'ok' if healthy else 'not yet'}")
    if healthy:
        server.startup_s = time.monotonic() - server.launched_at
        return True
    if time.monotonic() >= deadline:
        stop(server)
        raise ServerStartError(
            f"server {server.name!r} was not healthy after {settings.startup_timeout_s}s "
            f"(probes: {', '.join(server.probes[-5:])}); see {log}{log_tail(log, settings)}"
        )
    return False


PUMP_LINE_BYTES = 1024 * 1024  # a longer line is written in pieces of this size
PUMP_DRAIN_S = 5.0


def pump_log(source: IO[bytes], log: Path) -> None:
    """Copy a server's output into its log, every secret removed (issue 20: scrub by value).

    The server writes to a pipe, not to its log: the link appends what it prints, whole lines at a
    time, through :func:`gymslurm.redaction.redact_text` (every secret this process learned — the
    benchmark's, each server's ``env``, credential-named variables — and the shapes), so a server
    that prints its configuration or echoes a key leaves none in ``logs/server-*.log``. Lines are
    never cut but past ``PUMP_LINE_BYTES``. A log that cannot be written (a full disk) is still
    drained, so the server never blocks on its output. Ends when its last process closes the pipe.
    """
    handle: IO[bytes] | None = None
    with contextlib.suppress(OSError):
        handle = os.fdopen(open_run_file(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")

    def write(data: bytes) -> None:
        nonlocal handle
        if handle is None or not data:
            return
        try:
            handle.write(redact_text(data.decode(errors="surrogateescape")).encode(errors="surrogateescape"))
            handle.flush()
        except OSError:
            with contextlib.suppress(OSError):
                handle.close()
            handle = None

    pending = b""
    with source, contextlib.suppress(OSError):
        while chunk := os.read(source.fileno(), 64 * 1024):
            pending += chunk
            cut = pending.rfind(b"\n") + 1 or (len(pending) if len(pending) >= PUMP_LINE_BYTES else 0)
            write(pending[:cut])
            pending = pending[cut:]
    write(pending)
    if handle is not None:
        with contextlib.suppress(OSError):
            handle.close()


def drained(server: RunningServer, timeout_s: float = PUMP_DRAIN_S) -> None:
    """Wait (bounded) until everything the server printed is in its log, e.g. before reading it."""
    for pump in server.pumps:
        pump.join(timeout_s)


# The first line of a server log that names what went wrong (``uv: command not found``, a traceback's
# exception...), and the signs of a start-up failure that a retry may not meet (a port taken meanwhile).
ERROR_LINE = re.compile(
    r"(?i)\b(error|exception|traceback|not found|no such file|fatal|failed|denied|invalid)\b"
)
TRANSIENT_LINE = re.compile(r"(?i)address already in use|temporarily unavailable|connection refused")
# A line a log marks as a warning or information (``WARNING``, ``warning:``, glog's ``[... W 123 ...]``,
# as Ray prints "Failed to determine local IP ... falling back") is never the error that stopped it.
NOTICE_LINE = re.compile(r"\b(WARNING|WARN|INFO)\b|^\s*(?i:warning):|^\s*\[[^\]]*\s[WI]\s\d+\s")
FIRST_ERROR_BYTES = 256 * 1024


def first_error_line(log: Path, settings: ServerSettings) -> tuple[str, bool]:
    """The first error-looking line of a server's log (redacted, cut at 300 characters), and whether
    the log shows a transient cause; ``("", False)`` when it names none."""
    from gymslurm.identity import is_credential_name, redact_text

    try:
        with log.open("rb") as handle:
            lines = handle.read(FIRST_ERROR_BYTES).decode(errors="replace").splitlines()
    except OSError:
        return "", False
    transient = any(TRANSIENT_LINE.search(line) for line in lines)
    errors = (i for i, line in enumerate(lines) if ERROR_LINE.search(line) and not NOTICE_LINE.search(line))
    first = next(errors, None)
    found = "" if first is None else _error_of(lines, first)
    for key, value in settings.env.items():  # a server may print the key it was given
        if is_credential_name(key) and value:
            found = found.replace(value, "<redacted>")
    return redact_text(found)[:300], transient


def _error_of(lines: list[str], first: int) -> str:
    """The error a log's line ``first`` starts: a Python traceback's exception line (its first unindented
    line after ``Traceback ...:``, e.g. ``PermissionError: ...``), else the line itself."""
    if lines[first].lstrip().startswith("Traceback (most recent call last)"):
        for line in lines[first + 1 :]:
            if line.strip() and not line[0].isspace():
                return line.strip()
    return lines[first].strip()


REPEATED = "the same start-up failure as the link before, with nothing changed: not retried again"


def start_failure_exit(error: ServerStartError, previous_reason: str | None = None) -> tuple[int, str]:
    """The link's exit for a server that did not start, and what the reason adds (pure).

    2 (stop, fix it) for a stack the job cannot hold, and for a server that exited during start-up
    the same way as in the link right before (its signature, the server's name, exit code and first
    error line, is in that link's decision ``previous_reason``: nothing changed between the two, so a
    third would meet it again). Otherwise 1: a start-up failure is retried, and the chain's budget
    decides how often (Ray's "current node timed out during startup" under load passes later). So a
    deterministic failure costs at most two links.
    """
    if error.deterministic:
        return ExitCode.REFUSED, ""
    if error.signature and previous_reason and error.signature in previous_reason:
        return ExitCode.REFUSED, f" ({REPEATED})"
    return ExitCode.RETRY, ""


LOG_TAIL_LINES = 15
LOG_TAIL_CHARS = 1500


def log_tail(log: Path, settings: ServerSettings) -> str:
    """The end of a server's log for an error message, with credentials redacted (never a secret)."""
    from gymslurm.identity import is_credential_name, redact_credentials

    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - 64 * 1024))
            lines = handle.read().decode(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return ""
    text = "\n".join(lines)[-LOG_TAIL_CHARS:]
    for key, value in settings.env.items():  # a server may print the key it was given
        if is_credential_name(key) and value:
            text = text.replace(value, "<redacted>")
    scrubbed = redact_credentials({"log": text})["log"]
    return f"; its log ends with:\n{scrubbed}" if scrubbed.strip() else ""


def restart(server: RunningServer) -> RunningServer:
    """Kill what is left of ``server`` at once and start it again on the same port."""
    fresh = relaunch(server)
    deadline = time.monotonic() + server.settings.startup_timeout_s
    while not started_yet(fresh, deadline):
        time.sleep(0.2)
    return fresh


def relaunch(server: RunningServer) -> RunningServer:
    """Kill what is left of ``server`` at once and launch it again in place (same port, nodes, log).

    A placed server's Slurm steps are ended first (:func:`end_steps`): killing the local ``srun``
    leaves a hung step's task on its node, holding the port. A replica whose step does not end in
    time (its node or its ``slurmstepd`` does not answer) takes a new port instead: the router is
    given its new address; any other server keeps its port (others were started with its address).
    """
    kill_now(server)
    assert server.log is not None
    port = server.port if end_steps(server) or not server.label else None
    fresh = launch(
        server.settings,
        server.log,
        port,
        server.started,
        server.withheld,
        nodes=server.nodes,
        label=server.label,
        devices=server.devices,
    )
    fresh.restarts = server.restarts + 1
    return fresh


STEP_GONE_S = 15.0  # how long a relaunch waits for a placed server's old steps to end


def end_steps(server: RunningServer, wait_s: float = STEP_GONE_S) -> bool:
    """End a placed server's Slurm steps (``scancel --signal=KILL JOB.STEP`` each, named
    ``gs-NAME-RANK``) and wait for them, at most ``wait_s``: True once none is left (or the server
    has none: it runs in the link's own process tree), False when one still is."""
    job = os.environ.get("SLURM_JOB_ID")
    if not server.nodes or not job:
        return True
    names = {f"gs-{server.label or server.settings.name}-{rank}" for rank in range(len(server.nodes))}
    client = SlurmClient()
    try:
        ours = [step for step, name in client.steps(job) if name in names]
        for step in ours:
            client.kill_step(step)
        deadline = time.monotonic() + wait_s
        while ours and time.monotonic() < deadline:
            time.sleep(0.5)
            left = {step for step, name in client.steps(job) if name in names}
            ours = [step for step in ours if step in left]
    except SlurmError:
        return False
    return not ours


def kill_now(server: RunningServer) -> None:
    """SIGKILL the server's session and tree (a hung or stopped server handles no TERM)."""
    for process in server.processes:
        _kill_tree(process.pid, server.create_time if process is server.process else 0.0)
        with contextlib.suppress(ChildProcessError):
            process.wait()
    drained(server)


def _kill_tree(pid: int, create_time: float) -> bool:
    try:
        root = psutil.Process(pid)
        if create_time and abs(root.create_time() - create_time) > 0.01:
            return False  # the pid was reused by someone else's process
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        tree = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return bool(tree)


def reap(pid: int, create_time: float) -> bool:
    """Kill a predecessor's server session if ``pid`` is still the process that was recorded.

    Proof of ownership is the pid *and* the create time: a recycled pid (another user's process,
    or ours started later) has another create time and is left alone. Orphaned members of the
    server's session whose leader already died are found by their session id.
    """
    try:
        leader_time = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        leader_time = None
    except psutil.Error:
        return False
    if leader_time is not None:
        return abs(leader_time - create_time) <= 0.01 and _kill_tree(pid, create_time)
    killed = False  # the leader is gone: its session may live on in processes started after it
    for proc in psutil.process_iter(["pid", "create_time"]):
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(proc.pid) == pid and proc.info["create_time"] >= create_time - 0.01:
                proc.kill()
                killed = True
    return killed


def stop(server: RunningServer, grace_s: float = 5.0) -> None:
    """TERM the server's whole process tree (every rank's), then KILL what is left after ``grace_s``."""
    tree = []
    for process in server.processes:
        try:
            root = psutil.Process(process.pid)
            tree += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    for process in server.processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, 9)  # anything that escaped the tree but kept the session
        with contextlib.suppress(ChildProcessError):
            process.wait()
    drained(server)
