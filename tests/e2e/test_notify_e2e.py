"""Notifications of a real local run: a real HTTP receiver that is down for the first part of the run,
and a command; every event arrives once at each, and the webhook URL (a secret) is in no run file."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import gymslurm, only_run, wait_until_final, write_benchmark
from tests.unit.test_launcher_notify import Receiver, _free_port

pytestmark = pytest.mark.e2e

EVENTS = {"run_submitted", "link_failed", "budget_warning", "shard_stopped", "aggregation_done", "run_done"}


def test_each_event_arrives_once_with_the_receiver_down_during_part_of_the_run(tmp_path: Path) -> None:
    """Receiver down at submit and during the first link: what failed is delivered by a later pass;
    the command gets every event as it happens; no event twice; the URL's secret reaches no file."""
    port, secret = _free_port(), "hookS3CR3Tpath"
    out = tmp_path / "command-events.jsonl"
    script = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read() + '\\n')"
    extra = (
        "slurm:\n  gpus: 3600\nbudget:\n  gpu_hours: 100000\n  warn_at: 0.00001\nnotify:\n"
        f"  - webhook: http://127.0.0.1:{port}/{secret}\n    timeout_s: 1\n    attempts: 20\n"
        f"  - command: [{sys.executable}, -c, {json.dumps(script)}]\n"
    )
    # The links after the first take long enough that a delivery pass runs once the receiver is up
    # and the failed attempts' back-off has passed (with 2 s the run could end before: no pass left).
    steps = [{"exit": 1}, {"exit": 75, "progress": 1, "sleep": 12}, {"exit": 0, "sleep": 5}]
    bench = write_benchmark(tmp_path, steps, extra=extra)
    gymslurm("submit", str(bench), "--backend", "local", "aggregation.command=[/bin/true]")
    run = only_run(tmp_path)
    deadline = time.monotonic() + 120
    while '"decision"' not in (run / "shards/000/ledger.jsonl").read_text():  # the first link decided
        assert time.monotonic() < deadline, "the first link never decided"
        time.sleep(0.2)
    receiver = Receiver(port)
    try:
        wait_until_final(run, timeout_s=180)
        while {b["event"] for b in receiver.bodies} != EVENTS and time.monotonic() < deadline + 120:
            time.sleep(0.2)
        webhook = [b["id"] for b in receiver.bodies]
    finally:
        receiver.stop()
    assert {b["event"] for b in receiver.bodies} == EVENTS
    assert len(webhook) == len(set(webhook)), f"an event arrived twice: {webhook}"
    commands = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert {b["event"] for b in commands} == EVENTS
    assert len({b["id"] for b in commands}) == len(commands)
    stopped = next(b for b in receiver.bodies if b["event"] == "shard_stopped")
    assert (stopped["shard"], stopped["verdict"]) == (0, "DONE")
    notes = (run / "notify.jsonl").read_text()
    assert '"step":"error"' in notes, "the receiver was down: an attempt failed and was tried again later"
    leaked = [str(p) for p in run.rglob("*") if p.is_file() and secret in p.read_text(errors="replace")]
    assert leaked == []
    assert secret not in gymslurm("status", str(run)).stdout
