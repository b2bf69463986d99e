"""`gymslurm submit --wait`: when a run has ended and what its last line says, from its status alone."""

from __future__ import annotations

import pytest

from gymslurm.commands.wait import wait_outcome
from gymslurm.launcher.views.document import StatusDocument
from tests.status_documents import document, row


def report(
    verdicts: list[str],
    job: str | None = None,
    finished: bool = False,
    *,
    stalled: bool = False,
    state: str = "x",
    job_state: str = "COMPLETED",
) -> StatusDocument:
    shards = [row(i, v, job_state=job_state) for i, v in enumerate(verdicts)]
    return document(shards, job, finished, stalled=stalled, state=state)


ON, OFF = True, False
CASES = [
    ("a running chain has not ended", report(["HEALTHY", "DONE"]), ON, None),
    ("a waiting chain has not ended", report(["WAITING", "DONE"]), ON, None),
    (
        "all DONE while the last link still queues the aggregation is not the end",
        report(["DONE"], job_state="RUNNING"),
        ON,
        None,
    ),
    (
        "all DONE, no aggregation queued and no job left is the end, never a wait on nothing",
        report(["DONE", "DONE"]),
        ON,
        (1, "aggregation never queued"),
    ),
    ("all DONE and the aggregation running is not the end", report(["DONE", "DONE"], "7"), ON, None),
    (
        "all DONE and the aggregation DONE is done, exit 0",
        report(["DONE", "DONE"], "7", True, state="DONE: aggregate exited 0"),
        ON,
        (0, "done:"),
    ),
    (
        "all DONE with the aggregation disabled is done when the shards end",
        report(["DONE", "DONE"]),
        OFF,
        (0, "done: every shard DONE (aggregation disabled)"),
    ),
    (
        "a killed aggregation with no job left ends the wait, naming resubmit",
        report(["DONE"], "7", stalled=True, state="STALLED: ..."),
        ON,
        (1, "aggregation stalled"),
    ),
    (
        "an aggregation that stopped FAILED exits 76",
        report(["DONE"], "7", True, state="STOP_FAILED: aggregate exited 76"),
        ON,
        (76, "aggregation stopped"),
    ),
    (
        "a FAILED shard without aggregation is the end, 76",
        report(["DONE", "FAILED"]),
        ON,
        (76, "stopped: shard 1 FAILED"),
    ),
    ("an EXHAUSTED shard with an aggregation still running is not", report(["EXHAUSTED"], "9"), ON, None),
    (
        "an EXHAUSTED shard once the aggregation ended exits 1",
        report(["EXHAUSTED"], "9", True),
        ON,
        (1, "stopped: shard 0 EXHAUSTED"),
    ),
    (
        "a STALLED chain is the end, naming resubmit",
        report(["STALLED", "DONE"]),
        ON,
        (1, "stopped: shard 0 STALLED"),
    ),
    ("a CANCELLED chain is the end, 130", report(["CANCELLED", "CANCELLED"]), ON, (130, "cancelled:")),
    ("a full disk ends the wait, 75", report(["DISK_FULL", "HEALTHY"]), ON, (75, "disk full:")),
    ("an UNRESPONSIVE link has not ended (the link or Slurm ends it)", report(["UNRESPONSIVE"]), ON, None),
]


@pytest.mark.parametrize(
    ("status", "aggregation", "outcome"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_wait_outcome(status: StatusDocument, aggregation: bool, outcome: tuple[int, str] | None) -> None:
    """--wait stops only once nothing of the run can change by itself, with the code and words of how."""
    got = wait_outcome(status, aggregation)
    if outcome is None:
        assert got is None
        return
    assert got is not None
    assert (int(got[0]), got[1].startswith(f"run r: {outcome[1]}")) == (outcome[0], True), got


def test_a_stopped_shard_names_its_way_out() -> None:
    """The last line of a stop names the verdict, the reason and the command that continues."""
    got = wait_outcome(report(["STALLED"]), True)
    assert got is not None and "why STALLED" in got[1] and "'gymslurm resubmit r b'" in got[1]
