"""The aggregation is a link like any other (issue 19), on the local backend with real processes:
retried by its own budget, run exactly once to success, and a crash loop ends EXHAUSTED with
``submit --wait`` exiting non-zero and naming the way out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import gymslurm, ledger, only_run, wait_until_final, write_benchmark

pytestmark = pytest.mark.e2e


def _aggregation(tmp_path: Path, script: str, extra: str = "") -> Path:
    """A one-shard benchmark whose shard is DONE at once and whose aggregation runs ``script``
    (``sh -c``), which appends a line to ``agg_calls`` each time it runs."""
    calls = tmp_path / "agg_calls"
    command = json.dumps(["/bin/sh", "-c", f"echo run >> {calls}; {script}"])
    return write_benchmark(tmp_path, [{"exit": 0}], f"aggregation:\n  command: {command}\n{extra}")


def _agg_decisions(run: Path) -> list[str]:
    return [r["decision"] for r in ledger(run, None) if r["kind"] == "decision"]


def test_an_aggregation_failing_once_is_retried_by_its_own_budget_and_done_once(tmp_path: Path) -> None:
    """An aggregation command that exits 1 once: RETRY (one of its own retries spent), then DONE, and
    the command ran exactly twice (never again after DONE); the shard's budget is untouched."""
    marker = tmp_path / "failed_once"
    bench = _aggregation(tmp_path, f"[ -e {marker} ] && exit 0; touch {marker}; exit 1")
    gymslurm("submit", str(bench), "--backend", "local", "shards=1")
    run = only_run(tmp_path)
    report = wait_until_final(run)
    assert _agg_decisions(run) == ["RETRY", "DONE"]
    assert report["aggregation"]["state"].startswith("DONE")
    assert (tmp_path / "agg_calls").read_text().splitlines() == ["run", "run"]
    assert (report["shards"][0]["verdict"], report["shards"][0]["retries"]) == ("DONE", "0/3")


def test_an_aggregation_crash_loop_ends_exhausted_and_submit_wait_names_the_way_out(tmp_path: Path) -> None:
    """An aggregation command that always exits 1 spends its retries and stops EXHAUSTED (no job left
    queued for ever); ``submit --wait`` exits 1 (not 76: no FAILED) with the logs and resubmit commands."""
    bench = _aggregation(tmp_path, "exit 1", "slurm:\n  infra_retry_limit: 1\n")
    done = gymslurm("submit", str(bench), "--backend", "local", "shards=1", "--wait", check=False)
    run = only_run(tmp_path)
    assert _agg_decisions(run) == ["RETRY", "STOP_EXHAUSTED"]
    assert (tmp_path / "agg_calls").read_text().splitlines() == ["run", "run"]
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 1, done.stdout + done.stderr  # ExitCode.RETRY: a stop, not FAILED
    assert "aggregation stopped" in last and "EXHAUSTED" in last, last
    assert f"gymslurm logs {run.name}" in last or f"gymslurm logs {run}" in last, last
    assert "gymslurm resubmit" in last, last
