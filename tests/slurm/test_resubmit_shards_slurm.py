"""``gymslurm resubmit RUN BENCH --shards 0,2`` on the real Slurm with job arrays (issue 19): the
selected shards restart as tasks of one new array (one ``sbatch`` for their first links, and one
per level of spares behind them), the shard left out keeps its ledger byte for byte."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import SlurmCluster, submitted_up_front
from .launcher_chains import Chain

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def chain(slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path) -> Iterator[Chain]:
    """Three shards whose first collector run exits 76 (FAILED) and whose next one is DONE."""
    spec = dict(steps=[{"exit": 76}, {"exit": 0}], overrides=["shards=3", "aggregation.enabled=false"])
    for chains in submitted_up_front(
        slurm_session_dir,
        "resubmit-shards",
        {"failed": spec},
        lambda user, spec: Chain(user, slurm_python, **spec).submit(),  # type: ignore[arg-type]
    ):
        yield chains["failed"]


def test_resubmit_shards_restarts_the_selected_shards_in_one_array(chain: Chain) -> None:
    """--shards 0,2 of three FAILED shards: shards 0 and 2 get first links ``A_0``, ``A_2`` of one new
    array A (and their spares as tasks of one array per level: B and C at slurm.lookahead 3), run DONE;
    shard 1 is FAILED with its ledger unchanged."""

    def queued(shard: int, by: str) -> list[str]:
        return [r["job_id"] for r in chain.ledger(shard) if r["kind"] == "submitted" and r.get("by") == by]

    report = chain.wait(timeout=240, aggregation=False)
    assert [row["verdict"] for row in report["shards"]] == ["FAILED"] * 3, report
    assert chain.run is not None
    shard_1 = (chain.run / "shards/001/ledger.jsonl").read_bytes()
    chain.gymslurm("resubmit", str(chain.run), str(chain.user.workdir / "bench.yaml"), "--shards", "0,2")
    (first_0,), (first_2,) = queued(0, "resubmit"), queued(2, "resubmit")
    arrays = {job.split("_")[0] for job in (first_0, first_2)}
    assert (first_0.split("_")[1], first_2.split("_")[1], len(arrays)) == ("0", "2", 1), (first_0, first_2)
    spares = queued(0, "resubmit (spare)") + queued(2, "resubmit (spare)")
    levels = {job.split("_")[0] for job in spares}
    assert len(levels) == 2 and sorted(spares) == sorted(f"{a}_{s}" for a in levels for s in (0, 2)), spares
    for shard in (0, 2):
        chain.wait_for_decisions(more_than=1, shard=shard)
    report = chain.wait(timeout=240, aggregation=False)
    assert [row["verdict"] for row in report["shards"]] == ["DONE", "FAILED", "DONE"], report
    assert [d["job_id"] for d in chain.decisions(0)][1] == first_0
    assert (chain.run / "shards/001/ledger.jsonl").read_bytes() == shard_1
