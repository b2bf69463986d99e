"""A chain's links as facts (launcher/links.py): interruptions by kind, GPU-hours, the budget."""

from __future__ import annotations

from typing import Any

import pytest

from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import (
    BudgetsRecord,
    DecisionRecord,
    Injected,
    Record,
    Resubmitted,
    ServerRecord,
    Started,
)
from gymslurm.launcher.links import (
    allocated_gpus,
    chain_gpu_hours,
    fault_text,
    faults_survived,
    gpu_budget,
    human_gpu_hours,
    idle_gpu_hours,
    interruption,
    links_of,
    run_gpu_hours,
)

T0 = 1_800_000_000.0


def _iso(offset_s: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(T0 + offset_s, UTC).isoformat()


def _run(
    job: str,
    start_s: float,
    elapsed_s: float,
    *,
    state: str = "RUNNING",
    code: int | None = 75,
    decision: Decision = Decision.CONTINUE,
    restart: int = 0,
    by: str | None = None,
    gpus: int = 4,
    reason: str = "why",
    idle_s: float | None = None,
) -> list[Record]:
    start = Started(job_id=job, restart_count=restart, at=_iso(start_s), gpus=gpus)
    end = DecisionRecord(
        job_id=job,
        restart_count=restart,
        start=start.at,
        end=_iso(start_s + elapsed_s),
        elapsed_s=elapsed_s,
        slurm_state=state,
        exit_code=code,
        decision=decision,
        reason=reason,
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord(),
        accounted_by=by,
        idle_s=idle_s,
    )
    return [start, end]


def _link(**fields: Any) -> dict[str, Any]:
    return {
        "decision": "CONTINUE",
        "slurm_state": "RUNNING",
        "exit_code": 75,
        "accounted_by": None,
        "reason": "",
        **fields,
    }


# (name, link, rerun, injected, Slurm's state, kind)
KIND_ROWS = [
    (
        "TERM and the job never ran again is a cancel (scancel)",
        _link(slurm_state="SIGNALLED:SIGTERM"),
        False,
        (),
        None,
        "cancelled",
    ),
    (
        "TERM and the same job ran again is a requeue",
        _link(slurm_state="SIGNALLED:SIGTERM"),
        True,
        (),
        None,
        "requeued",
    ),
    ("USR1 is the time limit warning", _link(slurm_state="SIGNALLED:SIGUSR1"), False, (), None, "time_limit"),
    (
        "USR1 then TERM is still the time limit",
        _link(slurm_state="SIGNALLED:SIGUSR1,SIGTERM"),
        False,
        (),
        None,
        "time_limit",
    ),
    (
        "an injected preempt is a preemption",
        _link(slurm_state="SIGNALLED:SIGTERM"),
        False,
        ("preempt",),
        None,
        "preempted",
    ),
    (
        "Slurm's PREEMPTED is a preemption",
        _link(slurm_state="SIGNALLED:SIGTERM"),
        False,
        (),
        "PREEMPTED",
        "preempted",
    ),
    (
        "a dead run Slurm calls NODE_FAIL is a node failure",
        _link(slurm_state="NODE_FAIL", accounted_by="9", exit_code=None),
        False,
        (),
        None,
        "node_failure",
    ),
    (
        "a dead run whose job Slurm ran again is a node failure",
        _link(slurm_state="REQUEUED", accounted_by="7", exit_code=None),
        True,
        (),
        None,
        "node_failure",
    ),
    (
        "a dead run Slurm calls TIMEOUT is the time limit",
        _link(slurm_state="TIMEOUT", accounted_by="9", exit_code=None),
        False,
        (),
        None,
        "time_limit",
    ),
    (
        "a dead run Slurm calls CANCELLED is a cancel",
        _link(slurm_state="CANCELLED", accounted_by="9", exit_code=None),
        False,
        (),
        None,
        "cancelled",
    ),
    (
        "a dead run Slurm calls OUT_OF_MEMORY crashed",
        _link(slurm_state="OUT_OF_MEMORY", accounted_by="9", exit_code=None, decision="RETRY"),
        False,
        (),
        None,
        "crashed",
    ),
    (
        "a dead run nobody can explain is lost",
        _link(slurm_state="VANISHED", accounted_by="9", exit_code=None),
        False,
        (),
        None,
        "lost",
    ),
    (
        "a collector killed by a signal nobody forwarded crashed",
        _link(exit_code=None, decision="RETRY"),
        False,
        (),
        None,
        "crashed",
    ),
    ("exit 75 by itself is no interruption", _link(), False, (), None, None),
    ("exit 1 is a retry, not an interruption", _link(exit_code=1, decision="RETRY"), False, (), None, None),
    ("a running link is not interrupted yet", _link(decision=None), False, (), None, None),
]


@pytest.mark.parametrize(
    ("name", "link", "rerun", "injected", "slurm", "kind"), KIND_ROWS, ids=[r[0] for r in KIND_ROWS]
)
def test_interruption_kind(  # noqa: PLR0917
    name: str,
    link: dict[str, Any],
    rerun: bool,
    injected: tuple[str, ...],
    slurm: str | None,
    kind: str | None,
) -> None:
    """Each row of the interruption table names what ended a link."""
    assert interruption(link, rerun, frozenset(injected), slurm) == kind


def test_six_scancels_three_requeues_and_a_node_failure_are_counted_as_such() -> None:
    """The run the issue saw: 6 scancels, 3 requeues and 1 node failure read as exactly that."""
    records: list[Record] = []
    t = 0.0
    for n in range(6):  # scancel: TERM, the link writes its decision, the successor is a new job
        records += _run(f"c{n}", t, 60, state="SIGNALLED:SIGTERM")
        t += 70
    for n in range(3):  # scontrol requeue: TERM, decision, then the same job runs again
        records += _run(f"r{n}", t, 60, state="SIGNALLED:SIGTERM")
        records += _run(f"r{n}", t + 70, 60, restart=1)
        t += 140
    records += [Started(job_id="n0", at=_iso(t), gpus=4)]  # node failure: no decision, Slurm requeues
    records += _run("n0", t + 100, 60, restart=1, code=0, decision=Decision.DONE)
    records.insert(
        -2,
        DecisionRecord(
            job_id="n0",
            restart_count=0,
            start=_iso(t),
            end=_iso(t + 100),
            elapsed_s=90,
            slurm_state="REQUEUED",
            exit_code=None,
            decision=Decision.CONTINUE,
            reason="job ended by Slurm (REQUEUED); no retry spent",
            budgets_before=BudgetsRecord(),
            budgets_after=BudgetsRecord(),
            accounted_by="n0",
        ),
    )
    faults = faults_survived(records, links_of(records))
    assert {k: n for k, n in faults.items() if n} == {"cancelled": 6, "requeued": 3, "node_failure": 1}
    assert fault_text(faults) == "requeued 3, node failure 1, cancelled 6"


def test_injected_faults_and_server_restarts_are_counted() -> None:
    """An injected preempt names its link's kind; each server restart counts once."""
    records = [
        *_run("1", 0, 60, state="SIGNALLED:SIGTERM"),
        Injected(job_id="1", fault="preempt", how="x"),
        ServerRecord(job_id="2", name="env", event="restarted"),
        ServerRecord(job_id="2", name="env", event="restarted"),
        *_run("2", 70, 60, code=0, decision=Decision.DONE),
    ]
    faults = faults_survived(records, links_of(records))
    assert faults["preempted"] == 1 and faults["server_restarts"] == 2 and faults["cancelled"] == 0


def test_gpu_hours_are_gpus_times_elapsed_over_requeues_and_resubmits() -> None:
    """Every run of every job counts, a requeued run and a resubmitted chain's links included."""
    records = [
        *_run("1", 0, 1800),
        *_run("1", 1900, 900, restart=1),
        Resubmitted(),
        *_run("2", 4000, 3600, gpus=2),
    ]
    assert chain_gpu_hours(records, T0 + 10_000) == pytest.approx(4 * 0.5 + 4 * 0.25 + 2 * 1.0)


def test_a_running_link_counts_until_now() -> None:
    """A link without a decision holds its GPUs until now."""
    records: list[Record] = [Started(job_id="1", at=_iso(0), gpus=8)]
    assert chain_gpu_hours(records, T0 + 1800) == pytest.approx(4.0)
    assert run_gpu_hours([records, records], T0 + 1800) == pytest.approx(8.0)


def test_idle_gpu_hours_are_gpus_times_the_time_nothing_was_in_flight() -> None:
    """A link that held 4 GPUs and had no request in flight for 15 minutes idled 1 GPU-hour."""
    (link,) = links_of(_run("1", 0, 3600, idle_s=900))
    assert idle_gpu_hours(link) == pytest.approx(1.0)


def test_the_budget_is_the_configured_one_plus_every_raise() -> None:
    """budget.gpu_hours plus each resubmit --gpu-hours; no budget and no raise is no cap."""
    assert gpu_budget(10.0, [Resubmitted(gpu_hours_added=5), Resubmitted()]) == 15.0
    assert gpu_budget(None, [Resubmitted()]) is None


@pytest.mark.parametrize(
    ("environ", "declared", "gpus"),
    [
        ({"SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_NUM_NODES": "2"}, 1, 8),
        ({"SLURM_JOB_GPUS": "0,1,3"}, 1, 3),
        ({}, 4, 4),
        ({"SLURM_GPUS_ON_NODE": "0"}, 2, 2),
    ],
)
def test_allocated_gpus_prefer_what_slurm_says(environ: dict[str, str], declared: int, gpus: int) -> None:
    """Slurm's allocation when it tells, else the benchmark's slurm.gpus."""
    assert allocated_gpus(environ, declared) == gpus


def test_gpu_hours_in_human_units() -> None:
    """Two decimals below 10, one below 100, whole above."""
    assert [human_gpu_hours(v) for v in (0.4234, 12.34, 1204.2, None)] == [
        "0.42 GPU-h",
        "12.3 GPU-h",
        "1,204 GPU-h",
        "-",
    ]
