"""Helpers for launcher end-to-end tests: a benchmark around the scripted stand-in collector."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import on_change, run_records, wait_until

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "tests" / "slurm" / "launcher_standin_collector.py"
FINAL = {"DONE", "FAILED", "EXHAUSTED", "STALLED", "CANCELLED", "BUDGET"}


def write_benchmark(tmp: Path, steps: list[dict[str, Any]], extra: str = "", rows: int = 3) -> Path:
    """A benchmark YAML whose collector is the stand-in following ``steps``."""
    (tmp / "steps.json").write_text(json.dumps(steps))
    (tmp / "data.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(rows)))
    path = tmp / "bench.yaml"
    path.write_text(
        f"dataset: {tmp / 'data.jsonl'}\nrun_root: {tmp / 'runs'}\n"
        f"collector:\n  command: [{sys.executable}, {STANDIN}, {tmp / 'steps.json'}]\n{extra}"
    )
    return path


def gymslurm(
    *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m gymslurm`` from the worktree root (so jobs import this checkout)."""
    done = subprocess.run(
        [sys.executable, "-m", "gymslurm", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"gymslurm {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def only_run(tmp: Path) -> Path:
    """The single run directory under tmp/runs."""
    (run,) = [p.parent for p in (tmp / "runs").glob("*/run.json")]
    return run


def status(run: Path) -> dict[str, Any]:
    """``gymslurm status RUN --json``."""
    report: dict[str, Any] = json.loads(gymslurm("status", str(run), "--json").stdout)
    return report


def wait_until_final(run: Path, timeout_s: float = 120.0, aggregation: bool = True) -> dict[str, Any]:
    """Poll status until every shard has a final verdict (and the aggregation ended, if wanted): when
    the run's ledgers or local jobs changed, else every 5 s."""
    seen: list[dict[str, Any]] = []

    def final() -> dict[str, Any] | None:
        seen.append(status(run))
        report = seen[-1]
        shards_done = all(row["verdict"] in FINAL for row in report["shards"])
        agg_done = not aggregation or report["aggregation"]["state"].startswith(("DONE", "STOP_FAILED"))
        return report if shards_done and agg_done else None

    return wait_until(
        on_change(final, lambda: run_records(run)),
        timeout_s,
        lambda: f"run {run} to finish: {json.dumps(seen[-1], indent=1)}",
    )


def ledger(run: Path, shard: int | None = 0) -> list[dict[str, Any]]:
    """A shard's (or, for None, the aggregation's) ledger records."""
    path = run / ("aggregate" if shard is None else f"shards/{shard:03d}") / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def decisions(run: Path, shard: int = 0) -> list[str]:
    """The decisions written to a shard's ledger, in order."""
    return [r["decision"] for r in ledger(run, shard) if r["kind"] == "decision"]


def wait_for_decisions(run: Path, more_than: int, timeout_s: float = 120.0, shard: int = 0) -> None:
    """Poll until a shard's ledger holds more than ``more_than`` decisions (a resubmitted chain moved)."""
    wait_until(
        lambda: len(decisions(run, shard)) > more_than,
        timeout_s,
        lambda: f"a decision past {decisions(run, shard)} for {run}",
        every_s=0.2,
    )


def assert_same_results(paused: Path, plain: Path, in_flight_max: int) -> None:
    """Merged results files of a paused-then-resumed run and of the same run never paused: one row per
    rollout id in each, the same ids, and every row equal but the run id, except the requests in flight
    when the pause came. Those were sent again (``_ng_attempt`` > 0, at most ``in_flight_max``), and the
    demo policy draws its answer per attempt, so their answer may differ; so may a row the unpaused run
    sent again (a neighbour's fault on a shared cluster can interrupt it too)."""

    def rows(path: Path) -> dict[str, dict[str, Any]]:
        lines = path.read_text().splitlines()
        found = {row["_ng_rollout_id"]: row for row in map(json.loads, lines)}
        assert len(found) == len(lines), f"a rollout id twice in {path}"
        return found

    ours, theirs = rows(paused), rows(plain)
    assert ours.keys() == theirs.keys()
    again = {key for key, row in ours.items() if row["_ng_attempt"] > 0}
    assert len(again) <= in_flight_max, sorted(again)

    def same(key: str) -> bool:
        return {**ours[key], "_ng_run_id": ""} == {**theirs[key], "_ng_run_id": ""}

    resent = again | {key for key, row in theirs.items() if row["_ng_attempt"] > 0}
    differ = [key for key in ours if key not in resent and not same(key)]
    assert differ == [], differ[:5]
