"""Runs of the demo benchmark whose policy is a vLLM the link itself starts and supervises.

The supervision and replica modules each submit one such run, act on vLLM while it serves, and
their tests read what the run left. The supervision module's (``gymslurm submit --backend local``:
a real link starting docs/servers.md's "vLLM on CPU" server, the demo Environment Server asking it,
the real collector) is written by :func:`write_benchmark`. The replica module's is a suite
(docs/suites.md, :func:`write_suite`) submitted to the Slurm sandbox as the test user: the vLLM
replicas are its shared stack, started once by the link for every benchmark of it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from gymslurm.demo.arith import dataset_rows
from tests.e2e.launcher_chains_helpers import gymslurm, ledger, only_run, wait_until_final
from tests.vllm.harness import SERVED_MODEL, Vllm, group_alive, server_entry

# Each vLLM start is 80-180 s on two loaded cores: room for three in a row, and the rollouts.
RUN_TIMEOUT_S = 1500.0


@dataclass
class Run:
    """What a scenario left: the run directory, its final status and the pids of every vLLM it started."""

    path: Path
    report: dict[str, Any]
    vllm_pids: list[int]

    def output(self, benchmark: str | None = None) -> Path:
        """Shard 0's output folder: the run's, or a suite benchmark's own (``benchmarks/NAME``)."""
        return (self.path if benchmark is None else self.path / "benchmarks" / benchmark) / "output/shard-000"

    def coverage(self, benchmark: str | None = None) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.output(benchmark) / "rollouts_coverage.json").read_text())
        return data

    def failures(self) -> list[dict[str, Any]]:
        path = self.output() / "rollouts_failures.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def server_events(self) -> list[tuple[str, str]]:
        return [(r["name"], r["event"]) for r in ledger(self.path) if r["kind"] == "server"]

    def job_log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted((self.path / "logs").glob("*.out")))


def dataset_text(rows: int) -> str:
    """The demo dataset of ``rows`` tasks (``gymslurm demo-server --write-dataset``'s rows), as JSONL."""
    return "".join(orjson.dumps(row).decode() + "\n" for row in dataset_rows(rows, seed=0))


def benchmark_doc(
    vllm: Vllm, dataset: Path, run_root: Path, concurrency: int, python: str = sys.executable, **policy: Any
) -> dict[str, Any]:
    """The benchmark: vLLM (the recipe, fast probes, ``policy`` on top) and the demo Environment Server,
    run with ``python`` (the collector's and the Environment Server's interpreter, and the job's)."""
    entry = server_entry(vllm, name="policy", probe_interval_s=1, probe_timeout_s=10, **policy)
    env = {
        "name": "env",
        "health_path": "/health",
        "probe_interval_s": 1,
        "command": [
            python,
            "-m",
            "gymslurm",
            "demo-server",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--policy-url",
            "{servers.policy.url}",
            "--model-name",
            SERVED_MODEL,
            "--latency-ms",
            "300",
        ],
    }
    overrides = ["+route_failures_to_sidecar=true", f"+concurrency={concurrency}", "+progress=none"]
    return {
        "dataset": str(dataset),
        "run_root": str(run_root),
        "shards": 1,
        "servers": [entry, env],
        "collector": {"command": [python, "-m", "gymslurm", "collect"], "overrides": overrides},
        "slurm": {"python": python},
        "aggregation": {"enabled": False},
    }


def write_benchmark(tmp: Path, vllm: Vllm, rows: int, concurrency: int, **policy: Any) -> Path:
    """The benchmark of :func:`benchmark_doc` and its dataset of ``rows`` tasks, written into ``tmp``."""
    dataset = tmp / "data.jsonl"
    dataset.write_text(dataset_text(rows))
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(benchmark_doc(vllm, dataset, tmp / "runs", concurrency, **policy)))
    return path


def write_suite(
    write: Callable[[str, str], Path],
    vllm: Vllm,
    *,
    python: str,
    rows: dict[str, int],
    concurrency: int,
    slurm: dict[str, Any],
    **policy: Any,
) -> Path:
    """A suite of demo benchmarks (one per ``rows`` entry: its name, its tasks) whose shared stack is
    vLLM (the recipe, ``policy`` on top), one chain: one link starts it once for all of them.
    ``write(name, text)`` puts a file where the submitting user reads it; ``slurm``: the suite's
    ``slurm`` section beside ``python``."""
    dataset = write("data.jsonl", dataset_text(1))
    doc = benchmark_doc(vllm, dataset, dataset.parent / "runs", concurrency, python, **policy)
    bench = write("bench.yaml", yaml.safe_dump(doc))
    (stack,) = [s for s in doc["servers"] if s["name"] == "policy"]
    benchmarks = []
    for name, count in rows.items():
        data = write(f"{name}.jsonl", dataset_text(count))
        benchmarks.append({"name": name, "benchmark": str(bench), "dataset": str(data)})
    suite = {
        "run_root": str(dataset.parent / "runs"),
        "shards": 1,
        "stack": [stack],
        "slurm": {"python": python, **slurm},
        "aggregation": {"enabled": False},
        "benchmarks": benchmarks,
    }
    return write("vllm-suite.yaml", yaml.safe_dump(suite))


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = RUN_TIMEOUT_S) -> Any:
    """Poll ``predicate`` until it returns something true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def results(run: Path) -> int:
    """Rollouts saved so far: the run's, or every suite benchmark's together."""
    paths = [
        run / "output/shard-000/rollouts.jsonl",
        *run.glob("benchmarks/*/output/shard-000/rollouts.jsonl"),
    ]
    return sum(len(path.read_text().splitlines()) for path in paths if path.exists())


def server_pid(run: Path, name: str, event: str, nth: int = 0) -> int | None:
    """The pid of the ``nth`` ``event`` (started, restarted) ledger record of server ``name``, if written."""
    path = run / "shards/000/ledger.jsonl"
    if not path.exists():
        return None
    found = [
        r["pid"] for r in ledger(run) if r["kind"] == "server" and r["name"] == name and r["event"] == event
    ]
    return found[nth] if len(found) > nth else None


def submit(bench: Path, tmp: Path) -> Path:
    gymslurm("submit", str(bench), "--backend", "local")
    return only_run(tmp)


def finish(run: Path, vllms: tuple[str, ...] = ("policy",)) -> Run:
    """Wait for the run's final verdict; the pid of every start of the servers named ``vllms``."""
    report = wait_until_final(run, timeout_s=RUN_TIMEOUT_S, aggregation=False)
    pids = [
        r["pid"]
        for r in ledger(run)
        if r["kind"] == "server" and r["event"] in ("started", "restarted") and r["name"] in vllms
    ]
    return Run(run, report, pids)


def kill_group(pid: int, signum: int = signal.SIGKILL) -> None:
    """Signal vLLM's whole process group (API server, EngineCore, Worker): a real crash of the server."""
    os.killpg(pid, signum)


def leftovers(run: Run) -> list[int]:
    """Processes of any vLLM the run started that are still alive."""
    return [pid for pgid in run.vllm_pids for pid in group_alive(pgid)]
