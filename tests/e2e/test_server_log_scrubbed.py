"""A server's own log holds no secret (issue 20: scrub by value, "what servers echo").

The link no longer hands a server its log file: the server writes to a pipe and the link appends
each line to ``logs/server-NAME-sNNN.log`` with every secret it learned removed. Here a server
prints the credentials it was given in its ``env`` (as NeMo Gym servers print their configuration
at start-up) before it serves; after a real local submit its log has the line, not the values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.e2e.helpers import gymslurm, write_tasks

pytestmark = pytest.mark.e2e

KEY, URL_PASSWORD = "CNRY-SRVLOG-KEY-9f3k2", "CNRY-SRVLOG-PW-7q1z8"
ECHO = (
    "import os, runpy, sys; "
    "print('judge config: key', os.environ['JUDGE_API_KEY'], 'db', os.environ['JUDGE_DB'], flush=True); "
    "sys.argv = ['gymslurm', 'demo-server', '--host', sys.argv[1], '--port', sys.argv[2]]; "
    "runpy.run_module('gymslurm', run_name='__main__')"
)


def test_a_server_printing_its_credentials_leaves_none_in_its_log(tmp_path: Path) -> None:
    """The server's start-up line is in its log, its API key and its URL's password are not."""
    py = sys.executable
    bench = tmp_path / "bench.yaml"
    bench.write_text(
        json.dumps(
            {
                "name": "srvlog",
                "dataset": str(write_tasks(tmp_path / "tasks.jsonl", [{}])),
                "shards": 1,
                "run_root": str(tmp_path / "runs"),
                "backend": "local",
                "slurm": {"python": py},
                "servers": [
                    {
                        "name": "env",
                        "command": [py, "-c", ECHO, "{host}", "{port}"],
                        "health_path": "/health",
                        "env": {
                            "JUDGE_API_KEY": KEY,
                            "JUDGE_DB": f"postgres://judge:{URL_PASSWORD}@db:5432/x",
                        },
                    }
                ],
                "collector": {"command": [py, "-m", "gymslurm", "collect"], "overrides": ["+progress=plain"]},
                "aggregation": {"enabled": False},
            }
        )
    )
    done = gymslurm("submit", str(bench), "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    (log,) = (tmp_path / "runs").glob("*/logs/server-env-s000.log")
    text = log.read_text()
    assert "judge config: key" in text, text
    assert KEY not in text and URL_PASSWORD not in text, text
