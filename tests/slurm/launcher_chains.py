"""Helpers for the launcher's Slurm end-to-end tests: one submitted benchmark around the stand-in.

A :class:`Chain` writes a benchmark whose collector is the scripted stand-in
(``launcher_standin_collector.py``, copied into the user's directory), submits it with
``gymslurm submit`` as the test user, and reads the run's ledgers and ``status --json``.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import on_change, run_records, wait_until

from .helpers import SlurmUser

STANDIN = Path(__file__).with_name("launcher_standin_collector.py")
FINAL = {"DONE", "FAILED", "EXHAUSTED", "STALLED", "CANCELLED", "BUDGET", "PAUSED"}


@dataclass
class Chain:
    """One benchmark submitted to the real Slurm as the test user."""

    user: SlurmUser
    python: Path
    steps: list[dict[str, Any]]
    overrides: list[str] = field(default_factory=list)
    slurm_yaml: str = ""
    collector_command: list[str] | None = None
    run: Path | None = None
    # e.g. helpers.cluster_env("n"): every gymslurm command (and so every job) talks to that cluster.
    env: dict[str, str] | None = None
    extra_yaml: str = ""  # more top-level keys of the benchmark (budget:, notify:)
    rows: int = 4  # dataset rows: at least the shards (submit refuses shards with nothing to do)

    def gymslurm(self, *args: str, timeout: float = 120) -> str:
        """Run ``gymslurm ARGS`` as the test user in its directory (against ``env``'s cluster)."""
        return self.user.run([str(self.python), "-m", "gymslurm", *args], timeout=timeout, env=self.env)

    def submit(self) -> Chain:
        """Write the benchmark and submit it; remembers the run directory."""
        work = self.user.workdir
        time_line = "" if re.search(r"^\s+time:", self.slurm_yaml, re.M) else "  time: '00:05:00'\n"
        standin = self.user.write("standin.py", STANDIN.read_text())
        self.user.write("steps.json", json.dumps(self.steps), mode=0o644)
        self.user.write(
            "data.jsonl", "".join(json.dumps({"q": i}) + "\n" for i in range(self.rows)), mode=0o644
        )
        command = self.collector_command or [str(self.python), str(standin), str(work / "steps.json")]
        bench = self.user.write(
            "bench.yaml",
            f"dataset: {work / 'data.jsonl'}\nrun_root: {work / 'runs'}\nshards: 1\n"
            f"collector:\n  command: {json.dumps(command)}\n"
            f"aggregation:\n  command: [/bin/true]\n"
            f"slurm:\n  python: {self.python}\n{time_line}{self.slurm_yaml}{self.extra_yaml}",
            mode=0o644,
        )
        out = self.gymslurm("submit", str(bench), *self.overrides)
        match = re.search(r"gymslurm status (\S+)", out)
        assert match, out
        self.run = Path(match.group(1))
        return self

    def status(self) -> dict[str, Any]:
        """``gymslurm status RUN --json``."""
        report: dict[str, Any] = json.loads(self.gymslurm("status", str(self.run), "--json"))
        return report

    def wait(self, timeout: float = 240, aggregation: bool = True) -> dict[str, Any]:
        """Poll until every shard is final (and the aggregation ended when enabled): ``status`` when the
        run's ledgers changed, else every 5 s (a verdict read from the queue alone)."""
        seen: list[dict[str, Any]] = []

        def final() -> dict[str, Any] | None:
            seen.append(self.status())
            report = seen[-1]
            done = all(row["verdict"] in FINAL for row in report["shards"])
            ended = not aggregation or report["aggregation"]["state"].startswith(("DONE", "STOP_FAILED"))
            return report if done and ended else None

        assert self.run is not None
        run = self.run
        return wait_until(
            on_change(final, lambda: run_records(run)),
            timeout,
            lambda: f"{self.run} to finish: {json.dumps(seen[-1], indent=1)}",
            every_s=1.0,
        )

    def ledger(self, shard: int | None = 0) -> list[dict[str, Any]]:
        """A shard's (None: the aggregation's) ledger records."""
        assert self.run is not None
        path = self.run / ("aggregate" if shard is None else f"shards/{shard:03d}") / "ledger.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def decisions(self, shard: int = 0) -> list[dict[str, Any]]:
        """The decision records of a shard."""
        return [r for r in self.ledger(shard) if r["kind"] == "decision"]

    def calls(self, shard: int = 0) -> int:
        """How many times the stand-in collector ran for a shard."""
        assert self.run is not None
        path = self.run / f"output/shard-{shard:03d}/rollouts_standin_calls.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def wait_for_calls(self, count: int, timeout: float = 120) -> str:
        """Wait until the collector ran ``count`` times; returns the job id of the newest start record."""
        wait_until(
            lambda: self.calls() >= count, timeout, lambda: f"{count} collector runs (ran {self.calls()})"
        )
        starts = [r for r in self.ledger() if r["kind"] == "start"]
        return str(starts[-1]["job_id"])

    def wait_for_decisions(self, more_than: int, timeout: float = 240, shard: int = 0) -> None:
        """Wait until a shard's ledger holds more than ``more_than`` decisions (a resubmitted chain moved)."""
        wait_until(
            lambda: len(self.decisions(shard)) > more_than,
            timeout,
            lambda: f"a decision past {self.decisions(shard)}",
            every_s=1.0,
        )

    def cancel(self) -> None:
        """Best-effort ``gymslurm cancel`` (cleanup)."""
        if self.run is not None:
            try:
                self.gymslurm("cancel", str(self.run))
            except Exception:  # cleanup must not hide the test's own failure
                shutil.rmtree(self.run / "never", ignore_errors=True)
