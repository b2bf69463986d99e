"""The collector's automatic health report equals the one `gymslurm health` computes from the files.

The collector hands health its final in-memory states (its reconciliation advanced by every outcome
it saved); these tests pin that the report is the same as reading the finished run again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gymslurm.health import run_health_check
from tests.e2e.helpers import collect, companion, write_tasks

pytestmark = pytest.mark.e2e

# A completed, an unscored and a kept-masked result, a terminal and an exhausted retryable failure,
# and an omission: every count of a report but ``unfinished``.
MIX: list[dict[str, Any]] = [
    {},
    {"_demo_fault": "unscored"},
    {"_demo_fault": "masked_kept"},
    {"_demo_fault": "terminal"},
    {"_demo_fault": "retryable"},
    {"_demo_fault": "omit"},
]


def test_collected_report_equals_the_standalone_report(shared_demo_server: Any, tmp_path: Path) -> None:
    """The report written at the end of collection equals `gymslurm health` on the same run."""
    dataset = write_tasks(tmp_path / "d.jsonl", MIX)
    output = tmp_path / "out.jsonl"
    run = collect(dataset, output, shared_demo_server.url, "+route_failures_to_sidecar=true")
    written = json.loads(companion(output, "_health.json").read_text())
    written.pop("written_at")
    standalone = run_health_check(output).to_json("")
    standalone.pop("written_at")
    assert written == standalone, run.stderr
    assert written["counts"]["final_failures"] == 2 and written["counts"]["omitted"] == 1


def test_superseded_result_skips_the_collected_check(shared_demo_server: Any, tmp_path: Path) -> None:
    """Retry-masked results superseded within the invocation skip both checks with the same reason."""
    dataset = write_tasks(tmp_path / "d.jsonl", [*MIX, {"_demo_fault": "masked"}])
    output = tmp_path / "out.jsonl"
    run = collect(dataset, output, shared_demo_server.url, "+route_failures_to_sidecar=true")
    standalone = run_health_check(output, standalone=False)
    assert standalone.status == "skipped"
    assert f"gymslurm collect: {standalone.message}" in run.stderr
    assert not companion(output, "_health.json").exists()
