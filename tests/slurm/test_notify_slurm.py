"""Notifications of a real Slurm run (docs/notifications.md): a webhook and a command, each event once.

The receiver listens on the sandbox bridge's address (jobs run on nodes a1..a4, each its own network
namespace: the login node's loopback is not theirs). It is down at submit and during the first
link, up for a while, down again (restarted mid-run), then up until the end: every event must
arrive once at the webhook and once at the command, and the URL's secret in no run file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import wait_until
from tests.unit.test_launcher_notify import Receiver, _free_port

from .helpers import SlurmCluster, scenario_user
from .launcher_chains import Chain

pytestmark = pytest.mark.slurm

BRIDGE = "10.77.0.1"  # the login node on the sandbox's node bridge (docs/slurm-sandbox.md)
EVENTS = {"run_submitted", "link_failed", "budget_warning", "shard_stopped", "aggregation_done", "run_done"}


def test_each_event_arrives_once_with_the_receiver_restarted_mid_run(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Receiver down at submit and the first link, up, down during the second link, up again: every
    event reaches the webhook and the command exactly once; the webhook's secret is in no run file."""
    port, secret = _free_port(), "hookS3CR3Tslurm"
    user = scenario_user(slurm_session_dir, "notify")
    out = user.workdir / "command-events.jsonl"
    script = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read() + '\\n')"
    notify = (
        "budget:\n  gpu_hours: 1000\n  warn_at: 0.000001\nnotify:\n"
        f"  - webhook: http://{BRIDGE}:{port}/{secret}\n    timeout_s: 1\n    attempts: 30\n"
        f"  - command: [{slurm_python}, -c, {json.dumps(script)}]\n"
    )
    steps = [{"exit": 1}, {"exit": 75, "progress": 1, "sleep": 25}, {"exit": 0, "sleep": 5}]
    chain = Chain(user, slurm_python, steps, overrides=["slurm.gpus=1"], extra_yaml=notify)
    chain.submit()
    receiver: Receiver | None = None
    try:
        assert chain.run is not None
        wait_until(lambda: len(chain.decisions()) >= 1, 240, "the first link's decision")
        receiver = Receiver(port, host=BRIDGE)
        wait_until(lambda: receiver is not None and bool(receiver.bodies), 240, "a first delivery")
        chain.wait_for_calls(2)
        receiver.stop()  # restarted mid-run: down during the second link
        first = list(receiver.bodies)
        wait_until(lambda: len(chain.decisions()) >= 2, 240, "the second link's decision")
        receiver = Receiver(port, host=BRIDGE)
        report = chain.wait(timeout=300)
        assert report["shards"][0]["verdict"] == "DONE"
        wait_until(lambda: {b["event"] for b in [*first, *receiver.bodies]} == EVENTS, 180, "every event")
        webhook = [b["id"] for b in [*first, *receiver.bodies]]
        assert len(webhook) == len(set(webhook)), f"an event arrived twice: {webhook}"
        commands = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
        assert {b["event"] for b in commands} == EVENTS
        assert len({b["id"] for b in commands}) == len(commands)
        files = [p for p in chain.run.rglob("*") if p.is_file()]
        assert [str(p) for p in files if secret in p.read_text(errors="replace")] == []
    finally:
        if receiver is not None:
            receiver.stop()
        chain.cancel()
