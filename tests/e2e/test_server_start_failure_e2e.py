"""A start-up failure that repeats with nothing changed stops its chain, its error in status (issues 21, 34).

Why: NeMo Gym's benchmark on a fresh checkout failed with ``uv: command not found`` 40 lines up a
server log, after 2 min 40 s and three infrastructure retries of the same error, and ``status``
showed only the end of a traceback. But a server stack may also fail to start for a reason that
passes (Ray's "current node timed out during startup" under load passed 11 minutes later), so one
failure is evidence of nothing: it is retried, and the same failure in the next link, nothing
changed, stops the chain (STOP_FAILED after one retry), with ``status`` naming its first error line.

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


def test_a_repeated_start_up_error_stops_after_two_links_and_status_names_it(tmp_path: Path) -> None:
    """Two links, RETRY then STOP_FAILED (one retry used); submit --wait and status print the error line."""
    done = gymslurm("submit", str(_benchmark(tmp_path)), "--wait")
    assert done.returncode != 0, done.stdout + done.stderr
    (run,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
    ledger = [json.loads(line) for line in (run / "shards" / "000" / "ledger.jsonl").read_text().splitlines()]
    decisions = [r for r in ledger if r["kind"] == "decision"]
    assert [d["decision"] for d in decisions] == ["RETRY", "STOP_FAILED"], decisions
    assert decisions[1]["budgets_after"]["infra_retries_used"] == 1
    assert "the same start-up failure as the link before" in decisions[1]["reason"]
    assert len([r for r in ledger if r["kind"] == "start"]) == 2
    status = gymslurm("status", str(run))
    assert "uv: command not found" in status.stdout, status.stdout + status.stderr
