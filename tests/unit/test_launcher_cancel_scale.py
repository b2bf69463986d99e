"""cancel at any number of shards (issue 19's ``cancel`` ≤ 2 s at 10,000): one run-level record stands
for every never-started shard of an array run, the shards that have a ledger get theirs in one
commit, and a first link starting during cancel is cancelled either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymslurm.commands.cancel import cancel_run
from gymslurm.job.gates import cancelled_while_starting
from gymslurm.launcher.ledger import Cancelled, Ledger, Resubmitted, Started, Submitted, append_each
from gymslurm.launcher.rundir import ArrayPart, ArrayRecord, RunDir, atomic_write, chain_states
from gymslurm.site.backend import SlurmBackend
from tests.run_info import run_info
from tests.unit.scripted_slurm import ScriptedSlurm

SHARDS = 300


def _array_run(tmp_path: Path, shards: int = SHARDS) -> RunDir:
    """A Slurm array run of ``shards`` shards in two arrays (100, 101), no link started yet."""
    run = RunDir(tmp_path / "r")
    info = run_info(shards=shards, accounting=False, array=True)
    atomic_write(run.info_path, info.model_dump_json().encode())
    half = shards // 2
    parts = [
        ArrayPart(job_id="100", base=0, size=half),
        ArrayPart(job_id="101", base=half, size=shards - half),
    ]
    array = ArrayRecord(job_id="100", shards=shards, max_running=None, at="t", chunk=half, parts=parts)
    atomic_write(run.array_path, array.model_dump_json().encode())
    return run


def _pending(run: RunDir) -> str:
    array = run.read_array()
    assert array is not None
    tasks = [array.task(s) for s in range(run.read_info().shards)]
    return "".join(f"{t}|gs|PENDING|JobArrayTaskLimit|(null)|0:00|5:00|N/A\n" for t in tasks)


def test_cancel_of_a_never_started_array_run_writes_one_record_not_one_per_shard(tmp_path: Path) -> None:
    """300 pending first links: one cancelled record in the run's ledger, no shard ledger created, every
    shard reads CANCELLED, and the arrays are cancelled as two scancel arguments."""
    run = _array_run(tmp_path)
    client = ScriptedSlurm({"squeue": _pending(run)})
    assert cancel_run(run, SlurmBackend(client, accounting=False)) == 0
    assert [r.kind for r in run.run_ledger.read()] == ["cancelled"]
    assert not (run.root / "shards").exists()
    states = chain_states(run, SHARDS)[:-1]
    assert all(state.cancelled and state.finished for state in states)
    assert [call for call in client.log if call[0] == "scancel"] == [["scancel", "100", "101"]]


def test_cancel_records_its_own_cancel_in_each_started_shard(tmp_path: Path) -> None:
    """A shard whose first link runs has a ledger: it gets its own cancelled record; the others the run's."""
    run = _array_run(tmp_path, shards=4)
    run.ledger(1).append(Started(job_id="100_1"))
    squeue = _pending(run).replace("100_1|gs|PENDING|JobArrayTaskLimit", "100_1|gs|RUNNING|None")
    cancel_run(run, SlurmBackend(ScriptedSlurm({"squeue": squeue}), accounting=False))
    assert [r.kind for r in run.ledger(1).read()] == ["start", "cancelled"]
    assert [s for s in range(4) if run.ledger(s).path.exists()] == [1]
    assert all(state.cancelled for state in chain_states(run, 4)[:-1])


def test_a_first_link_starting_after_the_run_record_cancels_its_own_shard(tmp_path: Path) -> None:
    """The run's record was written, then the link wrote its start (cancel had listed no ledger for it):
    the link must write the shard's cancel itself, since its start ended what the run's record covers."""
    run = _array_run(tmp_path, shards=2)
    run.run_ledger.append(Cancelled(job_ids=["100", "101"]))
    started = Started(job_id="100_0")
    run.ledger(0).append(started)
    assert not chain_states(run, 2)[0].cancelled  # the run's record no longer stands for shard 0
    assert cancelled_while_starting(run, 0, started) is True


def test_a_first_link_whose_start_cancel_saw_leaves_the_record_to_cancel(tmp_path: Path) -> None:
    """cancel read the link's start and wrote the shard's own record: the link stops and writes nothing."""
    run = _array_run(tmp_path, shards=2)
    run.run_ledger.append(Cancelled(job_ids=["100", "101"]))
    started = Started(job_id="100_0")
    run.ledger(0).append(started)
    run.ledger(0).append(Cancelled(job_ids=["100_0"]))
    assert cancelled_while_starting(run, 0, started) is False


def test_the_run_record_is_not_a_cancel_of_a_shard_that_had_a_ledger(tmp_path: Path) -> None:
    """A shard resubmitted after the run's cancel has records of its own: its next start is not cancelled."""
    run = _array_run(tmp_path, shards=2)
    run.run_ledger.append(Cancelled(job_ids=["100", "101"]))
    run.ledger(0).append(Resubmitted())
    run.ledger(0).append(Submitted(job_id="200_0", by="resubmit"))
    started = Started(job_id="200_0")
    run.ledger(0).append(started)
    states = chain_states(run, 2)
    assert not states[0].cancelled and states[1].cancelled
    assert cancelled_while_starting(run, 0, started) is None


def test_a_run_without_a_run_record_is_never_cancelled_at_start(tmp_path: Path) -> None:
    """No cancel: a first link's start is just a start."""
    run = _array_run(tmp_path, shards=2)
    started = Started(job_id="100_0")
    run.ledger(0).append(started)
    assert cancelled_while_starting(run, 0, started) is None


def test_append_each_commits_many_ledgers_with_no_fsync_per_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ledger gets its line (read back whole), made durable by one syncfs, not 200 device flushes."""
    ledgers = [Ledger(tmp_path / f"s{i}" / "ledger.jsonl") for i in range(200)]
    for ledger in ledgers:
        ledger.append(Started(job_id="1"))
    fsyncs: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd)))
    append_each([(ledger, Cancelled(job_ids=["1"])) for ledger in ledgers])
    assert all([r.kind for r in ledger.read()] == ["start", "cancelled"] for ledger in ledgers)
    assert fsyncs == []
