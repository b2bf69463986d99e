"""The rows of queued chains made from one template per queue shape (views/status.py, issue 32): the same
document, byte for byte, as every row made from its own chain, and no chain's records built for them.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from gymslurm.launcher.ledger import Submitted
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.views.status import read_chains, run_status
from gymslurm.site.backend import SlurmBackend
from tests.unit.scripted_slurm import ScriptedSlurm, array_run

NOW = 1_800_000_000.0

# Each shard's first link (array 100) and spare (array 101), as squeue shows them; None: not listed.
QUEUE = {
    0: (("PENDING", "JobHeldUser"), ("PENDING", "JobHeldUser")),
    1: (("PENDING", "JobHeldUser"), ("PENDING", "JobHeldUser")),  # shard 0's shape: its template
    2: (("PENDING", "Priority"), ("PENDING", "Dependency")),
    3: (("PENDING", "Reason{0}"), ("PENDING", "Dependency")),  # braces in a reason
    4: (("RUNNING", "None"), ("PENDING", "Dependency")),  # running: its own files are read
    5: (None, ("PENDING", "Dependency")),  # its first link not listed: asked of accounting
    6: (("PENDING", "JobHeldUser"), ("PENDING", "JobHeldUser")),  # a ledger of its own (below)
    7: (("PENDING", "JobHeldUser"), ("REQUEUE_HOLD", "JobHeldAdmin")),
    8: (("PENDING", "Priority"), ("PENDING", "DependencyNeverSatisfied")),
}


def _run(tmp_path: Path) -> tuple[RunDir, ScriptedSlurm]:
    client = ScriptedSlurm()
    run = array_run(tmp_path, len(QUEUE), client, [])
    lines = []
    for shard, jobs in QUEUE.items():
        for array, shown in zip(("100", "101"), jobs, strict=True):
            if shown is not None:
                lines.append(f"{array}_{shard}|gs-r|{shown[0]}|{shown[1]}|(null)|0:00|5:00|N/A\n")
    lines.append("200|gs-r-agg|PENDING|Dependency|afterany:100|0:00|5:00|N/A\n")  # the aggregation waits
    client.replies["squeue"] = ["".join(lines)]
    run.aggregate_ledger.append(Submitted(job_id="200", by="submit", at="t"))
    client.replies["sacct"] = [""]
    run.ledger(6).append(Submitted(job_id="100_6", by="submit (array)", at="t"))
    (run.root / "logs").mkdir()
    (run.root / "logs" / "shard-001-100_1.out").write_text("")  # a log of a template's shard
    return run, client


def test_templated_rows_are_the_rows_each_chain_makes(tmp_path: Path) -> None:
    """Held, pending, never-satisfied, running, unlisted and ledgered chains side by side, and the
    aggregation waiting on the held ones: the document with templated rows is byte for byte the one
    with every row made from its own chain."""
    run, client = _run(tmp_path)
    chains = read_chains(run, len(QUEUE))
    templated = run_status(run, SlurmBackend(client, accounting=False), NOW, chains=chains)
    again = ScriptedSlurm(client.replies)  # its own count of queries
    plain = run_status(run, SlurmBackend(again, accounting=False), NOW, chains=chains, templated=False)
    assert orjson.dumps(templated) == orjson.dumps(plain)
    assert "'scontrol release 100_1'" in templated.shards[1].why  # its own id, not its template's
    assert templated.shards[1].log == str(run.root / "logs" / "shard-001-100_1.out")
    assert templated.shards[3].why == "job 100_3 pending (Reason{0})"
    assert "waits for held job(s) 100_0 101_0 100_1 101_1 100_6" in templated.aggregation.state


def test_queued_chains_build_one_chains_records_per_shape(tmp_path: Path) -> None:
    """Of the chains that are their queued array submission alone, status builds the records of one per
    shape (its template), not one per shard: 5 shapes among shards 0-3, 7 and 8; 4, 5 and 6 read
    their own."""
    run, client = _run(tmp_path)
    chains = read_chains(run, len(QUEUE))
    run_status(run, SlurmBackend(client, accounting=False), NOW, chains=chains)
    assert chains.built == [0, 2, 3, 4, 5, 6, 7, 8]


def test_bare_chains_are_bare_jobs_in_one_pass(tmp_path: Path) -> None:
    """One pass over the arrays names the same chains, with the same jobs, as asking each shard (two
    arrays of first links, a shard with a ledger folder left out)."""
    run = array_run(tmp_path, 1_500, ScriptedSlurm(), [])
    run.ledger(1_003).append(Submitted(job_id="x", at="t"))
    chains = read_chains(run, 1_500)
    expected = [(s, jobs) for s in range(1_500) if (jobs := chains.bare_jobs(s)) is not None]
    assert list(chains.bare_chains()) == expected
    assert len(expected) == 1_499
