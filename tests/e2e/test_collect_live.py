"""The collector's live progress record and its stall window, against a real demo server process.

Why: ``gymslurm status`` reads ``<stem>_progress.json`` while a link runs (coverage stays at 0
until a link ends otherwise), and a hung server must end the collection with exit 1 after
``stall_window_s`` instead of burning the allocation until its time limit. The hang is real: the
server process is stopped with SIGSTOP, so its socket accepts and never answers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DemoServer
from tests.e2e.helpers import collect, collect_command, write_tasks
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def _progress(output: Path) -> dict[str, Any] | None:
    path = output.with_name(output.stem + "_progress.json")
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data


def test_live_progress_record_rises_during_a_collection(
    tmp_path: Path, start_demo_server: Callable[..., DemoServer]
) -> None:
    """While dispatching, <stem>_progress.json shows a growing count; at the end, all of it, ended.

    The collection lasts about 6 s (40 tasks of 300 ms, 2 at a time) and its start may take a minute
    on a loaded machine (CI run 5: 30 s were not enough at a load average of 42, when the
    collection lasted 2 s)."""
    server = start_demo_server("--latency-ms", "300")
    dataset, output = write_tasks(tmp_path / "tasks.jsonl", [{}] * 40), tmp_path / "out.jsonl"
    argv = collect_command(dataset, output, server.url, "+concurrency=2", "+live_progress_interval_s=0.2")
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: list[int] = []

    def midway() -> bool:
        record = _progress(output)
        if record is not None and not record["ended"]:
            seen.append(record["successful"])
        return bool(seen) and 0 < seen[-1] < 40

    wait_until(midway, 120, "a live record between 0 and 40 successful", every_s=0.05)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    final = _progress(output)
    assert final is not None and final["format_version"] == 2
    assert (final["successful"], final["expected"], final["in_flight"], final["ended"]) == (40, 40, 0, True)
    assert final["rate_per_s"] > 0 and final["new_outcomes"] == 40 and not final["stalled"]
    assert seen == sorted(seen), "the live count never goes down"


def test_hung_server_ends_collection_with_exit_1_after_the_stall_window(
    tmp_path: Path, start_demo_server: Callable[..., DemoServer]
) -> None:
    """SIGSTOP the server mid-run: exit 1 after stall_window_s, no budget spent, a resume finishes."""
    server = start_demo_server("--latency-ms", "50")
    dataset, output = write_tasks(tmp_path / "tasks.jsonl", [{}] * 400), tmp_path / "out.jsonl"
    overrides = ("+concurrency=4", "+live_progress_interval_s=0.2", "+stall_window_s=2")
    process = subprocess.Popen(
        collect_command(dataset, output, server.url, *overrides),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(
        lambda: ((_progress(output) or {}).get("successful") or 0) > 0, 120, "first outcomes", every_s=0.05
    )
    server.process.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        _, stderr = process.communicate(timeout=60)
        took = time.monotonic() - stopped_at
    finally:
        server.process.send_signal(signal.SIGCONT)
    assert process.returncode == 1, stderr
    assert "stalled: no outcome saved for 2s" in stderr and took >= 2
    coverage = json.loads(output.with_name("out_coverage.json").read_text())
    assert coverage["failed"] == 0 and coverage["counted_failures"] == 0 and coverage["missing"] > 0
    record = _progress(output)
    assert record is not None and record["stalled"] and record["ended"]
    resumed = collect(dataset, output, server.url, "+resume_from_cache=true", "+stall_window_s=30")
    assert resumed.returncode == 0, resumed.stderr
