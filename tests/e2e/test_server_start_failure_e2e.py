"""A server that fails deterministically at start-up stops its chain at once, its error in status (issue 21).

Why: NeMo Gym's benchmark on a fresh checkout failed with ``uv: command not found`` 40 lines up a
server log, after 2 min 40 s and three infrastructure retries of the same error, and ``status``
showed only the end of a traceback. A start-up error that a retry would meet again must stop the
chain after one link (STOP_FAILED, no retry spent), and ``status`` must name its first error line.

One real ``gymslurm submit --wait`` on the local backend, with a server whose command prints what
a machine without uv prints and exits 127.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.e2e.helpers import gymslurm, write_tasks

pytestmark = pytest.mark.e2e

ERROR = "bash: line 1: uv: command not found"


def _benchmark(tmp_path: Path) -> Path:
    py = sys.executable
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{} for _ in range(3)])
    prints = f"echo 'Setting up the venv of resources_servers/weather'; echo '{ERROR}' >&2; exit 127"
    server = ["sh", "-c", prints]
    bench = tmp_path / "bench.yaml"
    bench.write_text(
        json.dumps(
            {
                "dataset": str(dataset),
                "shards": 1,
                "run_root": str(tmp_path / "runs"),
                "backend": "local",
                "servers": [{"name": "env", "command": server, "health_path": "/health"}],
                "collector": {"command": [py, "-m", "gymslurm", "collect"], "overrides": ["+progress=none"]},
                "slurm": {"python": py},
                "aggregation": {"enabled": False},
            }
        )
    )
    return bench


def test_a_deterministic_start_up_error_stops_after_one_link_and_status_names_it(tmp_path: Path) -> None:
    """One link, decision STOP_FAILED with 0 retries used; submit --wait and status print the error line."""
    done = gymslurm("submit", str(_benchmark(tmp_path)), "--wait")
    assert done.returncode != 0, done.stdout + done.stderr
    (run,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
    ledger = [json.loads(line) for line in (run / "shards" / "000" / "ledger.jsonl").read_text().splitlines()]
    decisions = [r for r in ledger if r["kind"] == "decision"]
    assert [d["decision"] for d in decisions] == ["STOP_FAILED"], decisions
    assert decisions[0]["budgets_after"]["infra_retries_used"] == 0
    assert len([r for r in ledger if r["kind"] == "start"]) == 1
    status = gymslurm("status", str(run))
    assert "uv: command not found" in status.stdout, status.stdout + status.stderr
