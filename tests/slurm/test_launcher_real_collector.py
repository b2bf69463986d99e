"""``gymslurm submit`` on the real one-node Slurm with the REAL collector and demo Environment Server.

Why: the chain tests (test_launcher_chains.py) script the collector's exit codes; these drive the
whole path a user takes — the job starts ``gymslurm demo-server`` inside its allocation, runs
``gymslurm collect`` with resume, decides, chains, and the aggregation job runs ``gymslurm
aggregate`` — and check the artefacts a user reads: the merged output (every rollout once), the
aggregate coverage, the ledgers and ``status --json`` once the jobs have left squeue.

Scenarios (submitted together by one module fixture, so their Slurm waits overlap):

- ``faults``: three shards of a 15-task dataset against a server that fails 30 % of attempts
  retryably (deterministic with the server's seed: 4 failed attempts here). The collector retries
  them in the same invocation within its budget of 3 attempts, so every shard ends DONE after one job.
- ``time_limit``: one shard whose collection (50 tasks × 1 s, one at a time) cannot finish within
  ``--time=1``; Slurm sends USR1 20–50 s before the limit (it sends the warning up to one ~30 s
  limit-check tick *early*, so 10–40 s into the job: a lead ≥ 30 s could signal a 1-minute job
  before the collector has saved anything, a 75 without progress that spends a retry), the
  collector stops cleanly and exits 75, and the next link resumes.

- ``hang``: one shard of 60 tasks against a server answering in 1 s, one at a time; ``gymslurm
  inject --kind hang`` SIGSTOPs the collector of the running array task (through ``srun`` to its
  numeric job id) while its chain step keeps beating. With ``slurm.stall_window_s: 20`` the link
  sees the collector's progress record freeze, ends it within the window (decided RETRY,
  "unresponsive … frozen"), status says UNRESPONSIVE meanwhile, and the next link finishes the
  shard: every rollout once. Submitted last, right before its test (the first) waits for its first
  results: the hang lands a few results in, with ~55 s of collection left to spare (120 tasks
  before, submitted before ``faults``: the next link then spent two minutes on the rest).

Trade-off: the time-limit scenario takes 1–2 minutes of wall time (2–3 links of ≤ 1 minute),
however fast the machine; it is the only way to see Slurm's own signal reach the real collector.
The module adds ~1 minute to ``tests/slurm`` (the faults scenario overlaps it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until

from .helpers import SlurmCluster, submitted_up_front
from .launcher_real import RealChain

pytestmark = pytest.mark.slurm
STALL_WINDOW_S, HANG_TASKS = 20, 60

SCENARIOS: dict[str, dict[str, Any]] = {
    "time_limit": dict(
        tasks=50,
        shards=1,
        server_flags=["--latency-ms", "1000"],
        collector=["+concurrency=1"],
        slurm="  time: '1'\n  signal_lead_s: 20\n",
    ),
    "faults": dict(
        tasks=15,
        shards=3,
        server_flags=["--retryable-rate", "0.3"],
        collector=[],
        slurm="  time: '00:05:00'\n",
    ),
    "hang": dict(
        tasks=HANG_TASKS,
        shards=1,
        server_flags=["--latency-ms", "1000"],
        collector=["+concurrency=1", "+live_progress_interval_s=1"],
        slurm=f"  time: '00:06:00'\n  stall_window_s: {STALL_WINDOW_S}\n",
    ),
}


@pytest.fixture(scope="module")
def runs(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> Iterator[dict[str, RealChain]]:
    """Every scenario submitted up front, so their Slurm waits overlap (the slowest first, the hang
    last: its test comes first and needs its link early in its collection)."""
    yield from submitted_up_front(
        slurm_session_dir,
        "real",
        SCENARIOS,
        lambda user, spec: RealChain(user, slurm_python, spec).submit(),
    )


def test_inject_hang_ends_the_link_within_the_stall_window_and_the_chain_goes_on(
    runs: dict[str, RealChain],
) -> None:
    """(First in the module: its link must still run when the test starts.) inject --kind hang on an
    array task: UNRESPONSIVE with the frozen record in status, the link
    decided RETRY 'unresponsive ... frozen' by its own watch (stall_window_s), the next link DONE,
    every rollout once."""
    run = runs["hang"]
    assert run.run is not None
    results = run.output(0)
    wait_until(lambda: results.exists() and len(results.read_text().splitlines()) >= 2, 240, "first results")
    job = [r for r in run.ledger() if r["kind"] == "start"][-1]["job_id"]
    out = run.gymslurm("inject", str(run.run), "0", "--kind", "hang")
    assert f"hang sent to job {job}" in out, out
    row = wait_until(
        lambda: next((r for r in [run.status()["shards"][0]] if r["verdict"] == "UNRESPONSIVE"), None),
        90,
        "UNRESPONSIVE",
    )
    assert "frozen" in row["why"], row
    first = wait_until(run.decisions, 180, "the decision of the hung link")[0]
    assert (first["job_id"], first["decision"]) == (job, "RETRY"), first
    assert "unresponsive" in first["reason"] and "frozen" in first["reason"], first["reason"]
    assert f"stall_window_s={STALL_WINDOW_S}" in first["reason"], first["reason"]
    (injected,) = [r for r in run.ledger() if r["kind"] == "injected"]
    print(f"hang injected {injected['at']}, link decided {first['end']} (stall_window_s={STALL_WINDOW_S})")
    report = run.finished(timeout=300)
    assert report["shards"][0]["verdict"] == "DONE"
    assert run.rollout_ids(0) == Counter({f"arith-{i}": 1 for i in range(HANG_TASKS)})


def test_faulty_server_three_shards_end_done_and_merge_each_rollout_once(runs: dict[str, RealChain]) -> None:
    """Retryable faults are retried within the budget; 3 shards DONE in one job each; one merge."""
    run = runs["faults"]
    report = run.finished(timeout=300)
    assert [row["verdict"] for row in report["shards"]] == ["DONE"] * 3
    assert [row["retries"] for row in report["shards"]] == ["0/3"] * 3
    assert [row["coverage"] for row in report["shards"]] == ["5/5 ok, 0 failed"] * 3
    assert report["aggregation"]["state"].startswith("DONE") and report["queries"] <= 2
    for shard in range(3):
        assert [(d["decision"], d["exit_code"]) for d in run.decisions(shard)] == [("DONE", 0)]
    kinds = [r["kind"] for r in run.ledger(None)]  # the aggregation and its lookahead job: run once
    assert (kinds[0], kinds.count("start"), kinds.count("decision")) == ("submitted", 1, 1), kinds
    assert run.rollout_ids(None) == Counter({f"arith-{i}": 1 for i in range(15)})
    totals = run.companion(None, "_aggregate_coverage.json")
    assert (totals["expected"], totals["successful"], totals["failed"]) == (15, 15, 0) and totals["complete"]
    assert len(totals["shards"]) == 3 and totals["historical_failed_attempts"] > 0
    retried = sum(run.companion(s, "_coverage.json")["historical_failed_attempts"] for s in range(3))
    metrics = run.companion(None, "_gymslurm_metrics.json")["metrics"]
    assert metrics["retries/attempts"] == totals["historical_failed_attempts"] == retried


def test_time_limit_mid_collection_resumes_without_counting_a_rollout_twice(
    runs: dict[str, RealChain],
) -> None:
    """USR1 before --time: the collector exits 75, the next link resumes, every rollout counted once."""
    run = runs["time_limit"]
    report = run.finished(timeout=420)
    decisions = run.decisions(0)
    assert len(decisions) >= 2, decisions
    assert [d["decision"] for d in decisions] == ["CONTINUE"] * (len(decisions) - 1) + ["DONE"]
    assert any(d["exit_code"] == 75 and d["slurm_state"] == "SIGNALLED:SIGUSR1" for d in decisions)
    assert report["shards"][0]["verdict"] == "DONE" and report["shards"][0]["retries"] == "0/3"
    assert run.rollout_ids(0) == Counter({f"arith-{i}": 1 for i in range(50)})
    assert run.rollout_ids(None) == run.rollout_ids(0)
    coverage = run.companion(0, "_coverage.json")
    assert (coverage["expected"], coverage["successful"], coverage["complete"]) == (50, 50, True)
    assert coverage["counted_failures"] == 0
