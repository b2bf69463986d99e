"""One node of the multi-node sandbox goes DOWN under one shard; the shards on other nodes go on.

Why: a node failure kills a link without the time-limit warning; that shard's chain must still go
on (Slurm requeues the ``--requeue`` job, or its successor runs) and end DONE with no doubled
link, and the real collector, stopped mid-collection, must resume without counting a rollout
twice. The shards running on the other nodes must not notice at all: one link each, never
requeued. Here the node returns to service within seconds (the test resumes it; with
``ReturnToService=2`` slurmd's next answer would too), so what is exercised is Slurm killing and
requeueing the link (``NODE FAILURE``), not a long outage.

Three shards each ask for 5 of a node's 8 CPUs, so no two share a node. Setting a node DOWN kills
every job on it, so the test first drains the node (nothing new lands there) and waits until no
job but its own runs on it (other tests, other pytest sessions). Shard 0's link is suspended
(``scontrol suspend``: its steps stopped) from its second saved result until the node is about
to go DOWN, so it is mid-collection then however long the wait (it used to wait for every
shard's first link to start before it looked at shard 0, and shard 0 had finished by then: its
first decision DONE, seen in CI). The other shards' first links are read from their ledgers
when the run is done. It always resumes the node in a ``finally`` block and waits until it is
up again.

What the docs promise of the killed run (docs/launcher.md, "A link that died without a
decision"): it writes no decision, and the next run of the chain writes it, ``accounted_by``,
as CONTINUE without spending a retry: Slurm's requeue of the same job (same id, next restart
count: "an earlier run of this requeued job") or its successor (NODE_FAIL).
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until

from .helpers import (
    TEST_USER,
    SlurmCluster,
    SlurmUser,
    ensure_test_user,
    make_user_dir,
    run,
)
from .launcher_real import RealChain
from .nodes import down_under, resume_node, wait_until_alone_on

pytestmark = pytest.mark.slurm

TASKS = 60
SHARDS = 3
SCENARIO: dict[str, Any] = dict(
    tasks=TASKS,
    shards=SHARDS,
    server_flags=["--latency-ms", "1000"],
    collector=["+concurrency=1"],
    slurm="  time: '00:05:00'\n  extra_directives: ['--cpus-per-task=5']\n",
)


def _first_starts(chain: RealChain, shards: range, timeout: float = 180) -> dict[int, dict[str, Any]]:
    """Each of these shards' first start record (its first link's job id and host), once written."""

    def starts() -> dict[int, list[dict[str, Any]]]:
        return {s: [r for r in chain.ledger(s) if r["kind"] == "start"] for s in shards}

    def first_starts() -> dict[int, dict[str, Any]] | None:
        seen = starts()
        return {s: records[0] for s, records in seen.items()} if all(seen.values()) else None

    return wait_until(first_starts, timeout, lambda: f"every shard to start: {starts()}", every_s=0.5)


def _mid_collection(chain: RealChain, shard: int, outcomes: int, timeout: float = 120) -> None:
    """Wait until a shard's collector saved ``outcomes`` results."""
    path = chain.output(shard)
    wait_until(
        lambda: path.exists() and len(path.read_text().splitlines()) >= outcomes,
        timeout,
        f"{outcomes} results in {path}",
        every_s=0.5,
    )


@pytest.fixture(scope="module")
def downed(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> Iterator[dict[str, Any]]:
    """Three shards on three nodes; shard 0's node set DOWN mid-collection, resumed; all finished."""
    assert len(slurm_cluster.nodes) >= SHARDS, f"needs {SHARDS} nodes, the sandbox has {slurm_cluster.nodes}"
    ensure_test_user(TEST_USER)
    user = SlurmUser(TEST_USER, make_user_dir(slurm_session_dir, "node-down", owner=TEST_USER), as_root=True)
    chain = RealChain(user, slurm_python, SCENARIO).submit()
    node, suspended = "", ""
    try:
        first = _first_starts(chain, range(1))[0]
        job, node = str(first["job_id"]), first["host"]
        run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=gymslurm-test-drain"])
        _mid_collection(chain, 0, outcomes=2)
        # Stopped mid-collection while others' jobs leave the node, or it could finish first and
        # nothing would be left to kill.
        run(["scontrol", "suspend", job])
        suspended = job
        wait_until_alone_on(node, {job})
        # A neighbour's node DOWN may have requeued it meanwhile ("Job is pending execution", seen in
        # the suite): then it has already been killed mid-collection, which is what this test wants.
        subprocess.run(["scontrol", "resume", job], capture_output=True, check=False)
        suspended = ""
        down_under(node, job)
        resume_node(node)
        report = chain.finished(timeout=300)
        starts = _first_starts(chain, range(SHARDS))
        links = {s: str(start["job_id"]) for s, start in starts.items()}
        placed = {s: start["host"] for s, start in starts.items()}
        yield {"chain": chain, "links": links, "placed": placed, "node": node, "report": report}
    finally:
        if suspended:
            subprocess.run(["scontrol", "resume", suspended], capture_output=True, check=False)
        if node:
            resume_node(node)
        chain.cancel()


def test_the_shard_under_the_downed_node_ends_done_with_each_rollout_once(downed: dict[str, Any]) -> None:
    """Node DOWN mid-collection, then resumed: the link reruns or its successor runs, DONE, no doubles.

    The killed run's CONTINUE, retries unspent, is written by the run after it (``accounted_by``) or,
    when slurmd still delivers the TERM before the node's processes go (seen in the suite), by the
    killed link itself.
    """
    chain, job, report = downed["chain"], downed["links"][0], downed["report"]
    decisions = chain.decisions(0)
    killed = decisions[0]
    assert (killed["job_id"], killed["restart_count"], killed["decision"]) == (job, 0, "CONTINUE"), decisions
    assert killed["budgets_after"]["infra_retries_used"] == killed["budgets_before"]["infra_retries_used"]
    assert [d["decision"] for d in decisions[1:]] == ["DONE"], decisions
    assert report["shards"][0]["verdict"] == "DONE" and report["aggregation"]["state"].startswith("DONE")
    assert len([r for r in chain.ledger(0) if r["kind"] == "submitted" and r["after"] == job]) == 1
    per_shard = TASKS // SHARDS
    assert chain.rollout_ids(0) == Counter({f"arith-{i}": 1 for i in range(per_shard)})
    merged = chain.rollout_ids(None)
    assert merged == Counter({f"arith-{i}": 1 for i in range(TASKS)})
    # Known: Slurm TERMs the demo server with the collector, so the request in flight may end as a
    # counted transport_peer_drop (one attempt of that rollout's budget) rather than missing.


def test_shards_on_the_other_nodes_finish_untouched(downed: dict[str, Any]) -> None:
    """The shards whose nodes stayed up ran one link each, never requeued, and ended DONE."""
    chain, links, placed = downed["chain"], downed["links"], downed["placed"]
    # Every other shard ran its one link untouched, beside the downed node or, when it started
    # late (others' jobs held the nodes), on that node after it came back.
    for shard in range(1, SHARDS):
        decisions = chain.decisions(shard)
        assert [(d["job_id"], d["restart_count"], d["decision"]) for d in decisions] == [
            (links[shard], 0, "DONE")
        ], (decisions, placed)
        assert downed["report"]["shards"][shard]["verdict"] == "DONE"
