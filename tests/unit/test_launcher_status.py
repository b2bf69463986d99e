"""Status (docs/launcher.md, "Watching and steering"): verdicts, columns and the summary, one row each."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.coverage import Coverage
from gymslurm.errors import SlurmError
from gymslurm.formats import version_of
from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.ledger import (
    BudgetsRecord,
    Cancelled,
    DecisionRecord,
    Resubmitted,
    Started,
    Submitted,
    summarize,
)
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.launcher.views.counts import counts_of, human_duration, walltime_text
from gymslurm.launcher.views.diagnosis import Beat, collector_stall, verdict
from gymslurm.launcher.views.document import STATUS_SCHEMA, ShardRow
from gymslurm.launcher.views.logs import LogIndex
from gymslurm.launcher.views.status import (
    ShardFiles,
    aggregation_status,
    read_shard_files,
    run_status,
    shard_status,
    summary_of,
)
from gymslurm.launcher.views.table import summary_line
from gymslurm.site.local import LocalBackend
from gymslurm.site.slurm import QueueRow, parse_accounting_storage
from gymslurm.store import RunPaths
from gymslurm.store.files import write_coverage
from gymslurm.store.live import Heartbeat, LiveProgress
from tests.run_info import run_info

T0 = 1_780_000_000.0  # the wall clock of these tests
AT0 = "2026-05-28T20:26:40+00:00"  # T0 as ISO (ledger timestamps)


def _row(job: str, state: str, reason: str = "None") -> QueueRow:
    return QueueRow(job, "gs", state, reason, "(null)", "0:00", "1:00", "N/A")


def _decided(job: str, decision: Decision, elapsed: float = 1, code: int | None = 0) -> DecisionRecord:
    return DecisionRecord(
        job_id=job,
        end="t",
        elapsed_s=elapsed,
        slurm_state="RUNNING",
        exit_code=code,
        decision=decision,
        reason="why",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord.of(Budgets(1, elapsed, 0)),
    )


GOING = [Submitted(job_id="1"), _decided("1", Decision.CONTINUE), Submitted(job_id="2", after="1")]
FRESH, STALE = Beat(10, 15), Beat(31, 15)
ROWS = [
    ("a running link with a fresh heartbeat is HEALTHY", GOING, [_row("2", "RUNNING")], FRESH, "HEALTHY"),
    (
        "a running link whose heartbeat is older than two intervals is UNRESPONSIVE",
        GOING,
        [_row("2", "RUNNING")],
        STALE,
        "UNRESPONSIVE",
    ),
    (
        "a running link that never beat since its start two intervals ago is UNRESPONSIVE",
        GOING,
        [_row("2", "RUNNING")],
        Beat(40, 15, since_start=True),
        "UNRESPONSIVE",
    ),
    (
        "a link still COMPLETING is not UNRESPONSIVE (it stopped beating on purpose)",
        GOING,
        [_row("2", "COMPLETING")],
        STALE,
        "HEALTHY",
    ),
    ("a pending link is WAITING", GOING, [_row("2", "PENDING", "Dependency")], None, "WAITING"),
    ("no live job and not finished is STALLED", GOING, [], None, "STALLED"),
    ("a cancelled chain is CANCELLED", [*GOING, Cancelled(job_ids=["2"])], [], None, "CANCELLED"),
    (
        "a cancelled chain whose jobs are still leaving the queue is CANCELLED, not ORPHANED",
        [*GOING, Submitted(job_id="3", after="2"), Cancelled(job_ids=["2", "3"])],
        [_row("2", "COMPLETING"), _row("3", "PENDING", "Dependency")],
        None,
        "CANCELLED",
    ),
    (
        "two running links are ORPHANED",
        [*GOING, Submitted(job_id="3")],
        [_row("2", "RUNNING"), _row("3", "RUNNING")],
        None,
        "ORPHANED",
    ),
    (
        "a never-satisfiable dependency is ORPHANED",
        GOING,
        [_row("2", "PENDING", "DependencyNeverSatisfied")],
        None,
        "ORPHANED",
    ),
    (
        "a link left queued after DONE is DONE: it exits at once when it runs (no human command)",
        [*GOING, _decided("2", Decision.DONE), Submitted(job_id="3", after="2")],
        [_row("3", "PENDING", "Dependency")],
        None,
        "DONE",
    ),
    (
        "a link left running after DONE is DONE: it saw the end and is exiting (seen: 1 of 100 kill trials)",
        [*GOING, _decided("2", Decision.DONE), Submitted(job_id="3", after="2")],
        [_row("3", "RUNNING")],
        None,
        "DONE",
    ),
    (
        "a held link left after DONE is ORPHANED: it never runs, so never exits by itself",
        [*GOING, _decided("2", Decision.DONE), Submitted(job_id="3", after="2")],
        [_row("3", "PENDING", "JobHeldUser")],
        None,
        "ORPHANED",
    ),
    (
        "the deciding job still exiting is not an orphan",
        [*GOING, _decided("2", Decision.DONE)],
        [_row("2", "COMPLETING")],
        None,
        "DONE",
    ),
    ("DONE", [*GOING, _decided("2", Decision.DONE)], [], None, "DONE"),
    ("STOP_FAILED is FAILED", [*GOING, _decided("2", Decision.STOP_FAILED)], [], None, "FAILED"),
    ("STOP_EXHAUSTED is EXHAUSTED", [*GOING, _decided("2", Decision.STOP_EXHAUSTED)], [], None, "EXHAUSTED"),
    ("STOP_WALLTIME is EXHAUSTED", [*GOING, _decided("2", Decision.STOP_WALLTIME)], [], None, "EXHAUSTED"),
    (
        "STOP_NO_PROGRESS is EXHAUSTED",
        [*GOING, _decided("2", Decision.STOP_NO_PROGRESS)],
        [],
        None,
        "EXHAUSTED",
    ),
    ("a held link is WAITING", GOING, [_row("2", "SPECIAL_EXIT", "JobHeldUser")], None, "WAITING"),
]


@pytest.mark.parametrize(("name", "records", "live", "beat", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_verdict(
    name: str, records: list[object], live: list[QueueRow], beat: Beat | None, expected: str
) -> None:
    """Each ledger state plus live jobs (and the running link's heartbeat) maps to its verdict."""
    assert verdict(summarize(records), live, beat)[0] == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0, "0s"),
        (45.4, "45s"),
        (725, "12m05s"),
        (3 * 3600 + 240, "3h04m"),
        (2 * 86400 + 3 * 3600, "2d03h"),
    ],
)
def test_durations_are_human(seconds: float | None, text: str) -> None:
    """Walltime and ETA are shown in human units, never raw seconds."""
    assert human_duration(seconds) == text


WALLTIME_ROWS = [
    ("one chain: used/cap", (3720, 3720, 86400, 1), "1h02m/1d00h"),
    ("no cap", (60, 60, None, 1), "1m00s/none"),
    (
        "after a resubmit the total keeps counting; the budget restarts",
        (11400, 3720, 86400, 2),
        "3h10m (1h02m/1d00h since resubmit)",
    ),
]


@pytest.mark.parametrize(("name", "args", "text"), WALLTIME_ROWS, ids=[r[0] for r in WALLTIME_ROWS])
def test_walltime_text(name: str, args: tuple[float, float, float | None, int], text: str) -> None:
    """Walltime used/cap across resubmits, in human units."""
    assert walltime_text(*args) == text


def _progress(successful: int, epoch: float = T0, ended: bool = False) -> LiveProgress:
    return LiveProgress(
        written_at=AT0,
        epoch=epoch,
        pid=1,
        expected=200,
        successful=successful,
        failed=1,
        intentionally_omitted=0,
        in_flight=4,
        new_outcomes=successful,
        started_epoch=epoch - 60,
        rate_per_s=0.5,
        ended=ended,
    )


def coverage_of(**given: object) -> Coverage:
    """A typed coverage snapshot of 200 rollouts, with the given fields changed."""
    fields: dict[str, object] = {
        "run_id": "run-" + "0" * 32,
        "expected": 200,
        "successful": 0,
        "measured": 0,
        "masked": 0,
        "unscored": 0,
        "failed": 0,
        "intentionally_omitted": 0,
        "not_started": 200,
        "missing": 0,
        "complete": False,
        "reconciled": True,
        "scored": 0,
        "attempts": 0,
        "counted_failures": 0,
        "failure_budget_exhausted": 0,
        "max_rollout_attempts": 3,
        "retry_terminal_timeouts": False,
        "retryable": 0,
        "progress_outcomes_recorded": 0,
        "failed_by_class": {"timeout": 1},
        "historical_failed_attempts": 0,
        "identity_verified": True,
        "written_at": "2026-05-28T20:00:00+00:00",
    }
    return Coverage.model_validate({**fields, **given})


COVERAGE = coverage_of()


def test_live_coverage_comes_from_the_progress_record_while_a_link_runs() -> None:
    """Coverage rises with the live record (not 0/200 until the link ends), with its rate and ETA."""
    counts = counts_of(COVERAGE, _progress(30), running=True)
    assert (counts.text, counts.live, counts.rate_per_s, counts.left) == (
        "30/200 ok, 1 failed",
        True,
        0.5,
        169,
    )
    assert counts.failed_by_class == {"timeout": 1}


def test_a_newer_coverage_file_wins_over_an_older_live_record() -> None:
    """Once the collector ended and wrote coverage, the coverage file is the truth."""
    newer = coverage_of(successful=200, written_at="2026-05-28T21:00:00+00:00")
    assert counts_of(newer, _progress(30), running=False).text == "200/200 ok, 0 failed"


def test_no_rate_when_no_link_runs() -> None:
    """A record left by a killed collector still counts outcomes, but has no rate (no ETA)."""
    counts = counts_of(COVERAGE, _progress(30), running=False)
    assert (counts.successful, counts.live, counts.rate_per_s) == (30, False, None)


INFO = run_info(created_at=AT0, max_walltime_s=86400.0)
STARTED_2 = Started(job_id="2", at="2026-05-28T20:16:40+00:00")  # 600 s before T0


def _shard(records: list[object], queue: list[QueueRow], files: ShardFiles) -> ShardRow:
    return shard_status(
        0,
        summarize(records),
        {r.job_id: r for r in queue},
        {},
        info=INFO,  # type: ignore[arg-type]
        files=files,
        now=T0,
        logs=LogIndex(Path("/logs"), frozenset({"shard-000-2.out", "server-demo-s000.log"})),
    )


def test_row_shows_the_running_link_and_its_queued_successor() -> None:
    """job/state are the running link's; the queued successor has its own columns; live coverage, ETA."""
    records = [*GOING, STARTED_2, Submitted(job_id="3", after="2")]
    beat = Heartbeat(job_id="2", start=STARTED_2.at, at=AT0, epoch=T0 - 5, interval_s=15, pid=9)
    row = _shard(
        records,
        [_row("2", "RUNNING"), _row("3", "PENDING", "Dependency")],
        ShardFiles(COVERAGE, _progress(30), beat),
    )
    assert (row.verdict, row.job, row.job_state) == ("HEALTHY", "2", "RUNNING")
    assert (row.successor, row.successor_state) == ("3", "PENDING (Dependency)")
    assert (row.coverage, row.live, row.eta) == ("30/200 ok, 1 failed", True, "5m38s")
    assert row.walltime == "10m01s/1d00h" and row.heartbeat_age_s == 5
    assert row.log == "/logs/shard-000-2.out" and row.server_logs == ["/logs/server-demo-s000.log"]


def test_a_stale_heartbeat_makes_the_running_link_unresponsive_and_stops_its_eta() -> None:
    """Two heartbeats missed: UNRESPONSIVE, naming the job and what to do; no ETA is promised."""
    records = [*GOING, STARTED_2, Submitted(job_id="3", after="2")]
    beat = Heartbeat(job_id="2", start=STARTED_2.at, at=AT0, epoch=T0 - 31, interval_s=15, pid=9)
    row = _shard(
        records, [_row("2", "RUNNING"), _row("3", "PENDING")], ShardFiles(COVERAGE, _progress(30), beat)
    )
    assert row.verdict == "UNRESPONSIVE" and "scancel 2" in row.why and row.eta == "-"


def test_exit_column_is_the_jobs_exit_and_the_collectors_is_its_own() -> None:
    """`exit` is what the job gave Slurm; a CONTINUE after the collector's 75 is a job exit 0."""
    row = _shard([*GOING], [_row("2", "PENDING")], ShardFiles(None, None, None))
    assert (row.last_exit, row.collector_exit) == (0, 0)
    after_75 = [Submitted(job_id="1"), _decided("1", Decision.CONTINUE, code=75), GOING[2]]
    row = _shard(after_75, [_row("2", "PENDING")], ShardFiles(None, None, None))
    assert (row.last_exit, row.collector_exit) == (0, 75)


def test_walltime_keeps_counting_across_a_resubmit() -> None:
    """Walltime does not restart at 0 after resubmit: the total goes on, the capped budget restarts."""
    records = [
        Submitted(job_id="1"),
        _decided("1", Decision.STOP_EXHAUSTED, elapsed=3600),
        Resubmitted(),
        Submitted(job_id="2"),
        _decided("2", Decision.CONTINUE, elapsed=60),
        Submitted(job_id="3", after="2"),
    ]
    row = _shard(records, [_row("3", "PENDING")], ShardFiles(None, None, None))
    assert row.walltime == "1h01m (1m00s/1d00h since resubmit)" and row.walltime_used_s == 3660


def test_summary_line_counts_rollouts_eta_and_failure_classes() -> None:
    """The run line: done of total, failures by class, verdict counts, ETA at the running links' rate."""
    records = [*GOING, STARTED_2, Submitted(job_id="3", after="2")]
    beat = Heartbeat(job_id="2", start=STARTED_2.at, at=AT0, epoch=T0 - 5, interval_s=15, pid=9)
    running = shard_status(
        0,
        summarize(records),
        {"2": _row("2", "RUNNING")},
        {},
        info=INFO,  # type: ignore[arg-type]
        files=ShardFiles(COVERAGE, _progress(30), beat),
        now=T0,
        logs=LogIndex(Path("/l"), frozenset()),
    )
    summary = summary_of([running, running])
    assert (summary.successful, summary.expected, summary.eta) == (60, 400, "5m38s")
    line = summary_line(summary)
    assert line.startswith("run: 60/400 ok, 2 failed (timeout 2), 0 omitted; 2 HEALTHY; ETA 5m38s")


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("AccountingStorageType   = accounting_storage/none\nMinJobAge = 600 sec\n", False),
        ("AccountingStorageHost = db\nAccountingStorageType   = accounting_storage/slurmdbd\n", True),
    ],
)
def test_accounting_storage_from_scontrol_show_config(text: str, kept: bool) -> None:
    """`scontrol show config` (Slurm 22.05) says whether sacct has anything to say."""
    assert parse_accounting_storage(text) is kept


def test_scontrol_config_without_the_line_is_refused_quoting_it() -> None:
    """Unexpected text is an error quoting it, not a guess."""
    with pytest.raises(SlurmError, match="no AccountingStorageType line"):
        parse_accounting_storage("Configuration data as of ...\n")


def _run_with_forgotten_job(tmp_path: Path, accounting: bool | None) -> RunDir:
    run = RunDir(tmp_path / "run")
    info = INFO.model_copy(update={"backend": "local", "accounting": accounting})
    atomic_write(run.info_path, info.model_dump_json().encode())
    run.ledger(0).append(Submitted(job_id="gone-1"))
    return run


def test_status_asks_no_accounting_when_the_run_recorded_none(tmp_path: Path) -> None:
    """A job squeue forgot is not looked up in sacct when the cluster keeps no accounting: one query."""
    run = _run_with_forgotten_job(tmp_path, accounting=False)
    report = run_status(run, LocalBackend(run.local_dir), now=T0)
    assert report.queries == 1 and report.shards[0].job_state == "gone from squeue"


def test_status_document_is_versioned_and_lists_columns_and_summary(tmp_path: Path) -> None:
    """`status --json` is the gymslurm.status document, version 1, with the summary and every column."""
    run = _run_with_forgotten_job(tmp_path, accounting=None)
    report = run_status(run, LocalBackend(run.local_dir), now=T0)
    assert (report.schema, report.version) == (STATUS_SCHEMA, version_of("status")) == ("gymslurm.status", 1)
    assert report.queries == 2  # accounting not known: squeue + the one sacct for the forgotten job
    assert report.shards[0].job == "gone-1" and report.summary.verdicts == {"STALLED": 1}


def test_listing_runs_always_prints_its_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`gymslurm status` with no run prints the column header, with no run and with runs."""
    from gymslurm.commands.status import list_header, main

    assert main(["--run-root", str(tmp_path / "none")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == list_header()
    _run_with_forgotten_job(tmp_path / "runs", accounting=None)
    assert main(["--run-root", str(tmp_path / "runs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == list_header() and lines[1].startswith("run ") and "1 STALLED" in lines[1]


def test_the_table_has_a_header_and_one_aligned_line_per_shard(tmp_path: Path) -> None:
    """The status table is plain fixed-width text: a header, then one line per shard."""
    from gymslurm.launcher.views.table import COLUMNS, table_lines

    run = _run_with_forgotten_job(tmp_path, accounting=False)
    lines = table_lines(run_status(run, LocalBackend(run.local_dir), now=T0))
    assert lines[0].split() == [column.title for column in COLUMNS] and len(lines) == 2
    assert lines[1].split()[:3] == ["0", "STALLED", "gone-1"]


def test_a_cancelled_successor_is_not_shown_as_next() -> None:
    """After DONE the successor was cancelled: `next` shows nothing, although squeue still lists it."""
    records = [*GOING, STARTED_2, Submitted(job_id="3", after="2"), _decided("2", Decision.DONE)]
    row = _shard(records, [_row("2", "COMPLETED"), _row("3", "CANCELLED")], ShardFiles(None, None, None))
    assert (row.verdict, row.job, row.successor) == ("DONE", "2", None)


def test_an_aggregation_that_decided_reads_as_finished_while_its_job_exits() -> None:
    """The aggregation job writes its decision and then still runs for a moment: it is finished."""
    state = summarize([Submitted(job_id="9"), Started(job_id="9"), _decided("9", Decision.DONE)])
    agg = aggregation_status(state, {"9": _row("9", "RUNNING")}, {})
    assert agg.finished and agg.state == "DONE: why"
    assert not aggregation_status(
        summarize([Submitted(job_id="9")]), {"9": _row("9", "RUNNING")}, {}
    ).finished


def test_a_held_link_says_it_will_not_run_by_itself() -> None:
    """A SPECIAL_EXIT (held) link is reported as held, with how to release or cancel it."""
    word, why = verdict(summarize(GOING), [_row("2", "SPECIAL_EXIT", "JobHeldUser")], None)
    assert word == "WAITING" and "job 2 is held (SPECIAL_EXIT, JobHeldUser)" in why
    assert "scontrol release 2" in why and "gymslurm cancel" in why


def test_held_states_are_live_so_cancel_and_status_see_them() -> None:
    """SPECIAL_EXIT and REQUEUE_HOLD count as live jobs of a chain."""
    from gymslurm.site.backend import LIVE_STATES

    assert {"SPECIAL_EXIT", "REQUEUE_HOLD"} <= LIVE_STATES


def test_a_shards_coverage_file_is_read_into_the_typed_coverage(tmp_path: Path) -> None:
    """status reads the collector's coverage through the store as a typed Coverage, not a dict of defaults."""
    run = _run_with_forgotten_job(tmp_path, accounting=False)
    output = run.shard_output(0, "rollouts")
    output.parent.mkdir(parents=True, exist_ok=True)
    write_coverage(RunPaths.for_output(output), coverage_of(successful=150, measured=150, failed=2))
    files = read_shard_files(run, 0, "rollouts", running=False)
    assert isinstance(files.coverage, Coverage) and files.coverage.successful == 150
    assert counts_of(files.coverage, None, running=False).text == "150/200 ok, 2 failed"


def _beat(collector_started: float, window: float | None = 60.0) -> Heartbeat:
    return Heartbeat(
        job_id="5",
        start="2026-01-01T00:00:00+00:00",
        at="2026-01-01T00:00:00+00:00",
        epoch=1000.0,
        interval_s=15.0,
        pid=1,
        collector_pid=42,
        collector_started=collector_started,
        stall_window_s=window,
    )


def _record(epoch: float, in_flight: int = 4, quiet: float = 1.0) -> LiveProgress:
    return LiveProgress(
        written_at="x",
        epoch=epoch,
        pid=42,
        expected=2000,
        successful=704,
        failed=0,
        intentionally_omitted=0,
        in_flight=in_flight,
        new_outcomes=704,
        started_epoch=0.0,
        rate_per_s=3.0,
        last_outcome_age_s=quiet,
    )


def test_a_frozen_collector_under_a_beating_link_reads_unresponsive_with_its_evidence() -> None:
    """inject --kind hang: the heartbeat is fresh (the chain step beats) but the collector's progress
    record stopped 40 s ago: UNRESPONSIVE, naming the collector, the record and the window."""
    stall = collector_stall(_beat(collector_started=900.0), _record(epoch=960.0), now=1000.0)
    assert stall is not None and "pid 42" in stall and "40s ago" in stall and "frozen" in stall
    state = summarize([Submitted(job_id="5"), Started(job_id="5")])
    word, why = verdict(state, [_row("5", "RUNNING")], Beat(3.0, 15.0), stall)
    assert word == "UNRESPONSIVE" and "frozen" in why and "next link goes on" in why


def test_servers_that_stop_answering_read_unresponsive() -> None:
    """Requests in flight and no outcome for the window, the collector itself alive: UNRESPONSIVE."""
    stall = collector_stall(_beat(collector_started=800.0), _record(epoch=998.0, quiet=70.0), now=1000.0)
    assert stall is not None and "stopped answering" in stall


def test_a_collector_making_progress_is_healthy() -> None:
    """A fresh record with outcomes coming: no stall."""
    assert collector_stall(_beat(collector_started=800.0), _record(epoch=998.0), now=1000.0) is None
