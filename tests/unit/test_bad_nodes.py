"""Faults by Slurm's word and the nodes a chain keeps its links off (issue 32).

A link that wrote its own decision after a signal is labelled by how Slurm ended that run, as the
chain's next link asked it (``slurm_end``): a node failure whose TERM reached the link is a node
failure, not a requeue; a CANCEL-mode preemption is a preemption, not a cancel; a pause is no fault.
A node on which two links of the chain met a node failure is bad: the chain's later links are
queued ``--exclude`` it (at most three nodes).
"""

from __future__ import annotations

import pytest

from gymslurm.job.gates import signalled_decision
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import BudgetsRecord, DecisionRecord, Record, SlurmEnded, Started
from gymslurm.launcher.links import MAX_EXCLUDED_NODES, bad_nodes, faults_survived, links_of


def _run(
    job: str, restart: int, host: str, state: str, decision: Decision, *, by: str | None = None
) -> list[Record]:
    decided = DecisionRecord(
        job_id=job,
        restart_count=restart,
        end="t",
        elapsed_s=10,
        slurm_state=state,
        exit_code=None,
        decision=decision,
        reason="why",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord(),
        accounted_by=by,
    )
    return [Started(job_id=job, restart_count=restart, host=host), decided]


def _kinds(records: list[Record]) -> list[str | None]:
    links = links_of(records)
    faults_survived(records, links)
    return [link["interruption"] for link in links]


TERM = "SIGNALLED:SIGTERM"
ROWS: list[tuple[str, list[Record], list[str | None]]] = [
    (
        "a TERM, then the same job again: requeued, unless Slurm says the node failed",
        [*_run("7", 0, "a1", TERM, Decision.CONTINUE), *_run("7", 1, "a2", "RUNNING", Decision.DONE)],
        ["requeued", None],
    ),
    (
        "the same, with Slurm's word NODE_FAIL: a node failure",
        [
            *_run("7", 0, "a1", TERM, Decision.CONTINUE),
            SlurmEnded(job_id="7", restart_count=0, state="NODE_FAIL"),
            *_run("7", 1, "a2", "RUNNING", Decision.DONE),
        ],
        ["node_failure", None],
    ),
    (
        "a TERM and no rerun, Slurm's word PREEMPTED (PreemptMode=CANCEL): a preemption",
        [
            *_run("7", 0, "a1", TERM, Decision.CONTINUE),
            SlurmEnded(job_id="7", restart_count=0, state="PREEMPTED"),
            *_run("8", 0, "a2", "RUNNING", Decision.DONE),
        ],
        ["preempted", None],
    ),
    (
        "a TERM and no rerun, Slurm's word CANCELLED: scancel",
        [
            *_run("7", 0, "a1", TERM, Decision.CONTINUE),
            SlurmEnded(job_id="7", restart_count=0, state="CANCELLED"),
            *_run("8", 0, "a2", "RUNNING", Decision.DONE),
        ],
        ["cancelled", None],
    ),
    ("a pause is no fault", _run("7", 0, "a1", TERM, Decision.PAUSED), [None]),
]


@pytest.mark.parametrize(("name", "records", "kinds"), ROWS, ids=[r[0] for r in ROWS])
def test_faults_are_counted_by_slurms_word(name: str, records: list[Record], kinds: list[str | None]) -> None:
    """The table, row by row."""
    assert _kinds(records) == kinds


def test_a_node_that_failed_twice_under_the_chain_is_bad() -> None:
    """Two node failures on a1 (one NODE_FAIL by accounting, one requeue Slurm called NODE_FAIL): a1 is
    bad; a2, which failed once, is not."""
    records = [
        *_run("7", 0, "a1", "NODE_FAIL", Decision.CONTINUE, by="7"),
        *_run("7", 1, "a2", "REQUEUED", Decision.CONTINUE, by="7"),
        *_run("7", 2, "a1", TERM, Decision.CONTINUE),
        SlurmEnded(job_id="7", restart_count=2, state="NODE_FAIL"),
        *_run("7", 3, "a3", "RUNNING", Decision.CONTINUE),
    ]
    assert bad_nodes(records) == {"a1": 2}
    assert bad_nodes(records[:6]) == {}  # one failure each: not bad yet


def test_the_bad_nodes_are_bounded() -> None:
    """Five nodes failed twice each: only the first MAX_EXCLUDED_NODES are kept off."""
    records: list[Record] = []
    for n in range(5):
        for restart in (0, 1):
            records += _run(f"j{n}", restart, f"n{n}", "NODE_FAIL", Decision.CONTINUE, by="x")
    assert len(bad_nodes(records)) == MAX_EXCLUDED_NODES


def test_slurm_is_asked_once_of_a_run_that_decided_after_a_signal() -> None:
    """The newest decision, a link's own after a signal: asked; once answered, or accounted for by a
    successor, or not signalled: not asked."""
    signalled = _run("7", 0, "a1", TERM, Decision.CONTINUE)
    assert signalled_decision(signalled) == signalled[1]
    assert signalled_decision([*signalled, SlurmEnded(job_id="7", state="CANCELLED")]) is None
    assert signalled_decision(_run("7", 0, "a1", "NODE_FAIL", Decision.CONTINUE, by="8")) is None
    assert signalled_decision(_run("7", 0, "a1", "RUNNING", Decision.CONTINUE)) is None
