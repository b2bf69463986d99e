"""A signal in a job's first instant (USR1 at once when ``signal_lead_s`` is the whole ``--time``)
never kills the batch shell or the chain step: every link writes its own decision.

This is the flaky real-Slurm walltime test's cause (issue 19): Slurm sends the USR1 of
``--signal=B:USR1@60`` to a one-minute job at the first limit check, which can be the job's first
second; a shell without its trap yet, or a chain step without its handlers, died of it (USR1's
default action), wrote nothing and queued nothing, and the chain read STALLED with no decision.
The local backend sends the USR1 at its first tick (0.2 s) here, the same race.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import gymslurm, ledger, only_run, wait_until_final, write_benchmark

pytestmark = pytest.mark.e2e


def test_usr1_in_the_first_instant_of_every_link_kills_no_link(tmp_path: Path) -> None:
    """time 8 s, signal lead 8 s: USR1 at once; links decide themselves until the no-progress stop."""
    bench = write_benchmark(
        tmp_path,
        [{"exit": 75, "sleep": 1, "on_signal": 75, "progress": 0}],
        "slurm:\n  time: '00:00:08'\n  signal_lead_s: 8\n  max_links_without_progress: 3\n  lookahead: 1\n"
        "aggregation:\n  enabled: false\n",
    )
    gymslurm("submit", str(bench), "--backend", "local")
    run = only_run(tmp_path)
    report = wait_until_final(run, timeout_s=240, aggregation=False)
    decisions = [r for r in ledger(run) if r["kind"] == "decision"]
    starts = [r for r in ledger(run) if r["kind"] == "start"]
    assert report["shards"][0]["verdict"] == "EXHAUSTED", report["shards"][0]
    assert len(decisions) == len(starts) == 3
    assert all(d["accounted_by"] is None for d in decisions), decisions
