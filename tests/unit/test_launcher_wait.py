"""`gymslurm submit --wait`: when a run has ended, from its status report alone."""

from __future__ import annotations

import pytest

from gymslurm.launcher.submit import run_has_ended


def report(verdicts: list[str], job: str | None = None, finished: bool = False) -> dict:
    shards = [{"verdict": v} for v in verdicts]
    return {"shards": shards, "aggregation": {"job": job, "state": "x", "finished": finished}}


CASES = [
    ("a running chain has not ended", report(["HEALTHY", "DONE"]), False),
    ("a waiting chain has not ended", report(["WAITING", "DONE"]), False),
    ("all DONE but the aggregation not yet submitted is not the end", report(["DONE", "DONE"]), False),
    ("all DONE and the aggregation running is not the end", report(["DONE", "DONE"], "7"), False),
    ("all DONE and the aggregation decided is the end", report(["DONE", "DONE"], "7", True), True),
    ("a FAILED shard without aggregation is the end", report(["DONE", "FAILED"]), True),
    ("an EXHAUSTED shard with an aggregation still running is not", report(["EXHAUSTED"], "9"), False),
    ("a STALLED chain is the end (resubmit restarts it)", report(["STALLED", "DONE"]), True),
    ("a CANCELLED chain is the end", report(["CANCELLED", "CANCELLED"]), True),
    ("an UNRESPONSIVE link has not ended (Slurm or a cancel will end it)", report(["UNRESPONSIVE"]), False),
]


@pytest.mark.parametrize(("status", "ended"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_run_has_ended(status, ended):
    """--wait stops only once nothing of the run can still change by itself."""
    assert run_has_ended(status) is ended
