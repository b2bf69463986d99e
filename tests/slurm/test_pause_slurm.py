"""Pause then resume on the real Slurm with the real collector and demo server (docs/launcher.md).

Two runs of one scenario (two shards of 120 tasks at 0.3 s, one request at a time): one left alone,
one paused while both shards' collectors are saving outcomes, then resumed. The paused run must
leave nothing in the queue, spend no retry, and merge the same rows as the unpaused run (every field
but the run id, except the request in flight at the pause, sent again: ``assert_same_results``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.launcher_chains_helpers import assert_same_results
from tests.support import wait_until

from .helpers import SlurmCluster, scenario_user
from .launcher_real import RealChain

pytestmark = pytest.mark.slurm

SCENARIO: dict[str, Any] = dict(
    tasks=240,
    shards=2,
    server_flags=["--latency-ms", "300"],
    collector=["+concurrency=1", "+live_progress_interval_s=1"],
    slurm="  time: '00:10:00'\n",
)


def _saved(chain: RealChain, shard: int) -> int:
    path = chain.output(shard)
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_pause_frees_the_queue_spends_nothing_and_resume_merges_what_an_unpaused_run_merges(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """pause: every shard PAUSED, no job of the run left in squeue, no retry spent; resume: DONE, and
    the merged rows equal those of the same scenario never paused."""
    plain = RealChain(scenario_user(slurm_session_dir, "pause-plain"), slurm_python, SCENARIO).submit()
    chain = RealChain(scenario_user(slurm_session_dir, "pause-paused"), slurm_python, SCENARIO).submit()
    try:
        wait_until(
            lambda: _saved(chain, 0) >= 2 and _saved(chain, 1) >= 2,
            300,
            "both shards saving outcomes",
            every_s=1.0,
        )
        out = chain.gymslurm("pause", str(chain.run))
        assert "paused 2 chain(s)" in out, out

        def quiet() -> bool:
            rows = chain.status()["shards"]
            return all(r["verdict"] == "PAUSED" and "saving" not in r["why"] for r in rows)

        wait_until(quiet, 300, "every shard PAUSED with no link still saving", every_s=1.0)
        wait_until(
            lambda: not chain.active_jobs(),
            120,
            "squeue to let go of every job of the paused run",
            every_s=1.0,
        )
        for shard in (0, 1):
            decided = chain.decisions(shard)
            assert decided[-1]["decision"] == "PAUSED", decided[-1]
            assert decided[-1]["budgets_after"]["infra_retries_used"] == 0
            assert 2 <= _saved(chain, shard) < SCENARIO["tasks"] // 2
        assert chain.run is not None
        chain.gymslurm("resume", str(chain.run), str(chain.user.workdir / "bench.yaml"))
        report = chain.finished(timeout=600)
        assert [row["verdict"] for row in report["shards"]] == ["DONE", "DONE"]
        for shard in (0, 1):
            kinds = [d["decision"] for d in chain.decisions(shard)]
            assert "RETRY" not in kinds and kinds[-1] == "DONE", kinds
        plain.finished(timeout=600)
        # One request at a time: each link that ended before DONE (the pause's, and any a neighbour's
        # fault on the shared sandbox requeued: seen, a third and a fourth) had at most one in flight.
        interrupted = sum(d["decision"] != "DONE" for shard in (0, 1) for d in chain.decisions(shard))
        assert_same_results(chain.output(None), plain.output(None), in_flight_max=interrupted)
        assert len(chain.output(None).read_text().splitlines()) == SCENARIO["tasks"]
    finally:
        chain.cancel()
        plain.cancel()
