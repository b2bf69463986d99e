"""``gymslurm reverify`` with NeMo Gym's spelling (issue 21): ``+head_server.host/port
+environment_routing_mode=legacy +environment_server_name=NAME`` finds the grader as ``collect``
finds its server, through the head server's configuration; the re-grades equal those of
``+environment_server_url``. Real processes: the demo server grades, a loopback HTTP server answers
as NeMo Gym's head server (``GET /global_config_dict_yaml``)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import launch_demo_server
from tests.e2e.helpers import REPO_ROOT, collect, read_jsonl, write_tasks

pytestmark = pytest.mark.e2e


def _head_server(config: dict[str, object]) -> tuple[http.server.ThreadingHTTPServer, int]:
    body = json.dumps(config).encode()  # JSON is YAML: what NeMo Gym's head server sends, parsed alike

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = 200 if self.path == "/global_config_dict_yaml" else 404
            self.send_response(status)
            self.send_header("Content-Length", str(len(body) if status == 200 else 0))
            self.end_headers()
            if status == 200:
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def _reverify(source: Path, output: Path, *server: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "gymslurm",
        "reverify",
        "--judge-failed-only",
        f"+input_jsonl_fpath={source}",
        f"+output_jsonl_fpath={output}",
        *server,
    ]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, int]]:
    """A run whose two tasks ended in judge failures that kept the answer, the grader, a head server."""
    root = tmp_path_factory.mktemp("reverify-by-name")
    grader = launch_demo_server((), root / "grader.stderr")
    parts = urlsplit(grader.url)
    config = {
        "grader_env": {
            "environment_servers": {
                "single_agent_turn": {
                    "host": parts.hostname,
                    "port": parts.port,
                    "agent_server": {"name": "agent"},
                }
            }
        }
    }
    head, port = _head_server(config)
    try:
        tasks = write_tasks(root / "tasks.jsonl", [{"_demo_fault": "judge_failed"}] * 2 + [{}])
        source = root / "run" / "out.jsonl"
        done = collect(tasks, source, grader.url, "+retry_in_invocation=false", "+require_complete=true")
        assert done.returncode == 75, done.stderr
        yield source, grader.url, port
    finally:
        head.shutdown()
        grader.stop()


def test_reverify_finds_the_grader_by_nemo_gyms_name(judged: tuple[Path, str, int]) -> None:
    """NeMo Gym's spelling re-judges the same two answers, with the same rewards, as the URL."""
    source, url, port = judged
    root = source.parent.parent
    by_url = _reverify(source, root / "by-url" / "out.jsonl", f"+environment_server_url={url}")
    by_name = _reverify(
        source,
        root / "by-name" / "out.jsonl",
        "+head_server.host=127.0.0.1",
        f"+head_server.port={port}",
        "+environment_routing_mode=legacy",
        "+environment_server_name=grader_env",
    )
    assert by_url.returncode == 0 and by_name.returncode == 0, by_url.stderr + by_name.stderr
    assert "re-judged 2 saved answers" in by_name.stdout, by_name.stdout

    def rewards(folder: str) -> list[tuple[str, object]]:
        rows = read_jsonl(source.parent.parent / folder / "out.jsonl")
        return sorted((row["_ng_rollout_id"], row.get("reward")) for row in rows)

    assert rewards("by-name") == rewards("by-url") and len(rewards("by-name")) == 3


def test_a_name_the_head_server_does_not_know_is_refused_before_anything_is_written(
    judged: tuple[Path, str, int],
) -> None:
    """An unknown name: exit 2, the names there are, no output written."""
    source, _, port = judged
    output = source.parent.parent / "refused" / "out.jsonl"
    refused = _reverify(source, output, f"+head_server.port={port}", "+environment_server_name=nope")
    assert refused.returncode == 2 and "names no Environment Server 'nope'" in refused.stderr, refused.stderr
    assert "grader_env" in refused.stderr and not output.parent.exists()
