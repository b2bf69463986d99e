"""Helpers for Slurm end-to-end tests with the REAL collector and demo Environment Server.

A :class:`RealChain` is a :class:`~.launcher_chains.Chain` whose benchmark runs ``gymslurm
collect`` against a ``gymslurm demo-server`` that every job starts inside its allocation (with
the given fault and latency flags), on a dataset made by the benchmark's ``dataset_command``,
and merges the shards with ``gymslurm aggregate``. A scenario is a dict: ``tasks``, ``shards``,
``server_flags``, ``collector`` (extra collector overrides), ``slurm`` (YAML lines of the
``slurm`` section, indented by two spaces) and optionally ``server_yaml`` (more keys of the
server, indented by four spaces; ``policy_yaml`` / ``demo_yaml``: keys of one of them only),
``collector_yaml`` (more keys of the collector, indented by two spaces) and ``model_flags`` (a demo
model server first, with these flags, which the Environment Server asks for its answers). The
chain's ``overrides`` are typed on ``submit``'s command line.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support import wait_until

from .helpers import TEST_USER, SlurmUser
from .launcher_chains import Chain

COLLECTOR_OVERRIDES = ["+route_failures_to_sidecar=true", "+progress=plain"]
ACTIVE_STATES = "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,REQUEUED,RESIZING"


class RealChain(Chain):
    """A demo benchmark with the real collector and a demo server started by command in each job."""

    def __init__(self, user: SlurmUser, python: Path, spec: dict[str, Any]) -> None:
        super().__init__(user, python, steps=[])
        self.spec = spec
        self.submit_output = ""

    def _policy_yaml(self) -> str:
        """With ``spec["model_flags"]``: a demo model server first, which the Environment Server asks."""
        flags = self.spec.get("model_flags")
        if flags is None:
            return ""
        model = [
            str(self.python),
            "-m",
            "gymslurm",
            "demo-model-server",
            "--host",
            "{host}",
            "--port",
            "{port}",
        ]
        return (
            f"  - name: policy\n    command: {json.dumps([*model, *flags])}\n"
            "    probe: chat_completions\n    collector_override: null\n"
            f"{self.spec.get('server_yaml', '')}{self.spec.get('policy_yaml', '')}"
        )

    def _policy_flags(self) -> list[str]:
        """The Environment Server asks the model server, by the name it serves (``--model-name`` in
        ``model_flags``, else both servers' default): a model server refuses any other name, as vLLM does."""
        flags = self.spec.get("model_flags")
        if flags is None:
            return []
        named = (
            flags[flags.index("--model-name") : flags.index("--model-name") + 2]
            if "--model-name" in flags
            else []
        )
        return ["--policy-url", "{servers.policy.url}", *named]

    def submit(self) -> RealChain:
        """Write the benchmark (its dataset is made by ``dataset_command``) and submit it."""
        work, py, spec = self.user.workdir, self.python, self.spec
        server = [str(py), "-m", "gymslurm", "demo-server", "--host", "{host}", "--port", "{port}"]
        aggregate = [str(py), "-m", "gymslurm", "aggregate", "{inputs}", "+output_jsonl_fpath={output}"]
        make_data = [str(py), "-m", "gymslurm", "demo-server", "--write-dataset", "{dataset}"]
        dataset_line = f"dataset_command: {json.dumps([*make_data, '--n', str(spec['tasks'])])}\n"
        if spec.get("task_fields"):  # tasks scripted per index (demo faults): written here, not made
            tasks = self._scripted_tasks(spec["tasks"], spec["task_fields"])
            self.user.write("data.jsonl", tasks, mode=0o644)
            dataset_line = ""
        bench = self.user.write(
            "bench.yaml",
            f"dataset: {work / 'data.jsonl'}\n"
            f"{dataset_line}"
            f"run_root: {work / 'runs'}\nshards: {spec['shards']}\n"
            "servers:\n"
            f"{self._policy_yaml()}"
            "  - name: demo\n"
            f"    command: {json.dumps([*server, *spec['server_flags'], *self._policy_flags()])}\n"
            "    host: 127.0.0.1\n    port: 0\n    health_path: /health\n"
            f"{spec.get('server_yaml', '')}{spec.get('demo_yaml', '')}"
            "collector:\n"
            f"  command: {json.dumps([str(py), '-m', 'gymslurm', 'collect'])}\n"
            f"  overrides: {json.dumps([*COLLECTOR_OVERRIDES, *spec['collector']])}\n"
            f"{spec.get('collector_yaml', '')}"
            f"aggregation:\n  command: {json.dumps(aggregate)}\n"
            f"slurm:\n  python: {py}\n{spec['slurm']}",
            mode=0o644,
        )
        out = self.gymslurm("submit", str(bench), *self.overrides)
        self.submit_output = out
        match = re.search(r"gymslurm status (\S+)", out)
        assert match, out
        self.run = Path(match.group(1))
        return self

    @staticmethod
    def _scripted_tasks(count: int, fields: dict[int, dict[str, Any]]) -> str:
        """The demo dataset of ``count`` tasks, task ``i``'s ``task_input`` with ``fields[i]`` (JSONL)."""
        import tempfile

        from gymslurm.demo.server import write_dataset

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "tasks.jsonl"
            write_dataset(path, count, seed=0)
            rows = [json.loads(line) for line in path.read_text().splitlines()]
        for i, row in enumerate(rows):
            row["task_input"].update(fields.get(i, {}))
        return "".join(json.dumps(row) + "\n" for row in rows)

    def output(self, shard: int | None) -> Path:
        """A shard's results file (None: the merged one)."""
        assert self.run is not None
        return self.run / "output" / ("merged" if shard is None else f"shard-{shard:03d}") / "rollouts.jsonl"

    def rollout_ids(self, shard: int | None) -> Counter[str]:
        """How many lines of a results file carry each rollout id."""
        lines = self.output(shard).read_text().splitlines()
        return Counter(json.loads(line)["_ng_rollout_id"] for line in lines)

    def companion(self, shard: int | None, suffix: str) -> dict[str, Any]:
        """A JSON companion of a results file, e.g. ``_coverage.json``."""
        path = self.output(shard).with_name(f"rollouts{suffix}")
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def active_jobs(self) -> dict[str, str]:
        """Job ids of this run still in one of squeue's active states, with that state."""
        ledgers = [*range(self.spec["shards"]), None]
        mine = {r["job_id"] for s in ledgers for r in self.ledger(s) if "job_id" in r}
        out = subprocess.run(
            ["squeue", "-h", "-u", TEST_USER, "-t", ACTIVE_STATES, "-o", "%i %T"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        states = dict(line.split(maxsplit=1) for line in out.splitlines() if line.strip())
        return {job: state for job, state in states.items() if job in mine}

    def finished(self, timeout: float, let_go_s: float = 60) -> dict[str, Any]:
        """Wait for every shard and the aggregation; ``status --json`` once squeue let go of the run.

        The last link writes its final record before its job ends, so squeue may show it
        COMPLETING (or a cancelled lookahead successor) for a moment after; under a loaded
        machine that moment lasted past one poll (CI of stop 24). ``let_go_s`` bounds it: a job
        still active after that is a chain that did not end.
        """
        self.wait(timeout=timeout)
        wait_until(
            lambda: not self.active_jobs(),
            let_go_s,
            lambda: f"squeue to let go of the finished run's jobs (still active: {self.active_jobs()})",
            every_s=1.0,
        )
        return self.status()
