"""``gymslurm submit --wait``: poll the run's status until it has ended, then say how it ended.

The rule (docs/launcher.md, "Waiting"): ``--wait`` always ends, with an exit code and a last line
that say what happened, and it never waits on a job that no queue holds. :func:`wait_outcome` is
the pure table from one status document to "not yet" or ``(exit code, last line)``; the loop asks
for the same outcome twice in a row (one poll can fall between a link's decision and the job it
queues) before it returns.

- every shard DONE and the aggregation DONE (or disabled): 0, ``done:``;
- a shard waits for disk space: 75, ``disk full:`` (the chain goes on by itself once space is freed);
- a shard PAUSED (``gymslurm pause``), once no link of it is saving: 75, ``paused:``;
- a shard CANCELLED: 130, ``cancelled:``;
- a shard FAILED, EXHAUSTED, STALLED or ORPHANED, once the aggregation (if any) ended: 76 when
  every stop is FAILED, else 1; ``stopped:`` with the verdict, the reason and the way out;
- every shard DONE but the aggregation stopped, stalled (no job queued) or never queued: 1 (76
  when it stopped FAILED), ``aggregation …:`` with the way out;
- the scheduler failing to answer: asked again with the same back-off (a transient ``squeue``
  failure under load is common); after :data:`QUERY_ATTEMPTS` failures in a row: 75,
  ``scheduler unreachable:`` (never the raw error as the last line).
"""

from __future__ import annotations

import time
from typing import Any

from gymslurm.errors import SlurmError
from gymslurm.exitcodes import ExitCode
from gymslurm.launcher.rundir import RunDir, is_suite
from gymslurm.launcher.verdicts import ChainVerdict
from gymslurm.launcher.views.document import ShardRow, StatusDocument, jobs_busy
from gymslurm.site.backend import Backend

V = ChainVerdict
FINAL_VERDICTS = frozenset(
    {V.DONE, V.FAILED, V.EXHAUSTED, V.STALLED, V.CANCELLED, V.ORPHANED, V.BUDGET, V.PAUSED}
)
STOPS = frozenset({V.FAILED, V.EXHAUSTED, V.STALLED, V.ORPHANED})

WAIT_FIRST_S, WAIT_FACTOR, WAIT_MAX_S = 1.0, 1.5, 30.0
DECIDED_EVERY_S = 0.2  # how often a back-off's sleep looks at the run's decision files (two stats)
QUERY_ATTEMPTS = 8  # failed status queries in a row (~2 min with the back-off) before --wait says so


def _way_out(row: ShardRow, run: str, benchmark: str) -> str:
    resubmit = f"'gymslurm resubmit {run} {benchmark}'"
    logs = f"'gymslurm logs {run} --shard {row.shard}'"
    return {
        V.STALLED: f"next: {resubmit}",
        V.EXHAUSTED: f"next: read {logs}, fix the cause, then {resubmit}",
        V.FAILED: f"next: read {logs}, fix the cause, then {resubmit}",
        V.ORPHANED: f"next: 'gymslurm cancel {run}', then {resubmit}",
    }.get(row.verdict, f"next: 'gymslurm status {run}'")


def wait_outcome(report: StatusDocument, aggregation_enabled: bool) -> tuple[int, str] | None:
    """None while the run can still change by itself, else (exit code, last line) (pure)."""
    run, benchmark, shards = report.run, report.benchmark, report.shards
    verdicts = [row.verdict for row in shards]
    full = [row for row in shards if row.verdict == V.DISK_FULL]
    if full:
        return ExitCode.CONTINUE, (
            f"run {run}: disk full: shard {full[0].shard}: {full[0].why}; the chain goes on by "
            f"itself once space is freed ('gymslurm status {run}')"
        )
    if any(v not in FINAL_VERDICTS for v in verdicts):
        return None
    if V.PAUSED in verdicts:
        return ExitCode.CONTINUE, (
            f"run {run}: paused by 'gymslurm pause'; 'gymslurm resume {run} {benchmark}' goes on where "
            "it stopped"
        )
    if V.CANCELLED in verdicts:
        return ExitCode.INTERRUPTED, (
            f"run {run}: cancelled: stopped by 'gymslurm cancel'; 'gymslurm resubmit {run} {benchmark}' "
            "starts it again"
        )
    agg = report.aggregation
    aggregating = aggregation_enabled and agg.job is not None and not agg.finished and not agg.stalled
    stopped = [row for row in shards if row.verdict in STOPS]
    if stopped:
        if aggregating:
            return None
        row = stopped[0]
        code = ExitCode.STOP if all(r.verdict == V.FAILED for r in stopped) else ExitCode.RETRY
        others = f" ({len(stopped) - 1} more shard(s) stopped)" if len(stopped) > 1 else ""
        return code, (
            f"run {run}: stopped: shard {row.shard} {row.verdict}: {row.why}{others}; "
            f"{_way_out(row, run, benchmark)}"
        )
    if not aggregation_enabled:
        return ExitCode.DONE, f"run {run}: done: every shard DONE (aggregation disabled)"
    if agg.stalled:
        return ExitCode.RETRY, (
            f"run {run}: aggregation stalled: {agg.state}; next: 'gymslurm resubmit {run} {benchmark}'"
        )
    if agg.job is None:
        if jobs_busy(shards):
            return None  # the last link is still queuing it
        return ExitCode.RETRY, (
            f"run {run}: aggregation never queued: every shard is DONE and no job of the run is left; "
            f"next: 'gymslurm resubmit {run} {benchmark}' queues it"
        )
    if not agg.finished:
        return None
    if agg.state.startswith("DONE"):
        return ExitCode.DONE, f"run {run}: done: every shard DONE and merged ({agg.state})"
    failed = agg.state.startswith("STOP_FAILED")
    return (ExitCode.STOP if failed else ExitCode.RETRY), (
        f"run {run}: aggregation stopped: {agg.state}; next: read 'gymslurm logs {run} --aggregate', "
        f"then 'gymslurm resubmit {run} {benchmark}'"
    )


def scheduler_outcome(run: str, failures: int, error: Exception) -> tuple[int, str] | None:
    """After ``failures`` scheduler queries in a row failed: None (ask again, backing off) until
    :data:`QUERY_ATTEMPTS`, then the verdict: 75 (the run goes on by itself), ``scheduler
    unreachable:`` with the error's first line and the way back (pure)."""
    if failures < QUERY_ATTEMPTS:
        return None
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ExitCode.CONTINUE, (
        f"run {run}: scheduler unreachable: {failures} queries in a row failed (last: {first}); the run "
        f"goes on by itself: 'gymslurm status {run}' shows it once Slurm answers again"
    )


def next_poll_s(previous: float, changed: bool) -> float:
    """``--wait``'s backoff: 1 s, ×1.5 up to 30 s while nothing changes, 1 s again after a change (pure)."""
    return WAIT_FIRST_S if changed else min(previous * WAIT_FACTOR, WAIT_MAX_S)


def _decided_files(run: RunDir) -> tuple[tuple[int, int, int] | None, ...]:
    """The run's tally (a line per decided link, store/tally.py) and the aggregation's ledger, as
    (inode, size, mtime): what changes when a link or the aggregation decides, whatever the run's size."""
    found: list[tuple[int, int, int] | None] = []
    for path in (run.tally.path, run.aggregate_ledger.path):
        try:
            stat = path.stat()
        except OSError:
            found.append(None)
            continue
        found.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def sleep_until_decided(run: RunDir, limit_s: float) -> None:
    """Sleep ``limit_s``, or less when a link or the aggregation decided meanwhile (but never less than
    :data:`WAIT_FIRST_S`): the back-off keeps the scheduler asked rarely, and a run that ended is seen
    within a second or two, not up to ``WAIT_MAX_S`` later; quick decisions ask no more than once a second."""
    before = _decided_files(run)
    start = time.monotonic()
    deadline = start + limit_s
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(DECIDED_EVERY_S, left))
        if time.monotonic() - start >= WAIT_FIRST_S and _decided_files(run) != before:
            return


def _progress_key(report: StatusDocument) -> tuple[Any, ...]:
    rows = tuple((r.verdict, r.job, r.successful, r.failed) for r in report.shards)
    return (rows, report.aggregation.state)


def wait_for_run(
    run: RunDir, backend: Backend, aggregation_enabled: bool, poll_s: float = WAIT_FIRST_S
) -> int:
    """Poll the run's status with backoff until the same outcome comes twice; print the table and it."""
    from gymslurm.launcher.views.report import refresh_report
    from gymslurm.launcher.views.status import run_status
    from gymslurm.launcher.views.table import print_table

    last_key, seen, failures = None, None, 0
    while True:
        sleep_until_decided(run, poll_s)
        try:
            report = run_status(run, backend)
        except SlurmError as error:  # one failed squeue under load must not end the watch with its text
            failures += 1
            poll_s = next_poll_s(poll_s, changed=False)
            given_up = scheduler_outcome(run.name, failures, error)
            if given_up is None:
                continue
            print(given_up[1])
            return int(given_up[0])
        failures = 0
        key = _progress_key(report)
        poll_s = next_poll_s(poll_s, changed=key != last_key)
        last_key = key
        outcome = wait_outcome(report, aggregation_enabled)
        if outcome is not None and outcome == seen:
            break
        seen = outcome
    refresh_report(run, backend, report)
    print_table(report)
    if is_suite(run):  # one line per benchmark, as status prints them
        from gymslurm.launcher.views.suite_status import suite_lines, suite_rows

        print("\n".join(suite_lines(suite_rows(run, report.summary.gpu_hours))))
    code, line = outcome
    print(line)
    return int(code)
