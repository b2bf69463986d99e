"""`gymslurm logs`: which link's log it prints, and printing/following a real local run's logs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gymslurm.errors import ConfigError
from gymslurm.launcher.ledger import Started, Submitted
from gymslurm.launcher.logs import chain_links, log_files, pick_job
from gymslurm.launcher.rundir import RunDir
from tests.unit.launcher_chains_helpers import (
    ROOT,
    gymslurm,
    only_run,
    status,
    wait_until_final,
    write_benchmark,
)

CHAIN = ["11", "12", "13"]


@pytest.mark.parametrize(("link", "job"), [(-1, "13"), (1, "11"), (2, "12"), (-3, "11")])
def test_link_numbers_pick_jobs_of_the_chain(link: int, job: str) -> None:
    """--link 1 is the chain's first job, -1 (the default) the newest."""
    assert pick_job(CHAIN, link, "shard 0") == job


def test_links_are_the_jobs_that_started_not_a_queued_successor() -> None:
    """A successor queued but never started (cancelled after DONE) is not the newest link."""
    records = [Submitted(job_id="11"), Started(job_id="11"), Submitted(job_id="12", after="11")]
    assert chain_links(records) == ["11"]  # type: ignore[arg-type]
    assert chain_links([Submitted(job_id="11")]) == ["11"]


@pytest.mark.parametrize("link", [0, 4, -4])
def test_a_link_the_chain_does_not_have_is_refused_naming_the_range(link: int) -> None:
    """A link out of range is a ConfigError that says which links exist."""
    with pytest.raises(ConfigError, match=r"has 3 link\(s\): --link takes 1..3 or -1..-3"):
        pick_job(CHAIN, link, "shard 0")


def test_log_files_are_the_jobs_output_and_the_shards_server_logs() -> None:
    """The job log is logs/shard-NNN-<job>.out; the server logs are that shard's, not another's."""
    run = RunDir(Path("/r"))
    files = log_files(run, 2, "13", ["server-demo-s002.log", "server-demo-s001.log", "shard-002-13.out"])
    assert files.job_log == Path("/r/logs/shard-002-13.out")
    assert files.server_logs == [Path("/r/logs/server-demo-s002.log")]


@pytest.mark.e2e
def test_logs_prints_the_links_job_log_and_follow_stops_after_its_decision(tmp_path: Path) -> None:
    """On a local run: `logs --follow` prints the running link's log and ends once it decided."""
    bench = write_benchmark(tmp_path, [{"exit": 0, "sleep": 3}])
    gymslurm("submit", str(bench), "--backend", "local", "shards=1", "aggregation.enabled=false")
    run = only_run(tmp_path)
    deadline = time.monotonic() + 30
    while status(run)["shards"][0]["verdict"] != "HEALTHY":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    follow = subprocess.run(
        [sys.executable, "-m", "gymslurm", "logs", str(run), "--follow"], cwd=ROOT, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert follow.returncode == 0, follow.stderr
    assert "==> " in follow.stdout and "shard-000-local-1.out <==" in follow.stdout
    assert "decision DONE" in follow.stdout and "stopped following" in follow.stdout
    wait_until_final(run, aggregation=False)
    again = gymslurm("logs", str(run), "--link", "1")
    assert "decision DONE" in again.stdout
    refused = gymslurm("logs", str(run), "--link", "5", check=False)
    assert refused.returncode == 2 and "has 1 link(s)" in refused.stderr
