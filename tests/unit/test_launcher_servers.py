"""Environment Servers started by a job: health check, and stopping the whole process tree."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

from gymslurm.launcher.servers import ServerStartError, start, stop
from gymslurm.launcher.settings import ServerSettings

pytestmark = pytest.mark.e2e


def test_server_started_on_a_free_port_is_healthy_then_stopped_with_its_tree(tmp_path: Path) -> None:
    """A command server gets {port}, answers its health path, and stop() leaves no process of its tree."""
    script = "sleep 300 & exec " + sys.executable + " -m http.server --bind 127.0.0.1 {port}"
    settings = ServerSettings(
        name="web", command=["bash", "-c", script], health_path="/", startup_timeout_s=30
    )
    server = start(settings, tmp_path / "server.log")
    assert server.url.startswith("http://127.0.0.1:") and server.process is not None
    tree = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children(recursive=True)]
    assert len(tree) >= 2
    stop(server, grace_s=2)
    assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_server_that_exits_is_a_start_error(tmp_path: Path) -> None:
    """A server command that dies before becoming healthy raises, pointing at its log."""
    settings = ServerSettings(name="bad", command=["bash", "-c", "echo boom; exit 3"], startup_timeout_s=10)
    with pytest.raises(ServerStartError, match=r"server\.log"):
        start(settings, tmp_path / "server.log")


def test_server_given_by_url_is_adopted() -> None:
    """A server given by url is used as it is, with nothing started."""
    server = start(ServerSettings(name="up", url="http://10.0.0.1:80"), Path("/nonexistent.log"))
    assert (server.url, server.process) == ("http://10.0.0.1:80", None)
