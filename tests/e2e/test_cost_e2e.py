"""What a run costs, on the local backend: GPU-hours in status, the BUDGET stop, resubmit --gpu-hours.

Real chains (the scripted stand-in collector, docs in tests/slurm/launcher_standin_collector.py).
``slurm.gpus: 3600`` makes every second a link holds one GPU-hour, so a budget of a few GPU-hours
is reached in a few seconds without any timed assertion: the test only compares the ledger's own
figures with the budget.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import (
    decisions,
    gymslurm,
    ledger,
    only_run,
    status,
    wait_until_final,
    write_benchmark,
)

pytestmark = pytest.mark.e2e

SECOND_IS_A_GPU_HOUR = "slurm:\n  gpus: 3600\n"


def test_a_run_stops_with_budget_then_resubmit_raises_it_and_the_run_finishes(tmp_path: Path) -> None:
    """Past budget.gpu_hours the chain stops BUDGET (no further link); a plain resubmit starts a link
    that the start gate stops at once; resubmit --gpu-hours +H raises the budget and the run is DONE."""
    steps = [{"exit": 75, "progress": 1, "sleep": 1}] * 3 + [{"exit": 0}]
    bench = write_benchmark(tmp_path, steps, extra=SECOND_IS_A_GPU_HOUR + "budget:\n  gpu_hours: 2\n")
    gymslurm("submit", str(bench), "--backend", "local", "aggregation.command=[/bin/true]")
    run = only_run(tmp_path)
    report = wait_until_final(run)  # and the aggregation the stop queued: resubmit waits for live jobs
    row = report["shards"][0]
    assert row["verdict"] == "BUDGET", row["why"]
    assert "budget.gpu_hours 2" in row["why"] and "--gpu-hours" in row["why"]
    assert decisions(run)[-1] == "STOP_BUDGET"
    assert report["summary"]["gpu_hours"] >= 2 and report["summary"]["budget_warning"] is True
    links_before = len(decisions(run))

    gymslurm("resubmit", str(run), str(bench))  # no raise: the new link must not start work
    report = wait_until_final(run)
    assert report["shards"][0]["verdict"] == "BUDGET"
    gated = [r for r in ledger(run) if r["kind"] == "decision"][-1]
    assert (gated["decision"], gated["slurm_state"]) == ("STOP_BUDGET", "NOT_STARTED")
    assert len(decisions(run)) == links_before + 1

    out = gymslurm("resubmit", str(run), str(bench), "--gpu-hours", "+100000").stdout
    assert "raised by 100000" in out
    report = wait_until_final(run, aggregation=False)
    assert report["shards"][0]["verdict"] == "DONE"
    assert report["summary"]["gpu_budget"] == 100002
    every_link = sum(r["elapsed_s"] for r in ledger(run) if r["kind"] == "decision")
    assert report["summary"]["gpu_hours"] == pytest.approx(every_link, rel=1e-3)  # 3600 GPUs: s = GPU-h


def test_resubmit_refuses_to_raise_a_budget_the_run_does_not_have(tmp_path: Path) -> None:
    """--gpu-hours on a run without budget.gpu_hours is refused, saying why, and records nothing."""
    bench = write_benchmark(tmp_path, [{"exit": 1}])
    gymslurm(
        "submit",
        str(bench),
        "--backend",
        "local",
        "slurm.infra_retry_limit=0",
        "aggregation.command=[/bin/true]",
    )
    run = only_run(tmp_path)
    wait_until_final(run)  # the aggregation too: it writes the aggregate ledger
    before = (run / "aggregate" / "ledger.jsonl").read_text()
    done = gymslurm("resubmit", str(run), str(bench), "--gpu-hours", "+5", check=False)
    assert done.returncode != 0 and "has no budget.gpu_hours to raise" in done.stderr
    assert (run / "aggregate" / "ledger.jsonl").read_text() == before
    assert status(run)["summary"]["gpu_budget"] is None
