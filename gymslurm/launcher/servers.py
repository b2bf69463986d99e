"""Environment Servers a job starts inside its allocation, health-checks, and stops afterwards.

A server configured with ``command`` is started in its own session (so its whole process tree can
be signalled), on ``host:port`` (port 0: a free port picked here), and must answer before
``startup_timeout_s``: a 2xx to ``GET health_path`` when set (``dispatch.probe_health``, the HTTP
boundary), else a TCP connection. Stopping sends
TERM to every process of the tree, then KILL to whatever is left after a grace period, so no
server outlives its job (RECIPE pitfall 12: orphans escape proctrack/linuxproc).
Trade-off: a free port picked here may in principle be taken before the server binds it; the
health check then fails and the job ends with exit 1 (a retry), which is rare and bounded.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from gymslurm.dispatch import probe_health
from gymslurm.identity import redact_text
from gymslurm.launcher.rundir import SECRETS_ENV
from gymslurm.launcher.settings import ServerSettings


class ServerStartError(Exception):
    """A configured server did not become healthy in time."""


@dataclass
class RunningServer:
    """A server this job started (or one that was already running, with no process)."""

    settings: ServerSettings
    url: str
    process: subprocess.Popen[bytes] | None = None


def free_port(host: str) -> int:
    """A port the kernel says is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _healthy(host: str, port: int, health_path: str | None) -> bool:
    if health_path is None:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return True
        return False
    return probe_health(f"http://{host}:{port}", health_path, timeout_s=2)


def start(settings: ServerSettings, log: Path) -> RunningServer:
    """Start one server (or adopt its ``url``) and wait until it is healthy."""
    if settings.command is None:
        assert settings.url is not None
        return RunningServer(settings, settings.url)
    port = settings.port or free_port(settings.host)
    argv = [part.replace("{port}", str(port)).replace("{host}", settings.host) for part in settings.command]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as handle:
        process = subprocess.Popen(
            argv, stdout=handle, stderr=handle, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**{k: v for k, v in os.environ.items() if k != SECRETS_ENV}, **settings.env},  # its own only
        )  # fmt: skip
    server = RunningServer(settings, f"http://{settings.host}:{port}", process)
    deadline = time.monotonic() + settings.startup_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"server {settings.name!r} exited with {process.returncode}; see {log}")
        if _healthy(settings.host, port, settings.health_path):
            return server
        time.sleep(0.2)
    stop(server)
    raise ServerStartError(
        f"server {settings.name!r} ({redact_text(shlex.join(argv))}) was not healthy after "
        f"{settings.startup_timeout_s}s; "
        f"see {log}"
    )


def stop(server: RunningServer, grace_s: float = 5.0) -> None:
    """TERM the server's whole process tree, then KILL what is left after ``grace_s``."""
    if server.process is None:
        return
    try:
        root = psutil.Process(server.process.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.process.pid, 9)  # anything that escaped the tree but kept the session
    server.process.wait()
