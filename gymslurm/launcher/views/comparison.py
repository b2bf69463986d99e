"""A comparison as people read it: a table on the terminal (rich), and a self-contained HTML page.

Pure apart from printing: both are drawn from the comparison document (``gymslurm/comparison.py``)
alone. The page (``gymslurm compare A B --html PAGE``) needs no server, network or other file, as
``report.html``: inline CSS, the chart as inline SVG (views/charts.py, ``chart-compare``), the
document embedded as JSON.
"""

from __future__ import annotations

import html
import sys
from typing import IO, Any

import orjson

from gymslurm.comparison import BenchmarkComparison, ComparisonDocument, Flip
from gymslurm.launcher.views.charts import COMPARISON_CSS, comparison_chart

FLIPS_SHOWN = 10  # per direction on the terminal and the page (every flip is in --json)
COLUMNS = (
    "benchmark",
    "paired tasks",
    "baseline",
    "candidate",
    "delta",
    "interval",
    "p (test)",
    "flips ↓ / ↑",
    "change",
)
CHANGE_STYLE = {"improved": "green", "regressed": "red", "no change": "", "not comparable": "yellow"}


def _number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def row_cells(entry: BenchmarkComparison, confidence: float) -> list[str]:
    """One benchmark's cells, in :data:`COLUMNS` order (pure; the table and the page share them)."""
    tasks = entry.tasks
    coverage = "" if tasks.coverage is None else f" ({tasks.coverage:.0%})"
    interval = "-" if entry.interval is None else f"[{entry.interval[0]:+.4f}, {entry.interval[1]:+.4f}]"
    p_value = "-" if entry.p_value is None else f"{entry.p_value:.3g} ({entry.test})"
    flips = (
        f"{len(entry.flips.pass_to_fail)} / {len(entry.flips.fail_to_pass)}"
        if entry.flips.mode == "binary"
        else f"{len(entry.flips.changed)} changed"
        if entry.flips.mode == "continuous"
        else "-"
    )
    delta = "-" if entry.delta is None else f"{entry.delta:+.4f}"
    return [
        entry.benchmark,
        f"{tasks.paired}{coverage}",
        _number(entry.baseline_mean),
        _number(entry.candidate_mean),
        delta,
        f"{interval} {confidence:.0%}" if entry.interval else "-",
        p_value,
        flips,
        entry.change,
    ]


def notes(entry: BenchmarkComparison) -> list[str]:
    """What the table's figures leave out: excluded tasks, unscored rollouts, the flips themselves."""
    out = []
    tasks = entry.tasks
    if tasks.baseline_only or tasks.candidate_only or tasks.neither:
        out.append(
            f"tasks left out: {tasks.baseline_only} measured by the baseline only, {tasks.candidate_only} "
            f"by the candidate only, {tasks.neither} by neither"
        )
    for label, side in (("baseline", entry.baseline), ("candidate", entry.candidate)):
        unscored = {k: v for k, v in side.rollouts.items() if k != "measured" and v}
        if unscored:
            text = ", ".join(f"{k} {v}" for k, v in unscored.items())
            out.append(f"{label} rollouts not scored (never counted as failures): {text}")
    for title, flips in (
        ("pass → fail", entry.flips.pass_to_fail),
        ("fail → pass", entry.flips.fail_to_pass),
        ("changed", entry.flips.changed),
    ):
        if flips:
            shown = ", ".join(_task(flip) for flip in flips[:FLIPS_SHOWN])
            more = f" (+{len(flips) - FLIPS_SHOWN} more: --json)" if len(flips) > FLIPS_SHOWN else ""
            out.append(f"{title}: {shown}{more}")
    return out


def _task(flip: Flip) -> str:
    return f"{flip.taskset}/{flip.task_id}" if flip.taskset else flip.task_id


def print_comparison(document: ComparisonDocument, stream: IO[str] | None = None) -> None:
    """The table (one row per benchmark), then each benchmark's notes."""
    from rich.console import Console
    from rich.table import Table

    title = f"{document.metric}: {document.candidate} (candidate) against {document.baseline} (baseline)"
    table = Table(title=title, show_header=True, header_style="bold")
    for name in COLUMNS:
        table.add_column(name, justify="left" if name in ("benchmark", "change") else "right")
    for entry in document.benchmarks:
        cells = row_cells(entry, document.confidence)
        style = CHANGE_STYLE[entry.change]
        cells[-1] = f"[{style}]{cells[-1]}[/{style}]" if style else cells[-1]
        table.add_row(*cells)
    out = stream or sys.stdout
    console = Console(file=out, width=None if out.isatty() else 160, highlight=False)
    console.print(table)
    for entry in document.benchmarks:
        for line in notes(entry):
            console.print(f"{entry.benchmark}: {line}", markup=False)
    for missing in document.unpaired:
        console.print(f"{missing.benchmark}: only the {missing.side} has it (not compared)", markup=False)
    console.print(
        "delta = candidate - baseline over paired tasks; interval: bootstrap over tasks "
        f"({document.resamples} resamples, seed {document.seed}); docs/compare.md",
        markup=False,
    )


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#212121}h1{font-size:1.3em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left}
th{background:#f1f1f1}.chart{width:100%;max-width:760px;height:auto;display:block;background:#fafafa}
"""


def comparison_section(document: ComparisonDocument) -> str:
    """The table, the chart (views/charts.py) and the notes of a comparison (pure): the body of
    ``compare --html``'s page and the report's "Compared with a baseline" section, one drawing."""
    data: dict[str, Any] = document.model_dump(mode="json")
    e = html.escape
    head = "".join(f"<th>{e(name)}</th>" for name in COLUMNS)
    rows = "".join(
        f'<tr class="{e(entry.change.replace(" ", "-"))}">'
        + "".join(f"<td>{e(cell)}</td>" for cell in row_cells(entry, document.confidence))
        + "</tr>"
        for entry in document.benchmarks
    )
    listed = "".join(
        f"<li>{e(entry.benchmark)}: {e(line)}</li>" for entry in document.benchmarks for line in notes(entry)
    )
    listed += "".join(
        f"<li>{e(missing.benchmark)}: only the {e(missing.side)} has it (not compared)</li>"
        for missing in document.unpaired
    )
    return (
        f'<table id="comparison"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        f'{comparison_chart(data)}<ul id="notes">{listed}</ul>'
        f"<p>delta = candidate − baseline over the tasks both measured; {document.confidence:.0%} bootstrap "
        f"interval over tasks ({document.resamples} resamples, seed {document.seed}).</p>"
    )


def comparison_page(document: ComparisonDocument) -> str:
    """The whole page: title, :func:`comparison_section`, and the document embedded as JSON (pure)."""
    e = html.escape
    embedded = orjson.dumps(document.model_dump(mode="json")).decode().replace("</", "<\\/")
    script = (
        "document.body.dataset.benchmarks = String(JSON.parse("
        "document.getElementById('gymslurm-comparison').textContent).benchmarks.length);"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>gymslurm compare</title><style>{CSS}{COMPARISON_CSS}</style></head><body>"
        f"<h1>{e(document.metric)}: {e(document.candidate)} against {e(document.baseline)}</h1>"
        f"{comparison_section(document)}"
        f'\n<script type="application/json" id="gymslurm-comparison">{embedded}</script>'
        f"\n<script>{script}</script>\n</body></html>\n"
    )
