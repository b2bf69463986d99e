"""``gymslurm status [RUN]``: one row per shard, from the ledgers plus one scheduler query.

The ledgers (written by the jobs) carry budgets, decisions and exit codes, so status never needs
``sacct`` to say how a chain is doing; the scheduler is asked once (``squeue``) for the jobs that
are still queued or running, plus once (``sacct``, when accounting exists) for the final state of
current jobs that ``squeue`` has forgotten after ``MinJobAge``. That is at most two queries
however many chains a run has. :func:`verdict` is pure.

Verdicts: HEALTHY (a link is running), WAITING (a link is pending: dependency, priority, begin
time...), STALLED (no live job and the chain is not finished: resubmit it), ORPHANED (a job is
queued that the chain will never use: a link left after the chain finished, two links running at
once, or a dependency that can never be satisfied), EXHAUSTED (stopped: retries or walltime used
up), DONE, FAILED (stopped on terminal failures).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gymslurm.errors import StoreError
from gymslurm.launcher.backend import HELD_STATES, LIVE_STATES, Backend
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import ChainState, summarize
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.slurm import AccountingRow, QueueRow
from gymslurm.store.paths import RunPaths
from gymslurm.store.store import read_coverage

RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT"})
VERDICT_OF_STOP = {
    Decision.DONE: "DONE",
    Decision.STOP_FAILED: "FAILED",
    Decision.STOP_EXHAUSTED: "EXHAUSTED",
    Decision.STOP_WALLTIME: "EXHAUSTED",
    Decision.STOP_NO_PROGRESS: "EXHAUSTED",
}


def verdict(state: ChainState, live: list[QueueRow]) -> tuple[str, str]:
    """The chain's verdict and why, from its ledger state and its jobs still in the queue."""
    running = [row for row in live if row.state in RUNNING_STATES]
    pending = [row for row in live if row.state not in RUNNING_STATES]
    if state.finished:
        deciding = state.last_decision.job_id if state.last_decision else None
        live = [row for row in live if row.job_id != deciding]  # it is only exiting
        if live:
            return "ORPHANED", f"the chain finished but job {live[0].job_id} is still {live[0].state}"
        if state.cancelled:
            return "STALLED", "cancelled; 'gymslurm resubmit' starts it again"
        assert state.last_decision is not None
        return VERDICT_OF_STOP[state.last_decision.decision], state.last_decision.reason
    if len(running) > 1:
        return "ORPHANED", f"{len(running)} links running at once: {' '.join(r.job_id for r in running)}"
    never = [row for row in pending if "NeverSatisfied" in row.reason]
    if never:
        return "ORPHANED", f"job {never[0].job_id} waits on a dependency that can never be satisfied"
    if running:
        return "HEALTHY", f"job {running[0].job_id} {running[0].state}"
    held = [row for row in pending if row.state in HELD_STATES or row.reason.startswith("JobHeld")]
    if held:
        row = held[0]
        return "WAITING", (
            f"job {row.job_id} is held ({row.state}, {row.reason}) and will not run by itself: "
            f"'scontrol release {row.job_id}' lets it run, 'gymslurm cancel RUN' stops the run"
        )
    if pending:
        return "WAITING", f"job {pending[0].job_id} pending ({pending[0].reason})"
    return "STALLED", "no live job and the chain is not finished; 'gymslurm resubmit' restarts it"


@dataclass
class ShardStatus:
    """One row of the status table."""

    shard: int
    verdict: str
    why: str
    job: str | None
    job_state: str
    jobs: int
    last_exit: int | None
    last_decision: str | None
    retries: str
    walltime: str
    coverage: str
    server_restarts: str = "-"
    injected: list[str] = field(default_factory=list)


def _coverage(output: Path) -> str:
    """The collector's coverage of ``output`` in a few words, read through the store; ``-`` if none."""
    try:
        coverage = read_coverage(RunPaths.for_output(output))
    except StoreError:
        return "-"
    if coverage is None:
        return "-"
    return f"{coverage.successful}/{coverage.expected} ok, {coverage.failed} failed"


def _job_state(
    job: str | None, queue: dict[str, QueueRow], accounting: dict[str, AccountingRow] | None
) -> str:
    if job is None:
        return "-"
    if job in queue:
        row = queue[job]
        return row.state if row.reason in ("None", "") else f"{row.state} ({row.reason})"
    if accounting and job in accounting:
        return accounting[job].state
    return "gone from squeue"


def shard_status(
    shard: int, state: ChainState, queue: dict[str, QueueRow], accounting: dict[str, AccountingRow] | None,
    *, limit: int, cap_s: float | None, output: Path,
) -> ShardStatus:  # fmt: skip
    """One shard's row."""
    live = [queue[j] for j in state.epoch_jobs if j in queue and queue[j].state in LIVE_STATES]
    word, why = verdict(state, live)
    last = state.last_decision
    cap = "none" if cap_s is None else f"{cap_s:.0f}s"
    return ShardStatus(
        shard=shard, verdict=word, why=why, job=state.current_job,
        job_state=_job_state(state.current_job, queue, accounting), jobs=len(state.decided),
        last_exit=last.exit_code if last else None, last_decision=str(last.decision) if last else None,
        retries=f"{state.budgets.infra_retries_used}/{limit}",
        walltime=f"{state.budgets.walltime_s:.0f}s/{cap}",
        coverage=_coverage(output), server_restarts=_restarts(state),
        injected=[f"{record.fault} (job {record.job_id}, {record.at[:19]})" for record in state.injected],
    )  # fmt: skip


def _restarts(state: ChainState) -> str:
    """Each supervised server's restarts over the chain (ledger ``server`` records), e.g. ``policy:2``."""
    if not state.server_restarts:
        return "-"
    return ", ".join(f"{name}:{count}" for name, count in sorted(state.server_restarts.items()))


def run_status(run: RunDir, backend: Backend) -> dict[str, Any]:
    """Every shard's status and the aggregation's, with one queue query (+ one accounting query)."""
    info = run.read_info()
    states = [summarize(run.ledger(s).read()) for s in range(info.shards)]
    aggregate = summarize(run.aggregate_ledger.read())
    queue = backend.queue()
    forgotten = [s.current_job for s in [*states, aggregate] if s.current_job and s.current_job not in queue]
    accounting = backend.accounting(forgotten) if forgotten else {}
    limits = (info.infra_retry_limit, info.max_walltime_s, info.output_stem)
    rows = [
        shard_status(
            i,
            st,
            queue,
            accounting,
            limit=limits[0],
            cap_s=limits[1],
            output=_shard_output(run, i, limits[2]),
        )
        for i, st in enumerate(states)
    ]
    agg_live = [queue[j] for j in aggregate.epoch_jobs if j in queue and queue[j].state in LIVE_STATES]
    agg_state = (
        "not submitted" if not aggregate.epoch_jobs else _job_state(aggregate.latest_job, queue, accounting)
    )
    if aggregate.last_decision and not agg_live:
        agg_state = f"{aggregate.last_decision.decision}: {aggregate.last_decision.reason}"
    return {
        "run": run.name, "path": str(run.root), "backend": info.backend,
        "shards": [asdict(row) for row in rows],
        "aggregation": {
            "job": aggregate.latest_job, "state": agg_state,
            "finished": aggregate.last_decision is not None and not agg_live,
        },
        "queries": backend.queries,
    }  # fmt: skip


def _shard_output(run: RunDir, shard: int, stem: str) -> Path:
    return run.shard_output(shard, stem)


COLUMNS = [
    ("shard", "shard"), ("verdict", "verdict"), ("job", "job"), ("job_state", "state"), ("jobs", "jobs"),
    ("last_exit", "exit"), ("last_decision", "decision"), ("retries", "retries"), ("walltime", "walltime"),
    ("coverage", "coverage"), ("server_restarts", "restarts"),
]  # fmt: skip


def print_table(report: dict[str, Any]) -> None:
    """The status as a rich table (plain text when not on a terminal)."""
    from rich.console import Console
    from rich.table import Table

    colours = {"HEALTHY": "green", "DONE": "green", "WAITING": "cyan", "STALLED": "yellow",
               "ORPHANED": "magenta", "EXHAUSTED": "red", "FAILED": "red"}  # fmt: skip
    table = Table(title=f"run {report['run']} ({report['backend']})")
    for _, title in COLUMNS:
        table.add_column(title)
    for row in report["shards"]:
        cells = [str(row[key]) if row[key] is not None else "-" for key, _ in COLUMNS]
        cells[1] = f"[{colours.get(row['verdict'], 'white')}]{row['verdict']}[/]"
        table.add_row(*cells)
    # Off a terminal (a batch log, a pipe) rich would squeeze the table into 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    console.print(table)
    for row in report["shards"]:
        console.print(f"shard {row['shard']}: {row['verdict']}: {row['why']}", highlight=False)
        if row["injected"]:
            faults = ", ".join(row["injected"])
            console.print(f"shard {row['shard']}: injected faults: {faults}", highlight=False)
    agg = report["aggregation"]
    console.print(f"aggregation: {agg['job'] or '-'} {agg['state']}")
