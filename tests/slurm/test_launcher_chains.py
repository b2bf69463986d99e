"""The launcher's chains on the real one-node Slurm, with the scripted stand-in collector.

Slurm's limit checks tick every ~30 s and requeues wait ~12 s, so every scenario is submitted
first (one module fixture) and each test then waits for its own: the module takes about as long
as its slowest scenario. The preemption scenario needs all 8 CPUs and runs last, on its own.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import (
    NO_ACCOUNTING_CLUSTER,
    TEST_USER,
    SlurmCluster,
    cluster_env,
    job_nodes,
    run,
    scenario_user,
    submitted_up_front,
)
from .launcher_chains import Chain
from .nodes import preempt_on

pytestmark = pytest.mark.slurm

SCENARIOS = {
    "progress": dict(steps=[{"exit": 75}, {"exit": 75}, {"exit": 75}, {"exit": 0}]),
    "exhausted": dict(steps=[{"exit": 1}], slurm_yaml="  infra_retry_limit: 1\n"),
    "failed": dict(steps=[{"exit": 76}]),
    "no_progress": dict(steps=[{"exit": 75, "progress": 0}, {"exit": 0}]),
    "time_limit": dict(
        steps=[{"exit": 0, "sleep": 300, "on_signal": 75, "progress": 1}],
        # --time 2 min, USR1 60 s before: the signal comes mid-link. With --time 1 it was due at
        # the job's start and Slurm's first time-limit check sometimes sent it before the batch
        # step ran (lost: the link ended by the time limit's TERM, CI of stop 24); that instant is
        # tested on the local backend (tests/e2e, early signals).
        slurm_yaml="  time: '2'\n  signal_lead_s: 60\n  max_walltime: '0:45'\n",
    ),
    # --time 1 min, USR1 60 s before: due at the job's start. Slurm's first time-limit check sends
    # it at any instant of the first 30 s, or before the batch step runs (then it is lost and the
    # link stops on the time limit's TERM): either way every link decides by itself.
    "usr1_at_start": dict(
        steps=[{"exit": 0, "sleep": 300, "on_signal": 75, "progress": 1}],
        slurm_yaml="  time: '1'\n  signal_lead_s: 60\n  max_walltime: '1:30'\n",
    ),
    "requeue": dict(steps=[{"exit": 0, "sleep": 300, "on_signal": 75, "progress": 1}, {"exit": 0}]),
    "scancel": dict(steps=[{"exit": 0, "sleep": 300, "on_signal": 75, "progress": 1}, {"exit": 0}]),
    "shards": dict(steps=[{"exit": 0}], overrides=["shards=3"]),
}


@pytest.fixture(scope="module")
def chains(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> Iterator[dict[str, Chain]]:
    """Every scenario submitted up front, so their Slurm waits overlap."""
    yield from submitted_up_front(
        slurm_session_dir,
        "launcher",
        SCENARIOS,
        lambda user, spec: Chain(user, slurm_python, **spec).submit(),  # type: ignore[arg-type]
    )


def test_progress_chain_runs_four_jobs_without_spending_retries(chains: dict[str, Chain]) -> None:
    """75,75,75,0 → four jobs, DONE, no retry spent, nothing left pending, aggregation once."""
    chain = chains["progress"]
    report = chain.wait()
    assert [d["decision"] for d in chain.decisions()] == ["CONTINUE", "CONTINUE", "CONTINUE", "DONE"]
    assert len({d["job_id"] for d in chain.decisions()}) == 4
    assert (report["shards"][0]["verdict"], report["shards"][0]["retries"]) == ("DONE", "0/3")
    kinds = [r["kind"] for r in chain.ledger(None)]  # the aggregation and its lookahead job: run once
    assert (kinds[0], kinds.count("start"), kinds.count("decision")) == ("submitted", 1, 1), kinds
    queue = run(["squeue", "-h", "-u", TEST_USER, "-t", "PENDING", "-o", "%j"])
    assert chain.run is not None and chain.run.name not in queue


def test_exit_1_until_budget_ends_then_resubmit(chains: dict[str, Chain]) -> None:
    """Exit 1 spends the retry budget then stops; resubmit gives a fresh budget and keeps history."""
    chain = chains["exhausted"]
    report = chain.wait(aggregation=False)
    assert [d["decision"] for d in chain.decisions()] == ["RETRY", "STOP_EXHAUSTED"]
    assert report["shards"][0]["verdict"] == "EXHAUSTED"
    chain.gymslurm("resubmit", str(chain.run), str(chain.user.workdir / "bench.yaml"))
    chain.wait_for_decisions(more_than=2)  # the status read before the new link decides is the old one
    chain.wait(aggregation=False)
    assert [d["decision"] for d in chain.decisions()] == [
        "RETRY",
        "STOP_EXHAUSTED",
        "RETRY",
        "STOP_EXHAUSTED",
    ]


def test_exit_76_stops_and_slurm_marks_the_job_failed(chains: dict[str, Chain]) -> None:
    """Exit 76 → STOP_FAILED in the ledger, FAILED 76:0 in Slurm, verdict FAILED."""
    chain = chains["failed"]
    report = chain.wait(aggregation=False)
    (decision,) = chain.decisions()
    assert decision["decision"] == "STOP_FAILED"
    shown = run(["scontrol", "show", "job", "-o", decision["job_id"]])
    assert "JobState=FAILED" in shown and "ExitCode=76:0" in shown
    assert report["shards"][0]["verdict"] == "FAILED"


def test_exit_75_without_progress_spends_a_retry(chains: dict[str, Chain]) -> None:
    """A 75 whose coverage shows nothing new counts as exit 1 (a retry spent)."""
    chain = chains["no_progress"]
    report = chain.wait()
    assert [d["decision"] for d in chain.decisions()] == ["RETRY", "DONE"]
    assert report["shards"][0]["retries"] == "1/3"


def test_time_limit_signal_stops_cleanly_and_the_walltime_cap_ends_the_chain(
    chains: dict[str, Chain],
) -> None:
    """USR1 before --time → the collector exits 75, jobs end COMPLETED (not TIMEOUT), walltime cap stops."""
    chain = chains["time_limit"]
    report = chain.wait(timeout=400, aggregation=False)
    decisions = chain.decisions()
    assert [d["decision"] for d in decisions[:-1]] == ["CONTINUE"] * (len(decisions) - 1)
    assert decisions[-1]["decision"] == "STOP_WALLTIME"
    assert decisions[-1]["budgets_after"]["walltime_s"] >= 45
    assert any(d["exit_code"] == 75 and d["slurm_state"] == "SIGNALLED:SIGUSR1" for d in decisions)
    for d in decisions:
        shown = run(["scontrol", "show", "job", "-o", d["job_id"]])
        assert "JobState=TIMEOUT" not in shown, shown
    assert report["shards"][0]["verdict"] == "EXHAUSTED"


def test_usr1_due_at_the_jobs_start_kills_no_link_and_the_chain_ends_by_itself(
    chains: dict[str, Chain],
) -> None:
    """USR1 due at once (signal lead = the whole --time): every link writes its own decision (on the
    USR1, or on the time limit's TERM when Slurm sent the USR1 before the batch step ran), none is
    judged dead by a successor, and the walltime cap ends the chain with no human."""
    chain = chains["usr1_at_start"]
    report = chain.wait(timeout=600, aggregation=False)
    decisions = chain.decisions()
    assert len(decisions) >= 2, decisions
    assert all(d["accounted_by"] is None for d in decisions), decisions
    assert all(d["slurm_state"] in ("SIGNALLED:SIGUSR1", "SIGNALLED:SIGTERM") for d in decisions), decisions
    assert [d["decision"] for d in decisions[:-1]] == ["CONTINUE"] * (len(decisions) - 1), decisions
    assert decisions[-1]["decision"] == "STOP_WALLTIME", decisions
    assert report["shards"][0]["verdict"] == "EXHAUSTED", report["shards"][0]


def test_scontrol_requeue_reruns_the_same_job_without_a_doubled_link(chains: dict[str, Chain]) -> None:
    """A requeued link reruns with the same id and restart count 1; only one successor ever exists."""
    chain = chains["requeue"]
    job = chain.wait_for_calls(1)
    chain.user.run(["scontrol", "requeue", job])
    chain.wait(timeout=180)
    decisions = chain.decisions()
    assert [(d["job_id"], d["restart_count"], d["decision"]) for d in decisions] == [
        (job, 0, "CONTINUE"),
        (job, 1, "DONE"),
    ]
    successors = [r for r in chain.ledger() if r["kind"] == "submitted" and r["after"] == job]
    assert len(successors) == 1


def test_scancel_of_a_running_link_lets_the_chain_go_on(chains: dict[str, Chain]) -> None:
    """scancel of the running link: it records its end and its queued successor carries on to DONE."""
    chain = chains["scancel"]
    job = chain.wait_for_calls(1)
    chain.user.run(["scancel", job])
    report = chain.wait(timeout=180)
    decisions = chain.decisions()
    assert decisions[0]["job_id"] == job and decisions[0]["decision"] == "CONTINUE"
    assert decisions[-1]["decision"] == "DONE" and decisions[-1]["job_id"] != job
    assert report["shards"][0]["verdict"] == "DONE"


def test_three_shards_ending_together_aggregate_exactly_once(chains: dict[str, Chain]) -> None:
    """Three chains that end within the same seconds submit one aggregation job."""
    chain = chains["shards"]
    report = chain.wait()
    assert [row["verdict"] for row in report["shards"]] == ["DONE"] * 3
    kinds = [r["kind"] for r in chain.ledger(None)]  # the aggregation and its lookahead job: run once
    assert (kinds[0], kinds.count("start"), kinds.count("decision")) == ("submitted", 1, 1), kinds


@pytest.mark.parametrize("cluster", ["a", NO_ACCOUNTING_CLUSTER])  # with and without slurmdbd
def test_status_while_pending_running_and_after(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path, cluster: str
) -> None:
    """status says WAITING while held, HEALTHY while running, DONE after; one squeue + at most one sacct."""
    env = cluster_env(cluster)
    held = ["slurm.extra_directives=[--hold]", "aggregation.enabled=false"]
    user = scenario_user(slurm_session_dir, f"launcher-status-{cluster}")
    chain = Chain(user, slurm_python, [{"exit": 0, "sleep": 8}], overrides=held, env=env)
    chain.submit()
    try:
        report = chain.status()
        assert report["shards"][0]["verdict"] == "WAITING" and report["queries"] <= 2
        chain.user.run(["scontrol", "release", report["shards"][0]["job"]], env=env)
        chain.wait_for_calls(1)
        assert chain.status()["shards"][0]["verdict"] == "HEALTHY"
        assert chain.wait(aggregation=False)["shards"][0]["verdict"] == "DONE"
    finally:
        chain.cancel()


@contextlib.contextmanager
def _preempted(
    chains: dict[str, Chain], python: Path, session_dir: Path, label: str, partition: str
) -> Iterator[tuple[Chain, str]]:
    """A one-shard chain on a whole node of ``partition`` whose first link a high-partition job preempts
    (the link sleeps, saving on TERM): yields the chain and that link's job; cancels the chain after."""
    for chain in chains.values():  # the preemptor needs the whole node: let the batch finish first
        chain.wait(timeout=400, aggregation=False)
    chain = Chain(
        scenario_user(session_dir, label),
        python,
        [{"exit": 0, "sleep": 300, "on_signal": 75, "progress": 1}, {"exit": 0}],
        overrides=[
            f"slurm.partition={partition}",
            "slurm.extra_directives=['--cpus-per-task=8']",
            "aggregation.enabled=false",
        ],
    )
    chain.submit()
    try:
        # The link needs a whole node: with the other Slurm groups' jobs spread over every node, one may
        # take minutes to come free (seen: none in 120 s in the suite).
        job = chain.wait_for_calls(1, timeout=420)
        (node,) = job_nodes(job)  # the preemptor wants the link's own node (others idle on the sandbox)
        preempt_on(chain.user, node, "-c", "8")
        yield chain, job
    finally:
        chain.cancel()


def test_preemption_requeues_the_link_and_the_chain_finishes(
    chains: dict[str, Chain], slurm_python: Path, slurm_session_dir: Path
) -> None:
    """A high-partition job preempts the low-partition link; Slurm requeues it and the chain finishes once."""
    with _preempted(chains, slurm_python, slurm_session_dir, "launcher-preempt", "low") as (chain, job):
        chain.wait(timeout=240, aggregation=False)
        decisions = chain.decisions()
        assert [(d["job_id"], d["restart_count"], d["decision"]) for d in decisions] == [
            (job, 0, "CONTINUE"),
            (job, 1, "DONE"),
        ]
        assert len([r for r in chain.ledger() if r["kind"] == "submitted" and r["after"] == job]) == 1


def test_preemption_that_cancels_the_link_lets_its_queued_successor_finish_the_chain(
    chains: dict[str, Chain], slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Partition lowcancel (PreemptMode=CANCEL, as many sites set it): a high-partition job preempts
    the link and Slurm ends it for good (no requeue). The link saves on the grace period's TERM and
    decides CONTINUE (or a successor judges it: PREEMPTED is Slurm's end); the successor already
    queued behind it runs and the chain finishes DONE, no retry spent, no human. status and the
    report count the interruption as 'preempted' (Slurm's word, which the successor asked), not
    'cancelled' (what a TERM with no rerun of the job would read without it)."""
    with _preempted(chains, slurm_python, slurm_session_dir, "launcher-preempt-cancel", "lowcancel") as (
        chain,
        job,
    ):
        report = chain.wait(timeout=300, aggregation=False)
        decisions = chain.decisions()
        assert [d["decision"] for d in decisions] == ["CONTINUE", "DONE"], decisions
        assert decisions[0]["job_id"] == job and decisions[1]["job_id"] != job, decisions  # not requeued
        assert all(d["budgets_after"]["infra_retries_used"] == 0 for d in decisions), decisions
        assert report["shards"][0]["verdict"] == "DONE", report["shards"][0]
        faults = report["summary"]["faults"]
        assert (faults["preempted"], faults["cancelled"]) == (1, 0), faults
        assert chain.run is not None
        chain.gymslurm("report", str(chain.run))
        page = (chain.run / "report.html").read_text()
        embedded = re.search(
            r'<script type="application/json" id="gymslurm-report">(.*?)</script>', page, re.S
        )
        assert embedded, page[-2000:]
        shard_faults = json.loads(embedded.group(1))["shards"][0]["faults"]
        assert (shard_faults["preempted"], shard_faults["cancelled"]) == (1, 0), shard_faults
        assert "faults survived: preempted 1<" in page


def test_login_side_killed_right_after_submit_leaves_chains_that_finish_alone(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """SIGKILL of submit after its first job array (slurm.array_size=1: one array per shard): the
    queued first link queues the arrays submit never did (job/first_links.py), and every shard ends
    DONE and aggregated with no human command."""
    user = scenario_user(slurm_session_dir, "launcher-killed")
    chain = Chain(user, slurm_python, [{"exit": 0}], overrides=["shards=3"])
    work = chain.user.workdir
    chain.user.write("standin.py", (Path(__file__).with_name("launcher_standin_collector.py")).read_text())
    chain.user.write("steps.json", '[{"exit": 0}]', mode=0o644)
    chain.user.write("data.jsonl", "".join(f'{{"q": {i}}}\n' for i in range(6)), mode=0o644)
    bench = chain.user.write(
        "bench.yaml",
        f"dataset: {work / 'data.jsonl'}\nrun_root: {work / 'runs'}\naggregation:\n  command: [/bin/true]\n"
        f"collector:\n  command: [{slurm_python}, {work / 'standin.py'}, {work / 'steps.json'}]\n"
        f"slurm:\n  python: {slurm_python}\n  array_size: 1\n",  # three arrays: a submit can die midway
        mode=0o644,
    )
    argv = chain.user.command([str(slurm_python), "-m", "gymslurm", "submit", str(bench), "shards=3"])
    proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().startswith("shards 0..0")
    proc.kill()
    proc.wait()
    (chain.run,) = [p.parent for p in (work / "runs").glob("*/run.json")]
    try:
        report = chain.wait(timeout=300)
        assert [row["verdict"] for row in report["shards"]] == ["DONE"] * 3, report
        assert report["aggregation"]["state"].startswith("DONE")
        assert not (chain.run / "queuing").exists()
        record = json.loads((chain.run / "array.json").read_text())
        spares = 2  # slurm.lookahead 3: the first link and two spare arrays behind it
        assert [(p["base"], len(p["spares"])) for p in record["parts"]] == [(s, spares) for s in range(3)]
    finally:
        chain.cancel()
