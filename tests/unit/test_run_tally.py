"""The run's tally (store/tally.py): finished chains and GPU-hours spent in one line, never below truth."""

from __future__ import annotations

from pathlib import Path

from gymslurm.job.aggregation import every_chain_finished
from gymslurm.job.spend import decided_gpu_hours
from gymslurm.launcher.ledger import BudgetsRecord, Cancelled, DecisionRecord, Started, Submitted
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.store.tally import RunTally
from tests.run_info import run_info


def _run(tmp: Path, shards: int) -> RunDir:
    run = RunDir(tmp / "r")
    info = run_info(backend="local", shards=shards)
    atomic_write(run.info_path, info.model_dump_json().encode())
    return run


def _finish(run: RunDir, shard: int) -> None:
    start = Started(job_id=f"j{shard}", gpus=2)
    run.ledger(shard).append(Submitted(job_id=f"j{shard}"))
    run.ledger(shard).append(start)
    run.ledger(shard).append(
        DecisionRecord(
            job_id=start.job_id,
            start=start.at,
            end=start.at,
            budgets_before=BudgetsRecord(),
            budgets_after=BudgetsRecord(),
            slurm_state="RUNNING",
            exit_code=0,
            elapsed_s=1800,
            decision="DONE",
            reason="done",
        )
    )


def test_each_event_carries_the_totals_after_it(tmp_path: Path) -> None:
    """Two finished chains and two spends read back as the last line's totals."""
    tally = RunTally(tmp_path / "tally.jsonl")
    assert tally.read().finished == 0
    tally.chain_finished(0)
    tally.spent(0, 1.5)
    tally.chain_finished(1)
    tally.spent(None, 0.25)
    last = tally.read()
    assert (last.finished, last.gpu_hours) == (2, 1.75)


def test_a_torn_last_line_is_ignored_and_cut_before_the_next_append(tmp_path: Path) -> None:
    """A writer killed mid-line loses only its line: the totals are the line before, and go on from it."""
    tally = RunTally(tmp_path / "tally.jsonl")
    tally.chain_finished(0)
    with (tmp_path / "tally.jsonl").open("ab") as handle:
        handle.write(b'{"v": 1, "event": "finis')
    assert tally.read().finished == 1
    assert tally.chain_finished(1).finished == 2
    assert tally.read().finished == 2


def test_a_count_below_the_shards_is_not_finished_without_reading_a_ledger(tmp_path: Path) -> None:
    """The tally counts 1 of 3: not finished, and no ledger is read (a corrupt one would raise)."""
    run = _run(tmp_path, 3)
    run.tally.chain_finished(0)
    run.ledger(2).path.parent.mkdir(parents=True)
    run.ledger(2).path.write_text("not json\n")
    assert every_chain_finished(run, 3) is False


def test_an_over_count_is_checked_against_the_ledgers_and_recounted(tmp_path: Path) -> None:
    """Shard 0 counted twice (3 of 3 says the tally) while shard 2 runs: the ledgers say 2, not
    finished, and a recount writes 2 so the next links trust the tally again."""
    run = _run(tmp_path, 3)
    for shard in (0, 1):
        _finish(run, shard)
    run.ledger(2).append(Submitted(job_id="j2"))
    for shard in (0, 0, 1):
        run.tally.chain_finished(shard)
    assert every_chain_finished(run, 3) is False
    assert run.tally.read().finished == 2
    _finish(run, 2)
    run.tally.chain_finished(2)
    assert every_chain_finished(run, 3) is True


def test_a_cancelled_chain_is_never_finished_for_the_aggregation(tmp_path: Path) -> None:
    """Every shard counted, one cancelled: not finished (the aggregation waits for a resubmit)."""
    run = _run(tmp_path, 2)
    _finish(run, 0)
    run.ledger(1).append(Cancelled(job_ids=["j1"]))
    run.tally.chain_finished(0)
    run.tally.chain_finished(1)
    assert every_chain_finished(run, 2) is False


def test_the_spend_of_decided_links_is_gpus_times_elapsed(tmp_path: Path) -> None:
    """A decision ending a 2-GPU link of 1,800 s adds 1 GPU-hour; other records add nothing."""
    run = _run(tmp_path, 1)
    _finish(run, 0)
    records = run.ledger(0).read()
    assert decided_gpu_hours(records, records[-1:]) == 1.0
    assert decided_gpu_hours(records, records[:2]) == 0.0
