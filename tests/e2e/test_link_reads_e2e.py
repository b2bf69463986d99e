"""A link reads its ledger once per phase and its collector's coverage once per phase (issue 17).

Real links on the local backend (the rendered scripts, ``chain-step`` processes, the stand-in
collector); ``reads_hook/sitecustomize.py`` logs, in every process of the jobs, each ledger read, each
coverage read and when the link's collector ran. A link's two phases: up to its collector's start
(lock, accounting, start record, lookahead) and from its collector's end (decision, lookahead or
aggregation and cancel).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import decisions, gymslurm, only_run, wait_until_final, write_benchmark

pytestmark = pytest.mark.e2e

HOOK = Path(__file__).parent / "reads_hook"


def _reads_per_phase(log: Path, ledger_path: str) -> list[dict[str, int]]:
    """Per link process (in the order they started): reads of ``ledger_path`` and of the coverage
    before its collector started and after it ended."""
    events: dict[int, list[dict[str, object]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        event = json.loads(line)
        events[int(event["pid"])].append(event)
    links = []
    for trail in events.values():
        marks = [event.get("collector") for event in trail]
        if "start" not in marks:
            continue  # the aggregation job, a collector process: not a link
        start, end = marks.index("start"), marks.index("end")
        phases = {"start": trail[:start], "end": trail[end + 1 :]}
        counts = {}
        for name, part in phases.items():
            counts[f"ledger_{name}"] = sum(event.get("read") == ledger_path for event in part)
            counts[f"coverage_{name}"] = sum("coverage" in event for event in part)
        links.append(counts)
    return links


def test_a_link_reads_its_ledger_once_per_phase_with_a_budget_and_an_aggregation(tmp_path: Path) -> None:
    """Two links (CONTINUE, then DONE, which queues the aggregation and cancels its lookahead), with a
    GPU-hours budget set (every chain's spend read at both phases): each link reads its own ledger
    once at its start and once after its collector, and the coverage once in each phase."""
    bench = write_benchmark(
        tmp_path, [{"exit": 75, "progress": 1}, {"exit": 0, "progress": 1}], "budget:\n  gpu_hours: 1000\n"
    )
    log = tmp_path / "reads.jsonl"
    hook = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")])),
        "GYMSLURM_TEST_READS": str(log),
    }
    gymslurm(
        "submit", str(bench), "--backend", "local", "shards=1", "aggregation.command=[/bin/true]", env=hook
    )
    run = only_run(tmp_path)
    wait_until_final(run)
    assert decisions(run) == ["CONTINUE", "DONE"]
    links = _reads_per_phase(log, str((run / "shards" / "000" / "ledger.jsonl").resolve()))
    once = {"ledger_start": 1, "coverage_start": 1, "ledger_end": 1, "coverage_end": 1}
    assert links == [once, once]
