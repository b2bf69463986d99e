"""Status that never alarms or soothes falsely (issue 19): interruptions, held jobs anywhere, the summary
over every shard, and the job that runs next after a requeue."""

from __future__ import annotations

from pathlib import Path

from gymslurm.coverage import Coverage
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import Started, Submitted, summarize
from gymslurm.launcher.views.counts import counts_of
from gymslurm.launcher.views.diagnosis import verdict
from gymslurm.launcher.views.document import ShardRow, StatusDocument
from gymslurm.launcher.views.logs import LogIndex
from gymslurm.launcher.views.status import (
    ShardFiles,
    aggregation_status,
    run_status,
    shard_status,
    summary_of,
)
from gymslurm.launcher.views.table import summary_line
from gymslurm.store.live import LiveProgress
from tests.unit.test_launcher_status import AT0, GOING, INFO, T0, _decided, _row, coverage_of

# A shard right after a requeue: 340 of 1000 ok and 20 interrupted (kill_shaped) rollouts.
REQUEUED_FIELDS: dict[str, object] = {
    "expected": 1000,
    "successful": 340,
    "measured": 340,
    "failed": 20,
    "not_started": 640,
    "scored": 340,
    "attempts": 360,
    "retryable": 660,
    "progress_outcomes_recorded": 340,
    "failed_by_class": {"kill_shaped": 20},
    "historical_failed_attempts": 20,
}


def _coverage(**given: object) -> Coverage:
    return coverage_of(**{**REQUEUED_FIELDS, **given})


REQUEUED = _coverage()


def test_interrupted_rollouts_are_not_failures_in_the_coverage_file() -> None:
    """Right after a requeue, 20 kill_shaped (interrupted) rollouts read as interrupted, 0 failed."""
    counts = counts_of(REQUEUED, None, running=False)
    assert counts.text == "340/1000 ok, 0 failed, 20 interrupted"
    assert (counts.failed, counts.interrupted, counts.failed_by_class, counts.left) == (0, 20, {}, 660)


def test_interrupted_rollouts_are_not_failures_in_the_live_record() -> None:
    """A running collector's record counts its interruptions apart (LiveProgress.interrupted)."""
    record = LiveProgress(
        written_at=AT0,
        epoch=T0,
        pid=1,
        expected=1000,
        successful=340,
        failed=23,
        intentionally_omitted=0,
        in_flight=8,
        interrupted=20,
        new_outcomes=3,
        started_epoch=T0 - 60,
        rate_per_s=0.5,
    )
    assert counts_of(REQUEUED, record, running=True).text == "340/1000 ok, 3 failed, 20 interrupted"


def _row_of(shard: int, coverage: Coverage | None) -> ShardRow:
    return shard_status(
        shard,
        summarize([Submitted(job_id=f"1_{shard}")]),
        {f"1_{shard}": _row(f"1_{shard}", "PENDING")},
        {},
        info=INFO,
        files=ShardFiles(coverage, None, None),
        now=T0,
        logs=LogIndex(Path("/l"), frozenset()),
    )


def test_the_run_summary_says_how_many_shards_it_counts() -> None:
    """61 ok of the 61 rollouts 49 shards reported is not the run: the line says 49 of 1000 shards."""
    reported = _coverage(expected=1, successful=1, failed=0, not_started=0, failed_by_class={})
    rows = [_row_of(i, reported if i < 49 else None) for i in range(1000)]
    summary = summary_of(rows)
    assert (summary.shards, summary.counted_shards, summary.eta) == (1000, 49, "-")
    assert summary_line(summary).startswith("run: 49/49 ok so far in 49 of 1000 shards (951 not counted yet)")


def test_a_suites_summary_sums_its_benchmarks_shards_not_its_chains() -> None:
    """A suite's chains hold no rollouts (its benchmarks' shards do): the run line counts the
    benchmarks' shards (3 here, of 2 chains), the verdicts stay the chains'."""
    chains = [_row_of(0, None), _row_of(1, None)]
    benchmarks = [counts_of(coverage_of(**{**REQUEUED_FIELDS, "failed_by_class": {}}), None, False)] * 3
    line = summary_line(summary_of(chains, counted=benchmarks))
    assert line.startswith("run: 1020/3000 ok, 60 failed"), line  # not "0/0 ok so far in 0 of 2 shards"


def test_the_summary_names_interruptions_apart() -> None:
    """The run line: 0 failed, 20 interrupted (run again)."""
    line = summary_line(summary_of([_row_of(0, REQUEUED)]))
    assert "0 failed, 20 interrupted (run again)" in line


def test_a_held_last_link_is_named_with_its_way_out() -> None:
    """The last link wrote STOP_EXHAUSTED and was then held (RequeueExitHold): the verdict stays, the why
    names the held job and 'scancel' (what waits on it never starts otherwise)."""
    records = [*GOING, Started(job_id="2"), _decided("2", Decision.STOP_EXHAUSTED)]
    word, why = verdict(summarize(records), [_row("2", "SPECIAL_EXIT", "JobHeldUser")], None)
    assert word == "EXHAUSTED" and "job 2 was held after writing this decision" in why and "scancel 2" in why


def test_an_aggregation_waiting_on_a_held_link_says_so() -> None:
    """aggregation: PENDING (Dependency) on a held last link names the held job and how to release it."""
    state = summarize([Submitted(job_id="240")])
    agg = aggregation_status(state, {"240": _row("240", "PENDING", "Dependency")}, {}, ["239_0"])
    assert "waits for held job(s) 239_0" in agg.state and "scancel 239_0" in agg.state
    held = aggregation_status(state, {"240": _row("240", "PENDING", "JobHeldUser")}, {})
    assert "scontrol release 240" in held.state


def test_after_a_requeue_the_job_column_shows_the_requeued_link() -> None:
    """A requeued link pends again before its successor (which waits on it): `job` is the requeued one."""
    records = [Submitted(job_id="5_0"), Started(job_id="5_0"), Submitted(job_id="9_0", after="5_0")]
    queue = {"5_0": _row("5_0", "PENDING", "BeginTime"), "9_0": _row("9_0", "PENDING", "Dependency")}
    row = shard_status(
        0,
        summarize(records),
        queue,
        {},
        info=INFO,
        files=ShardFiles(None, None, None),
        now=T0,
        logs=LogIndex(Path("/l"), frozenset()),
    )
    assert (row.job, row.successor) == ("5_0", "9_0")


def test_a_job_log_past_the_first_array_is_found_by_its_job_id(tmp_path: Path) -> None:
    """Shard 1500 of a 1001-task-id site logs to shard-1001+499-<job>.out: status and logs find it."""
    from gymslurm.launcher.rundir import RunDir
    from gymslurm.launcher.views.logs import log_files

    names = frozenset({"shard-1001+499-77_499.out", "shard-000-10_0.out"})
    index = LogIndex(Path("/r/logs"), names)
    assert index.job_log(1500, "77_499") == "/r/logs/shard-1001+499-77_499.out"
    assert index.job_log(0, "10_0") == "/r/logs/shard-000-10_0.out" and index.job_log(1, "9_1") is None
    files = log_files(RunDir(Path("/r")), 1500, "77_499", sorted(names))
    assert files.job_log == Path("/r/logs/shard-1001+499-77_499.out")


def _finished_run(tmp_path: Path, aggregation: bool) -> StatusDocument:
    """Two shards DONE, no job of the run in the queue and no aggregation ever queued: the state every
    link of a chain dying before it counted itself in the run's tally leaves (issue 32)."""
    from gymslurm.launcher.rundir import RunDir, atomic_write
    from gymslurm.site.local import LocalBackend

    run = RunDir(tmp_path / "run")
    atomic_write(
        run.info_path, INFO.model_copy(update={"backend": "local", "shards": 2}).model_dump_json().encode()
    )
    atomic_write(run.config_path, f"name: b\naggregation:\n  enabled: {str(aggregation).lower()}\n".encode())
    for shard in (0, 1):
        job = f"{shard + 1}"
        for record in (Submitted(job_id=job), Started(job_id=job), _decided(job, Decision.DONE)):
            run.ledger(shard).append(record)
    return run_status(run, LocalBackend(run.local_dir), now=T0)


def test_status_says_how_to_queue_an_aggregation_nothing_will_queue(tmp_path: Path) -> None:
    """Every shard DONE, no live job, no aggregation job: status says it was never queued and that
    'gymslurm resubmit RUN BENCH' queues it (the run's tally stayed short: nothing else will)."""
    report = _finished_run(tmp_path, aggregation=True)
    assert [row.verdict for row in report.shards] == ["DONE", "DONE"]
    state = report.aggregation.state
    assert state.startswith("never queued: every shard is DONE and no job of the run is left")
    assert f"'gymslurm resubmit {tmp_path / 'run'} b' queues it" in state


def test_a_run_without_aggregation_is_not_told_to_queue_one(tmp_path: Path) -> None:
    """The same state with ``aggregation.enabled: false`` is simply finished: no advice to resubmit."""
    report = _finished_run(tmp_path, aggregation=False)
    assert report.aggregation.state == "not submitted"
