"""A link's scheduler work does not grow with the run (issue 32): it asks only about its own chain.

A real link (``run_link``, the stand-in collector) of an array run of 1, 2 or 10,000 shards, whose
first links and spares are queued in a scripted Slurm (tests/unit/scripted_slurm.py: the client's
own parsers read Slurm's text, the client counts the calls and the rows they return). A link asks
``scontrol show job`` of itself, and of its lookahead's ids (one ``scontrol -o`` reading a ``show job``
line per id) at its start and after its decision, and queues its jobs: the same calls and rows at 1
shard as at 10,000. Its queries (squeue, sacct, scontrol) stay ≤ 3 and their rows ≤ 10, and none is
a ``squeue`` (whose ``-j`` makes slurmctld pack every job it holds: bench/job_info_rpcs.py).
tests/slurm/test_link_calls_slurm.py checks it on Slurm.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.job.chain import STRAYS_ASKED
from gymslurm.job.link import run_link
from gymslurm.launcher.settings import SlurmSettings
from gymslurm.site.backend import SlurmBackend, this_job
from tests.unit.scripted_slurm import ScriptedSlurm, array_run, benchmark

QUERIES = ("squeue", "sacct", "scontrol")
CONTINUE = [{"exit": 75, "progress": 1}]
DONE = [{"exit": 0, "progress": 1}]


def _one_link(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, shards: int, steps: list[dict[str, object]]
) -> ScriptedSlurm:
    """Run the first link of shard 0 (job array task ``100_0``) and return the client that served it."""
    client = ScriptedSlurm()
    run = array_run(tmp, shards, client, steps)
    settings = benchmark(tmp, shards)
    (run.shard_input(0)).parent.mkdir(parents=True, exist_ok=True)
    run.shard_input(0).write_text('{"q": 1}\n')
    client.states["100_0"] = "RUNNING"
    monkeypatch.setenv("SLURM_JOB_ID", "100_0")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    backend = SlurmBackend(client, accounting=True)
    run_link(run, 0, settings, backend, this_job(backend))
    return client


def _work(client: ScriptedSlurm) -> dict[str, int]:
    return {**dict(client.calls), "rows": client.rows}


@pytest.mark.parametrize("steps", [CONTINUE, DONE], ids=["continue", "done"])
def test_a_link_asks_the_same_of_the_scheduler_at_2_and_10000_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: list[dict[str, object]]
) -> None:
    """A link that continues (or finishes, its run not over) makes the same calls and reads the same
    rows in a run of 10,000 shards as in one of 2 (today's whole-queue squeue read 20,000 rows)."""
    small = _work(_one_link(tmp_path / "small", monkeypatch, 2, steps))
    large = _work(_one_link(tmp_path / "large", monkeypatch, 10_000, steps))
    assert small == large
    assert sum(large.get(name, 0) for name in QUERIES) <= 3 and large["rows"] <= 10, large


def test_a_link_of_a_one_shard_run_asks_as_little(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 1-shard figure: a continuing first link's queries ≤ 3 and rows ≤ 10; it queues its own
    lookahead (``slurm.lookahead`` links) and cancels the array's spare tasks (one scancel), which its
    own successors replace."""
    work = _work(_one_link(tmp_path, monkeypatch, 1, CONTINUE))
    assert sum(work.get(name, 0) for name in QUERIES) <= 3 and work["rows"] <= 10, work
    lookahead = SlurmSettings.model_fields["lookahead"].default
    assert (work.get("sbatch"), work.get("scancel")) == (lookahead, 1), work


def test_the_link_that_finishes_a_large_run_reads_no_other_ledger_until_the_tally_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finishing chain counts itself in the run's tally (one line); the run is not over at 1 of
    10,000, so no other shard's ledger is read and nothing run-wide is asked of Slurm (no sacct)."""
    client = _one_link(tmp_path, monkeypatch, 10_000, DONE)
    run_root = tmp_path / "runs" / "r"
    assert (run_root / "tally.jsonl").read_text().count("\n") == 1
    assert client.calls["sacct"] == 0 and not (run_root / "summary.json").exists()
    assert not any("-u" in call for call in client.log), client.log


def test_a_link_asks_its_own_jobs_by_id_never_with_squeue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm 22.05's ``squeue -j A,B`` is a whole-queue dump inside slurmctld; a link asks each of its
    few ids with ``scontrol show job`` (one record each), two asks of at most ``lookahead + 4`` ids."""
    client = _one_link(tmp_path, monkeypatch, 10_000, CONTINUE)
    assert "squeue" not in client.calls, client.log
    asks = [lines.splitlines() for lines in client.stdins if lines]
    lookahead = SlurmSettings.model_fields["lookahead"].default
    assert len(asks) == 2 and all(0 < len(ids) <= lookahead + STRAYS_ASKED for ids in asks), asks
