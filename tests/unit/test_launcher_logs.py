"""`gymslurm logs`: which link's log it prints (pure); tests/e2e/test_launcher_logs_e2e.py runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.errors import ConfigError
from gymslurm.launcher.ledger import Started, Submitted
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.views.logs import chain_links, log_files, pick_job

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
