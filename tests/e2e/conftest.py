"""Fixtures that start the demo Environment Server as a real subprocess on a free loopback port.

Reuse them in any e2e test (they are collected for everything under tests/e2e/):

``demo_server`` — one server with default options, for the test::

    def test_collects(demo_server):
        httpx.post(f"{demo_server.url}/run", json=...)

``start_demo_server`` — a factory for servers with options; call it as often as needed::

    def test_resume(start_demo_server):
        flaky = start_demo_server("--accuracy", "1.0", "--die-after", "5")
        ...
        flaky.process.wait(timeout=10)            # it died after answering 5 /run requests
        again = start_demo_server("--accuracy", "1.0")   # a new port: use again.url

``shared_demo_server`` — one default server for the whole session (saves a start per test): only for
tests that neither inject process-level faults (``die``, ``--die-after``) nor stop it; per-task
faults through ``_demo_fault`` are fine, they change nothing for other tests.

Outside fixtures (a benchmark, a session fixture of your own) call
``launch_demo_server(args, stderr_path)`` and ``DemoServer.stop()`` yourself.

Each server is ``python -m gymslurm demo-server --host 127.0.0.1 --port 0 ARGS`` started from the
repository root (so the worktree's code runs). The factory waits until the server has printed its
``listening on`` line and answers ``GET /health``, then returns a :class:`DemoServer`; if it does not
start within ``timeout`` seconds the test fails with the server's stderr. At teardown every server
the test started and that is still running gets SIGTERM (then SIGKILL after 10 s). The server's
stderr goes to ``DemoServer.stderr_path`` (its shutdown summary and the ``die`` message land there).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.helpers import REPO_ROOT

LISTENING = "gymslurm demo-server listening on "
START_TIMEOUT_S = 30.0


@dataclass
class DemoServer:
    """A running demo server subprocess."""

    url: str  # http://127.0.0.1:PORT, no trailing slash
    process: subprocess.Popen[bytes]
    stderr_path: Path

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.url.rsplit(":", 1)[1])

    def stderr(self) -> str:
        """What the server wrote to stderr so far."""
        return self.stderr_path.read_text(errors="replace")

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM it (if it still runs) and return its exit status; SIGKILL after ``timeout``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def _read_line(process: subprocess.Popen[bytes], deadline: float) -> str:
    """The first stdout line of ``process``, or "" if it exits or the deadline passes first."""
    assert process.stdout is not None
    fd, line = process.stdout.fileno(), b""
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line.decode(errors="replace").strip()


def _wait_healthy(url: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return True
        except httpx.TransportError:
            time.sleep(0.05)
    return False


def launch_demo_server(
    args: tuple[str, ...], stderr_path: Path, timeout: float = START_TIMEOUT_S
) -> DemoServer:
    """Start a demo server with extra ``args`` and wait until it answers; fail the test if it does not."""
    command = [sys.executable, "-m", "gymslurm", "demo-server", "--host", "127.0.0.1", "--port", "0", *args]
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=stderr)
    deadline = time.monotonic() + timeout
    line = _read_line(process, deadline)
    url = line[len(LISTENING) :] if line.startswith(LISTENING) else ""
    if not url or not _wait_healthy(url, deadline):
        process.kill()
        process.wait()
        pytest.fail(
            f"the demo server did not start within {timeout:g} s (command {command}, first stdout line "
            f"{line!r}); its stderr:\n{stderr_path.read_text(errors='replace')}"
        )
    return DemoServer(url, process, stderr_path)


@pytest.fixture
def start_demo_server(tmp_path: Path) -> Iterator[Callable[..., DemoServer]]:
    """A factory: ``start_demo_server(*args)`` starts a server with those options; all stop at teardown."""
    servers: list[DemoServer] = []

    def start(*args: str) -> DemoServer:
        server = launch_demo_server(args, tmp_path / f"demo_server_{len(servers)}.stderr")
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
        if server.process.stdout is not None:
            server.process.stdout.close()


@pytest.fixture
def demo_server(start_demo_server: Callable[..., DemoServer]) -> DemoServer:
    """One demo server with default options (accuracy 0.8, seed 0, no faults)."""
    return start_demo_server()


@pytest.fixture(scope="session")
def shared_demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    """One default demo server for the whole session; never stop or crash it."""
    server = launch_demo_server((), tmp_path_factory.mktemp("shared_demo_server") / "demo_server.stderr")
    yield server
    server.stop()
    if server.process.stdout is not None:
        server.process.stdout.close()
