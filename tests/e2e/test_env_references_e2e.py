"""``${oc.env:NAME}`` in ``servers[].env`` and ``collector.env`` through a real local submit (issue 20).

One ``gymslurm submit --wait`` on the local backend: the demo server is started by command with
``DEMO_API_KEY: ${oc.env:GS_E2E_SERVER_VALUE}`` (a plainly named variable under a credential-named
key) and the collector with ``JUDGE_API_KEY: ${oc.env:GS_E2E_COLLECTOR_VALUE}``; both variables are
exported to ``submit`` only. Every task's first attempt gets the ``rejected_key`` fault: the server
echoes its own key ("Incorrect API key provided: V"), which the collector was never given. While the
run goes, every ``/proc/*/cmdline`` is sampled, with the environment of the demo server and of the
collector; afterwards every file under the test's folder and the output of ``submit``, ``status``,
``logs`` and ``health`` are searched.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e.helpers import gymslurm, write_tasks

pytestmark = [pytest.mark.e2e, pytest.mark.every_process]  # a neighbour's processes would be sampled

SERVER_VALUE = "GS-E2E-SERVER-KEY-7c41d9"
COLLECTOR_VALUE = "GS-E2E-COLLECTOR-KEY-2e88b0"
EXPORTED = {"GS_E2E_SERVER_VALUE": SERVER_VALUE, "GS_E2E_COLLECTOR_VALUE": COLLECTOR_VALUE}


@dataclass
class Seen:
    """What the sampler saw: every command line, and the environments of this run's processes."""

    lines: set[str] = field(default_factory=set)
    servers: list[str] = field(default_factory=list)
    collectors: list[str] = field(default_factory=list)


@contextmanager
def sampling(folder: Path) -> Iterator[Seen]:
    """Sample ``/proc`` while the block runs; the environments of this run's gymslurm processes."""
    seen, stop, done = Seen(), threading.Event(), set()

    def poll() -> None:
        while not stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    seen.lines.add(line)
                    if (entry.name, line) in done or " -m gymslurm " not in line:
                        continue
                    environ = (entry / "environ").read_bytes().decode(errors="replace")
                    if str(folder) not in environ + line and "GS_E2E_" not in environ:
                        continue  # another test's process (this run's inherit the exported variables)
                    done.add((entry.name, line))
                    if " demo-server " in line:
                        seen.servers.append(environ)
                    elif line.rstrip().endswith(" -m gymslurm collect"):
                        seen.collectors.append(environ)
                except OSError:
                    continue
            time.sleep(0.02)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


def _benchmark(tmp_path: Path) -> Path:
    py = sys.executable
    tasks = [{"_demo_fault": "rejected_key", "_demo_fault_attempts": 1} for _ in range(3)]
    dataset = write_tasks(tmp_path / "tasks.jsonl", tasks)
    server = [py, "-m", "gymslurm", "demo-server", "--host", "{host}", "--port", "{port}"]
    server += ["--latency-ms", "300"]  # long enough for the sampler to see the processes
    bench = tmp_path / "bench.yaml"
    bench.write_text(
        json.dumps(
            {
                "dataset": str(dataset),
                "shards": 1,
                "run_root": str(tmp_path / "runs"),
                "backend": "local",
                "servers": [
                    {
                        "name": "env",
                        "command": server,
                        "health_path": "/health",
                        "env": {"DEMO_API_KEY": "${oc.env:GS_E2E_SERVER_VALUE}"},
                    }
                ],
                "collector": {
                    "command": [py, "-m", "gymslurm", "collect"],
                    "overrides": ["+progress=plain", "+summary=false"],
                    "env": {"JUDGE_API_KEY": "${oc.env:GS_E2E_COLLECTOR_VALUE}"},
                },
                "slurm": {"python": py},
                "aggregation": {
                    "command": [py, "-m", "gymslurm", "aggregate", "{inputs}", "+output_jsonl_fpath={output}"]
                },
            }
        )
    )
    return bench


@dataclass
class Run:
    """One finished submit: what was written and printed, and what the sampler saw."""

    run: Path
    texts: dict[str, str]
    seen: Seen


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp_path = tmp_path_factory.mktemp("env-references")
    bench = _benchmark(tmp_path)
    outputs: dict[str, str] = {}
    with sampling(tmp_path) as seen:
        done = gymslurm("submit", str(bench), "--wait", env=EXPORTED)
        assert done.returncode == 0, done.stdout + done.stderr
        (run,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
        for name, result in {
            "submit": done,
            "status": gymslurm("status", str(run)),
            "logs": gymslurm("logs", str(run), "0"),
            "health": gymslurm("health", str(run / "output" / "merged" / "rollouts.jsonl")),
        }.items():
            outputs[f"{name} stdout"], outputs[f"{name} stderr"] = result.stdout, result.stderr
    files = {str(p): p.read_bytes().decode(errors="replace") for p in tmp_path.rglob("*") if p.is_file()}
    lines = {f"cmdline {i}": line for i, line in enumerate(sorted(seen.lines))}
    return Run(run, {**files, **outputs, **lines}, seen)


def _holding(texts: dict[str, str], value: str) -> list[str]:
    return [where for where, text in texts.items() if value in text]


def test_each_process_receives_the_value_its_env_names(finished: Run) -> None:
    """The server gets GS_E2E_SERVER_VALUE's value as DEMO_API_KEY, the collector its own, and
    neither the other's (a variable named under a credential-named key is withheld from the rest)."""
    servers, collectors = finished.seen.servers, finished.seen.collectors
    assert servers and collectors, "the sampler saw the demo server and the collector"
    assert all(f"DEMO_API_KEY={SERVER_VALUE}\0" in env for env in servers)
    assert all(f"JUDGE_API_KEY={COLLECTOR_VALUE}\0" in env for env in collectors)
    assert not any(COLLECTOR_VALUE in env for env in servers)
    assert not any(SERVER_VALUE in env for env in collectors)


def test_no_file_log_output_or_command_line_holds_either_value(finished: Run) -> None:
    """Run files (scripts, ledgers, logs, outputs, sidecars, health), command outputs and argv: 0 hits."""
    assert not _holding(finished.texts, SERVER_VALUE) and not _holding(finished.texts, COLLECTOR_VALUE)


def test_the_key_the_server_echoed_is_saved_redacted(finished: Run) -> None:
    """The first attempts' failures are saved with the server's refusal, its key replaced."""
    sidecars = [where for where in finished.texts if where.endswith("_failures.jsonl")]
    assert sidecars and all(
        "Incorrect API key provided: <redacted>" in finished.texts[where] for where in sidecars
    )
