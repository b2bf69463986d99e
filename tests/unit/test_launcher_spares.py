"""A run's first links (docs/launcher.md, "The invariant"): each job array of first links is
followed by ``slurm.lookahead - 1`` spare arrays, so a first link killed before its first act has a
job queued behind it, as every later link has; and a ``submit`` killed between two ``sbatch`` calls
leaves the rest to the run's first job (job/first_links.py).

The scheduler here is an in-memory queue behind :class:`SlurmBackend`'s own methods (what sbatch,
squeue and scancel would answer); tests/slurm/test_launcher_chains.py proves the same on Slurm.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gymslurm.job.context import ensure_link_lookahead, shard_state
from gymslurm.job.first_links import complete_queuing, queuing, record_plan, submit_arrays
from gymslurm.launcher.ledger import Started
from gymslurm.launcher.rundir import ArrayPart, ArrayRecord, RunDir, atomic_write
from gymslurm.launcher.settings import BenchmarkSettings, load_benchmark
from gymslurm.site.arrays import plan_arrays
from gymslurm.site.backend import SlurmBackend
from gymslurm.site.slurm import QueueRow
from gymslurm.store.flock import try_lock
from tests.run_info import run_info


class Queue(SlurmBackend):
    """Slurm's queue as sbatch/squeue/scancel would show it: every array task PENDING until started."""

    def __init__(self) -> None:
        super().__init__()
        self.next_id = 100
        self.rows: dict[str, str] = {}
        self.arrays: list[tuple[str, str, list[str]]] = []  # (job, --array, after)
        self.comments: dict[str, str] = {}  # job -> its --comment (the intent it fulfils)
        self.after_ok: dict[str, list[str]] = {}  # job -> the jobs it waits for to succeed (afterok)

    def submit_array(
        self,
        script: Path,
        indices: str,
        after: Sequence[str] = (),
        comment: str | None = None,
        exclude: Sequence[str] = (),
        *,
        after_ok: Sequence[str] = (),
    ) -> str:
        job, self.next_id = str(self.next_id), self.next_id + 1
        self.arrays.append((job, indices, list(after)))
        self.after_ok[job] = list(after_ok)
        if comment is not None:
            self.comments[job] = comment
        first, _, last = indices.split("%", maxsplit=1)[0].partition("-")
        for task in range(int(first), int(last or first) + 1):
            self.rows[f"{job}_{task}"] = "PENDING"
        return job

    def submit(self, script: Path, after: Sequence[str] = ()) -> str:
        job, self.next_id = str(self.next_id), self.next_id + 1
        self.arrays.append((job, "-", list(after)))
        self.rows[job] = "PENDING"
        return job

    def commented(self, name: str, comment: str) -> list[str]:
        return [job for job, said in self.comments.items() if said == comment]

    def cancel(self, job_ids: Sequence[str]) -> None:
        for job in job_ids:
            if self.rows.get(job) == "PENDING":
                self.rows[job] = "CANCELLED"

    def queue(self) -> dict[str, QueueRow]:
        return {job: QueueRow(job, "gs", state, "", "", "", "", "") for job, state in self.rows.items()}

    def job_rows(self, job_ids: Sequence[str]) -> dict[str, QueueRow]:
        return {job: row for job, row in self.queue().items() if job in job_ids}


def _settings(tmp_path: Path, shards: int) -> BenchmarkSettings:
    bench = tmp_path / "b.yaml"
    bench.write_text(
        f"dataset: {tmp_path / 'd.jsonl'}\nrun_root: {tmp_path / 'runs'}\nshards: {shards}\n"
        "slurm:\n  lookahead: 2\n"  # the mechanism at k = 2: a link, its successor, a spare array
    )
    return load_benchmark(str(bench), [])[0]


def _submitted(tmp_path: Path, shards: int = 3) -> tuple[RunDir, Queue, BenchmarkSettings]:
    run, queue, settings = RunDir(tmp_path / "run"), Queue(), _settings(tmp_path, shards)
    run.root.mkdir()
    plan = plan_arrays(shards, {"MaxArraySize": 2}, None, lookahead=2)
    submit_arrays(run, queue, shards, plan, max_running=None, counts=[1] * shards, lookahead=2)
    return run, queue, settings


def test_each_array_of_first_links_is_followed_by_its_spare(tmp_path: Path) -> None:
    """submit queues each array, then a spare array of the same tasks afterany it; array.json names it."""
    run, queue, _ = _submitted(tmp_path)
    assert queue.arrays == [
        ("100", "0-1", []),
        ("101", "0-1", ["100"]),
        ("102", "0", []),
        ("103", "0", ["102"]),
    ]
    record = run.read_array()
    assert record is not None and [p.spares for p in record.arrays] == [["101"], ["103"]]
    assert shard_state(run, 1).epoch_jobs == ["100_1", "101_1"]  # the first link, then its spare
    assert shard_state(run, 2).epoch_jobs == ["102_0", "103_0"]


def test_first_links_and_their_spares_all_wait_for_the_after_ok_jobs(tmp_path: Path) -> None:
    """submit's afterok jobs (a watch's conversion) hold every array of first links and every spare:
    a spare released by its array's cancellation still waits for the conversion to succeed."""
    run, queue = RunDir(tmp_path / "run"), Queue()
    run.root.mkdir()
    plan = plan_arrays(3, {"MaxArraySize": 2}, None, lookahead=2)
    submit_arrays(run, queue, 3, plan, max_running=None, counts=[1] * 3, lookahead=2, after_ok=["7"])
    assert [after for _, _, after in queue.arrays] == [[], ["100"], [], ["102"]]
    assert queue.after_ok == {job: ["7"] for job in ("100", "101", "102", "103")}


def test_a_first_link_that_acts_cancels_its_spare_and_queues_two_behind_itself(tmp_path: Path) -> None:
    """The first act of 100_0: two links queued behind it (each afterany the one before), the spare
    101_0 cancelled as a stray, so the chain stays one line of jobs."""
    run, queue, settings = _submitted(tmp_path)
    queue.rows["100_0"] = "RUNNING"
    run.ledger(0).append(Started(job_id="100_0"))
    behind = ensure_link_lookahead(run, 0, "100_0", queue, settings)
    assert behind == ["104_0", "105_0"]
    assert queue.arrays[-2:] == [("104", "0", ["100_0"]), ("105", "0", ["104_0"])]
    assert queue.rows["101_0"] == "CANCELLED" and queue.rows["101_1"] == "PENDING"


def test_a_spare_whose_first_link_died_before_acting_goes_on_with_the_chain(tmp_path: Path) -> None:
    """100_1 killed before its first act queued nothing; its spare 101_1 runs (the array before it
    ended) and queues two links behind itself: the shard never was without a queued job."""
    run, queue, settings = _submitted(tmp_path)
    queue.rows["100_1"] = "FAILED"  # SIGKILLed in its first 100 ms
    state = shard_state(run, 1)
    assert any(queue.rows[job] == "PENDING" for job in state.epoch_jobs)  # status: not STALLED
    queue.rows["101_1"] = "RUNNING"
    run.ledger(1).append(Started(job_id="101_1"))
    behind = ensure_link_lookahead(run, 1, "101_1", queue, settings)
    assert queue.arrays[-2:] == [("104", "1", ["101_1"]), ("105", "1", ["104_1"])]
    assert behind == ["104_1", "105_1"] and shard_state(run, 1).successor_of["101_1"] == "104_1"


def _run_json(run: RunDir, array: bool = True) -> None:
    """The run.json of a 3-shard Slurm run (array or link by link)."""
    info = run_info(shards=3, array=array)
    atomic_write(run.info_path, info.model_dump_json().encode())


def _killed_submit(tmp_path: Path, parts: list[ArrayPart], array: bool = True) -> tuple[RunDir, Queue]:
    """A run whose submit was killed after queuing ``parts``: the mark left, the lock free."""
    run, queue = RunDir(tmp_path / "run"), Queue()
    run.root.mkdir()
    _run_json(run, array)
    if parts:
        record = ArrayRecord(job_id=parts[0].job_id, shards=3, max_running=None, at="t", chunk=2, parts=parts)
        atomic_write(run.array_path, record.model_dump_json().encode())
    queue.next_id = 200
    atomic_write(run.queuing_mark, b"")
    return run, queue


def test_the_first_job_queues_the_arrays_a_killed_submit_left(tmp_path: Path) -> None:
    """submit killed after shards 0-1's array and its spare: the first job to act queues shard 2's
    array and spare, records them in array.json and removes the mark; a second job queues nothing."""
    run, queue = _killed_submit(tmp_path, [ArrayPart(job_id="100", base=0, size=2, spares=["101"])])
    assert shard_state(run, 2).epoch_jobs == []  # STALLED before
    assert complete_queuing(run, queue, 2, "100_0") == ["200", "201"]
    assert queue.arrays == [("200", "0", []), ("201", "0", ["200"])]
    record = run.read_array()
    assert record is not None and [(p.job_id, p.base, p.spares) for p in record.arrays] == [
        ("100", 0, ["101"]),
        ("200", 2, ["201"]),
    ]
    assert shard_state(run, 2).epoch_jobs == ["200_0", "201_0"] and not run.queuing_mark.exists()
    assert complete_queuing(run, queue, 2, "100_1") == [] and len(queue.arrays) == 2


def test_an_array_queued_without_its_spare_gets_it(tmp_path: Path) -> None:
    """submit killed between an array's sbatch and its spare's: the first job queues the spare."""
    run, queue = _killed_submit(tmp_path, [ArrayPart(job_id="100", base=0, size=2, spares=[])])
    complete_queuing(run, queue, 2, "100_0")
    assert queue.arrays[0] == ("200", "0-1", ["100"])
    record = run.read_array()
    assert record is not None and record.arrays[0].spares == ["200"] and len(record.arrays) == 2


def test_a_live_submit_is_left_to_finish_its_queuing(tmp_path: Path) -> None:
    """While submit holds the run's submit lock, a job that sees the mark queues nothing."""
    run, queue = _killed_submit(tmp_path, [ArrayPart(job_id="100", base=0, size=2, spares=["101"])])
    held = try_lock(run.submit_lock)
    assert held is not None
    try:
        assert complete_queuing(run, queue, 2, "100_0") == [] and queue.arrays == []
    finally:
        import os

        os.close(held)
    assert run.queuing_mark.exists()


def test_a_link_by_link_run_gets_the_chains_a_killed_submit_never_queued(tmp_path: Path) -> None:
    """Link by link (the local backend's shape): shards with no job at all get their first links."""
    run, queue = _killed_submit(tmp_path, [], array=False)
    run.ledger(0).append(Started(job_id="7"))
    queued = complete_queuing(run, queue, 2, "7")
    assert queued == ["200", "201", "202", "203"] and queue.arrays[1] == ("201", "-", ["200"])
    assert [shard_state(run, s).epoch_jobs for s in (1, 2)] == [["200", "201"], ["202", "203"]]


def test_submit_leaves_no_mark_once_everything_is_queued(tmp_path: Path) -> None:
    """The mark exists only while submit queues, and stays when submit dies (raises) midway."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    with queuing(run):
        assert run.queuing_mark.exists() and try_lock(run.submit_lock) is None
    assert not run.queuing_mark.exists()
    try:
        with queuing(run):
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert run.queuing_mark.exists()


class Killed(BaseException):
    """The submit process dies (SIGKILL) right after an sbatch went through, before it read the id."""


class DyingQueue(Queue):
    """A queue whose ``kill_after``-th sbatch goes through and then kills its caller."""

    def __init__(self, kill_after: int) -> None:
        super().__init__()
        self.kill_after, self.calls = kill_after, 0

    def submit_array(
        self,
        script: Path,
        indices: str,
        after: Sequence[str] = (),
        comment: str | None = None,
        exclude: Sequence[str] = (),
        *,
        after_ok: Sequence[str] = (),
    ) -> str:
        job = super().submit_array(script, indices, after, comment, after_ok=after_ok)
        self.calls += 1
        if self.calls == self.kill_after:
            raise Killed
        return job


@pytest.mark.parametrize("kill_after", [1, 2, 3, 4, 5, 6])
def test_a_submit_killed_right_after_any_sbatch_is_finished_with_no_array_twice(
    tmp_path: Path, kill_after: int
) -> None:
    """3 shards in arrays of 2 at lookahead 3 (6 sbatch: each array and its 2 spares): submit killed
    right after its k-th sbatch went through, before it learned the job id. The completion (the next
    status, submit or the run's first job) finds that job by its intent's comment instead of queuing
    it again: every planned array exactly once, each recorded in array.json, the mark gone."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    _run_json(run)
    queue = DyingQueue(kill_after)
    plan = plan_arrays(3, {"MaxArraySize": 2}, None, lookahead=3)
    record_plan(run, 3, None, plan)
    with pytest.raises(Killed), queuing(run):
        submit_arrays(run, queue, 3, plan, max_running=None, counts=[1] * 3, lookahead=3)
    assert run.queuing_mark.exists()
    complete_queuing(run, queue, 3, "status", plan_only=True)
    assert len(queue.arrays) == 6, queue.arrays  # not one sbatch repeated
    record = run.read_array()
    assert record is not None and record.intent is None and not run.queuing_mark.exists()
    recorded = [job for part in record.arrays for job in [part.job_id, *(part.spares or [])]]
    assert sorted(recorded) == sorted(job for job, _, _ in queue.arrays)


def test_a_submit_killed_before_its_first_sbatch_is_finished_from_its_plan(tmp_path: Path) -> None:
    """Killed after recording its plan, before the queuing mark: nothing was queued; the completion
    (plan_only: status, submit) queues every array from array.json's plan."""
    run, queue = RunDir(tmp_path / "run"), Queue()
    run.root.mkdir()
    _run_json(run)
    record_plan(run, 3, None, plan_arrays(3, {"MaxArraySize": 2}, None, lookahead=2))
    assert complete_queuing(run, queue, 2, "status") == []  # a job never meets this case
    assert len(complete_queuing(run, queue, 2, "status", plan_only=True)) == 4
    assert [shard_state(run, s).epoch_jobs[0] for s in range(3)] == ["100_0", "100_1", "102_0"]
