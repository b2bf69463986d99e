"""The status table as a person reads it: fixed-width rows, each shard's reason, the run's summary line.

Pure text from the status document (:func:`gymslurm.launcher.views.status.run_status`); ``status``,
``submit --wait`` and the report's summary print through here.
"""

from __future__ import annotations

import sys
from typing import Any

from gymslurm.launcher.links import fault_text, human_gpu_hours
from gymslurm.launcher.views.cost import cost_line
from gymslurm.launcher.views.counts import human_duration


def summary_line(summary: dict[str, Any]) -> str:
    """``run: 120/400 ok, 3 failed (timeout 2, http_5xx 1), 0 omitted; 2 HEALTHY, 1 DONE; ETA 12m30s``.

    Until every shard has counted its rollouts, the total says how many did (``in 49 of 1000 shards``)
    and no ETA is given; interruptions are named apart from failures.
    """
    classes = ", ".join(f"{name} {n}" for name, n in summary["failed_by_class"].items())
    verdicts = ", ".join(f"{n} {v}" for v, n in summary["verdicts"].items())
    shards, counted = summary.get("shards", 0), summary.get("counted_shards", 0)
    scope = (
        f" so far in {counted} of {shards} shards ({shards - counted} not counted yet)"
        if counted < shards
        else ""
    )
    interrupted = f", {summary['interrupted']} interrupted (run again)" if summary.get("interrupted") else ""
    return (
        f"run: {summary['successful']}/{summary['expected']} ok{scope}, {summary['failed']} failed"
        f"{f' ({classes})' if classes else ''}{interrupted}, {summary['omitted']} omitted; {verdicts}; "
        f"ETA {summary['eta']}; walltime {human_duration(summary['walltime_used_s'])}"
    )


COLUMNS = [
    ("shard", "shard"),
    ("verdict", "verdict"),
    ("job", "job"),
    ("job_state", "state"),
    ("successor", "next"),
    ("jobs", "links"),
    ("last_exit", "exit"),
    ("last_decision", "decision"),
    ("retries", "retries"),
    ("walltime", "walltime"),
    ("coverage", "coverage"),
    ("eta", "eta"),
    ("server_restarts", "restarts"),
    ("gpu_text", "GPU-h"),
]
ANSI = {
    "HEALTHY": "32",
    "DONE": "32",
    "WAITING": "36",
    "STALLED": "33",
    "CANCELLED": "33",
    "DISK_FULL": "31",
    "UNRESPONSIVE": "31",
    "ORPHANED": "35",
    "EXHAUSTED": "31",
    "FAILED": "31",
    "BUDGET": "33",
    "PAUSED": "36",
}


def table_lines(report: dict[str, Any], colour: bool = False) -> list[str]:
    """The status table as fixed-width lines, header first (pure; plain text stays fast at 1,000 rows)."""
    rows = []
    for row in report["shards"]:
        cells = ["-" if row[key] is None else str(row[key]) for key, _ in COLUMNS]
        if row["live"]:
            cells[10] += " (live)"
        rows.append(cells)
    widths = [max([len(title), *(len(cells[i]) for cells in rows)]) for i, (_, title) in enumerate(COLUMNS)]
    lines = [
        "  ".join(title.ljust(width) for (_, title), width in zip(COLUMNS, widths, strict=True)).rstrip()
    ]
    for cells in rows:
        text = [cell.ljust(width) for cell, width in zip(cells, widths, strict=True)]
        if colour and cells[1] in ANSI:
            text[1] = f"\033[{ANSI[cells[1]]}m{text[1]}\033[0m"
        lines.append("  ".join(text).rstrip())
    return lines


def link_lines(row: dict[str, Any]) -> list[str]:
    """``status --shard N``: each link of the shard with its GPU-hours (none without ``links``)."""
    if "links" not in row:
        return []
    slurm = row.get("gpu_hours_slurm_by_job") or {}
    out = [
        f"shard {row['shard']} links: job (run), elapsed, GPUs, GPU-h allocated (idle), decision"
        + ("; Slurm recorded per job" if slurm else "")
    ]
    for link in row["links"]:
        recorded = f"; Slurm {human_gpu_hours(slurm[link['job']])} (job)" if link["job"] in slurm else ""
        out.append(
            f"  {link['job']} ({link['restart']}), {human_duration(link['elapsed_s'])}, {link['gpus']} GPUs, "
            f"{human_gpu_hours(link['gpu_hours'])} ({human_gpu_hours(link['gpu_hours_idle'])} idle), "
            f"{link['decision'] or 'running'}{recorded}"
        )
    return out


def print_table(report: dict[str, Any]) -> None:
    """The table (verdicts coloured on a terminal), each shard's reason, the aggregation, the summary."""
    out = [f"run {report['run']} ({report['backend']}, {report['path']})"]
    out += table_lines(report, colour=sys.stdout.isatty())
    for row in report["shards"]:
        where = f" (log {row['log']})" if row["log"] and row["verdict"] != "DONE" else ""
        out.append(f"shard {row['shard']}: {row['verdict']}: {row['why']}{where}")
        if row.get("injected"):
            out.append(f"shard {row['shard']}: injected faults: {', '.join(row['injected'])}")
    agg = report["aggregation"]
    out.append(f"aggregation: {agg['job'] or '-'} {agg['state']}")
    out.append(summary_line(report["summary"]))
    if line := cost_line(report["summary"]):
        out.append(line)
    for row in report["shards"]:
        out += link_lines(row)
    faults = report["summary"].get("faults") or {}
    if any(faults.values()):
        out.append(f"faults survived: {fault_text(faults)}")
    if report.get("final_metrics"):
        counts = ("coverage/", "retries/", "scoring/")
        shown = {k: v for k, v in report["final_metrics"].items() if not k.startswith(counts)}
        text = ", ".join(f"{k} {v}" for k, v in sorted(shown.items())) or "(coverage counts only)"
        out.append(f"final metrics: {text} (every metric: --json, report.html)")
    elif report.get("final_metrics_problem"):
        out.append(f"final metrics: unreadable: {report['final_metrics_problem']}")
    sys.stdout.write("\n".join(out) + "\n")
