"""The status table as a person reads it: fixed-width rows, each shard's reason, the run's summary line.

Pure text from the status document (views/document.py, made by
:func:`gymslurm.launcher.views.status.run_status`); ``status``, ``submit --wait`` and the report's
summary print through here. The columns are named by the row's fields (:data:`COLUMNS`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from operator import attrgetter

from gymslurm.launcher.links import fault_text, human_gpu_hours
from gymslurm.launcher.verdicts import ChainVerdict
from gymslurm.launcher.views.cost import cost_line
from gymslurm.launcher.views.counts import human_duration
from gymslurm.launcher.views.document import LinkedShardRow, ShardRow, StatusDocument, StatusSummary


def summary_line(summary: StatusSummary) -> str:
    """``run: 120/400 ok, 3 failed (timeout 2, http_5xx 1), 0 omitted; 2 HEALTHY, 1 DONE; ETA 12m30s``.

    Until every shard has counted its rollouts, the total says how many did (``in 49 of 1000 shards``)
    and no ETA is given; interruptions are named apart from failures.
    """
    classes = ", ".join(f"{name} {n}" for name, n in summary.failed_by_class.items())
    verdicts = ", ".join(f"{n} {v}" for v, n in summary.verdicts.items())
    shards, counted = summary.shards, summary.counted_shards
    scope = (
        f" so far in {counted} of {shards} shards ({shards - counted} not counted yet)"
        if counted < shards
        else ""
    )
    interrupted = f", {summary.interrupted} interrupted (run again)" if summary.interrupted else ""
    return (
        f"run: {summary.successful}/{summary.expected} ok{scope}, {summary.failed} failed"
        f"{f' ({classes})' if classes else ''}{interrupted}, {summary.omitted} omitted; {verdicts}; "
        f"ETA {summary.eta}; walltime {human_duration(summary.walltime_used_s)}"
    )


@dataclass(frozen=True)
class Column:
    """A column of the table (and of the report's shard table): the row's field it shows, its title."""

    field: str
    title: str


COLUMNS = (
    Column("shard", "shard"),
    Column("verdict", "verdict"),
    Column("job", "job"),
    Column("job_state", "state"),
    Column("successor", "next"),
    Column("jobs", "links"),
    Column("last_exit", "exit"),
    Column("last_decision", "decision"),
    Column("retries", "retries"),
    Column("walltime", "walltime"),
    Column("coverage", "coverage"),
    Column("eta", "eta"),
    Column("server_restarts", "restarts"),
    Column("gpu_text", "GPU-h"),
)
cells_of = attrgetter(*(column.field for column in COLUMNS))  # a row's cells, in COLUMNS' order
AT = {column.field: i for i, column in enumerate(COLUMNS)}  # a column's place, by its field's name


def _texts(row: ShardRow) -> list[str]:
    """A row's cells as text (``-`` for none; live coverage says so)."""
    cells = ["-" if value is None else str(value) for value in cells_of(row)]
    if row.live:
        cells[AT["coverage"]] += " (live)"
    return cells


def table_lines(report: StatusDocument, colour: bool = False) -> list[str]:
    """The status table as fixed-width lines, header first (pure; plain text stays fast at 1,000 rows)."""
    rows = [_texts(row) for row in report.shards]
    widths = [max([len(c.title), *(len(cells[i]) for cells in rows)]) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.title.ljust(width) for c, width in zip(COLUMNS, widths, strict=True)).rstrip()]
    verdict = AT["verdict"]
    for row, cells in zip(report.shards, rows, strict=True):
        text = [cell.ljust(width) for cell, width in zip(cells, widths, strict=True)]
        if colour:
            text[verdict] = f"\033[{row.verdict.look.ansi}m{text[verdict]}\033[0m"
        lines.append("  ".join(text).rstrip())
    return lines


def link_lines(row: ShardRow) -> list[str]:
    """``status --shard N``: each link of the shard with its GPU-hours (none for a row without links)."""
    if not isinstance(row, LinkedShardRow):
        return []
    slurm = row.gpu_hours_slurm_by_job or {}
    out = [
        f"shard {row.shard} links: job (run), elapsed, GPUs, GPU-h allocated (idle), decision"
        + ("; Slurm recorded per job" if slurm else "")
    ]
    for link in row.links:
        recorded = f"; Slurm {human_gpu_hours(slurm[link.job])} (job)" if link.job in slurm else ""
        out.append(
            f"  {link.job} ({link.restart}), {human_duration(link.elapsed_s)}, {link.gpus} GPUs, "
            f"{human_gpu_hours(link.gpu_hours)} ({human_gpu_hours(link.gpu_hours_idle)} idle), "
            f"{link.decision or 'running'}{recorded}"
        )
    return out


def print_table(report: StatusDocument) -> None:
    """The table (verdicts coloured on a terminal), each shard's reason, the aggregation, the summary."""
    out = [f"run {report.run} ({report.backend}, {report.path})"]
    out += table_lines(report, colour=sys.stdout.isatty())
    for row in report.shards:
        where = f" (log {row.log})" if row.log and row.verdict != ChainVerdict.DONE else ""
        out.append(f"shard {row.shard}: {row.verdict}: {row.why}{where}")
        if row.injected:
            out.append(f"shard {row.shard}: injected faults: {', '.join(row.injected)}")
    agg = report.aggregation
    out.append(f"aggregation: {agg.job or '-'} {agg.state}")
    out.append(summary_line(report.summary))
    if line := cost_line(report.summary):
        out.append(line)
    for row in report.shards:
        out += link_lines(row)
    if any(report.summary.faults.values()):
        out.append(f"faults survived: {fault_text(report.summary.faults)}")
    if report.final_metrics:
        counts = ("coverage/", "retries/", "scoring/")
        shown = {k: v for k, v in report.final_metrics.items() if not k.startswith(counts)}
        text = ", ".join(f"{k} {v}" for k, v in sorted(shown.items())) or "(coverage counts only)"
        out.append(f"final metrics: {text} (every metric: --json, report.html)")
    elif report.final_metrics_problem:
        out.append(f"final metrics: unreadable: {report.final_metrics_problem}")
    sys.stdout.write("\n".join(out) + "\n")
