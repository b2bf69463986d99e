"""A saturated model server is busy, not hung (server_watch): real demo model server, real probes.

Seen in bench/replicas.py: every replica, 4 slots full of the collector's requests, queued the
supervisor's generate probe past ``probe_timeout_s``, was taken for hung, restarted, and finally
retired, and the link ended RETRY. A failed probe while the server's own finished-requests counter
(vLLM's ``request_success_total``) moves is not counted; a frozen server is still found down.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from gymslurm.job.server_watch import Supervisor
from gymslurm.job.servers import start, stop
from gymslurm.launcher.settings import ServerSettings

pytestmark = pytest.mark.e2e

QUESTION = {"messages": [{"role": "user", "content": "What is 2 + 3?"}]}


def _model(tmp_path: Path) -> ServerSettings:
    """One slot, 0.6 s a completion: an idle probe answers in 0.6 s, within its 1.2 s; behind the
    load threads' queue (four waiting for the slot) it waits about 2.4 s more and fails."""
    import sys

    return ServerSettings(
        name="policy",
        command=[
            sys.executable,
            "-m",
            "gymslurm",
            "demo-model-server",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--slots",
            "1",
            "--latency-ms",
            "600",
        ],
        probe="chat_completions",
        probe_timeout_s=1.2,
        probe_failures=2,
        probe_interval_s=0.5,
        startup_timeout_s=60,
        collector_override=None,
    )


def _busy(url: str, stop_event: threading.Event) -> None:
    with httpx.Client(timeout=60) as client:
        while not stop_event.is_set():
            try:
                client.post(f"{url}/v1/chat/completions", json=QUESTION)
            except httpx.HTTPError:  # the server frozen, then stopped, at the test's end
                return


def test_a_saturated_model_server_is_not_taken_for_hung_and_a_frozen_one_is(tmp_path: Path) -> None:
    """Four load threads keep its one slot full: probes time out in its queue, yet six rounds find
    it healthy (its counter moves); SIGSTOPped, two rounds find it down."""
    server = start(_model(tmp_path), tmp_path / "policy.log")
    events: list[tuple[str, str]] = []
    supervisor = Supervisor([server], None, lambda event, s, cause: events.append((event, cause)))
    stop_event = threading.Event()
    load = [threading.Thread(target=_busy, args=(server.url, stop_event), daemon=True) for _ in range(4)]
    try:
        for thread in load:
            thread.start()
        time.sleep(1.5)  # the slot is full and requests wait behind it
        for _ in range(6):
            supervisor.round()
            time.sleep(0.3)
        assert [e for e in events if e[0] != "started"] == [], events
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        for _ in range(3):
            supervisor.round()
        assert any(event in {"down", "gave_up", "restarted"} for event, _ in events), events
    finally:
        stop_event.set()
        if server.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.pid, signal.SIGCONT)
        stop(server)
