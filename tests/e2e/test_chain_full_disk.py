"""A full disk under a chain is a verdict, not silence (issue 19 §4), on a real tmpfs (as root).

The run directory sits on a 16 MiB tmpfs that the test fills while a link collects: the collector
fails to write, the link decides "disk full" (no retry spent), the next link finds no space,
records ``disk_full`` in the ledger's reserved room and waits; ``status`` says DISK_FULL "disk full
at PATH". Once the test frees the space the chain goes on by itself (no human command) and the run
ends DONE with every answer merged once. Before issue 19 the links and the local supervisor died
without a word and the run hung for good.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.kill_harness import HERE, ROOT
from tests.e2e.launcher_chains_helpers import status, wait_until_final
from tests.full_disk import fill, free, small_filesystem
from tests.support import wait_until

pytestmark = pytest.mark.e2e
ROWS = 6


def test_a_full_disk_reads_disk_full_and_the_chain_goes_on_once_space_is_back(tmp_path: Path) -> None:
    """Fill the run's tmpfs mid-run: DISK_FULL naming the path; free it: DONE by itself, merged once."""
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(ROWS)))
    with small_filesystem(tmp_path / "disk", 16 * 1024) as disk:
        bench = tmp_path / "bench.yaml"
        bench.write_text(
            f"dataset: {tmp_path / 'data.jsonl'}\nrun_root: {disk / 'runs'}\nshards: 1\n"
            f"collector:\n  command: [{sys.executable}, {HERE / 'kill_collector.py'}, '1.0', '2']\n"
            f"aggregation:\n  command: [{sys.executable}, {HERE / 'kill_merge.py'}, '{{inputs_glob}}', "
            "'{output}']\nslurm:\n  time: '00:05:00'\n"
        )
        done = subprocess.run(
            [sys.executable, "-m", "gymslurm", "submit", str(bench), "--backend", "local"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        (run,) = [p.parent for p in (disk / "runs").glob("*/run.json")]
        answers = run / "output/shard-000/rollouts.jsonl"
        wait_until(
            lambda: answers.exists() and answers.read_text().count("\n") >= 1,
            120,
            "a first answer",
            every_s=0.3,
        )
        fill(disk)
        try:
            row = wait_until(
                lambda: next((r for r in status(run)["shards"] if r["verdict"] == "DISK_FULL"), None),
                120,
                "status to say DISK_FULL",
                every_s=0.3,
            )
            assert f"disk full at {run}" in row["why"], row["why"]
        finally:
            free(disk)
        report = wait_until_final(run, timeout_s=300)
        assert report["shards"][0]["verdict"] == "DONE", (report, done.stdout)
        merged = (run / "output/merged/rollouts.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in merged] == [{"q": i, "a": 2 * i} for i in range(ROWS)]
        decisions = [json.loads(x) for x in (run / "shards/000/ledger.jsonl").read_text().splitlines()]
        assert any(r["kind"] == "disk_full" for r in decisions)
        spent = [r["budgets_after"]["infra_retries_used"] for r in decisions if r["kind"] == "decision"]
        assert spent and max(spent) == 0, decisions
