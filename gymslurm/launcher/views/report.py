"""``report.html``: one self-contained page of a run, rewritten by ``status`` and ``submit --wait``.

Why: a user looks again from a phone or a laptop days later, maybe from a copied folder or a shared
filesystem with no gymslurm at hand. The page needs no server, no network and no other file: CSS is
inline, the timeline is plain HTML, the charts are inline SVG (views/charts.py, no script), and the
data it was drawn from is embedded as JSON (``<script type="application/json" id="gymslurm-report">``).

The data (:func:`report_data`, views/document.py's :class:`ReportData`: schema ``gymslurm.report``,
its version in gymslurm/formats.py) holds the status document unchanged (``status``: the same as
``gymslurm status --json``, with the final metrics, GPU-hours and budget) plus what only the
report shows: each shard's timeline of links (``links``: start, end, how each ended, what
interrupted it, GPUs held), interruptions by kind (launcher/links.py), and the merged rows' reward
distribution per taskset. :func:`render` is a
pure function of that data; :func:`write_report` reads, renders and publishes atomically.

Sharing: the run folder is 0700 and its files 0600. ``report.share: group`` (opt-in, recorded in
``run.json``) makes ``report.html`` alone 0640 and the run folder 0710, so the folder's group can
open the page by its path but can neither list the folder nor read any other file of the run. The
page holds what ``status`` shows, never a secret (the canary suite reads it).
"""

from __future__ import annotations

import hashlib
import html
import sys
from collections.abc import Sequence
from dataclasses import fields, replace
from datetime import datetime
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson

from gymslurm.errors import StoreError
from gymslurm.launcher.ledger import Record
from gymslurm.launcher.links import (
    KINDS,
    fault_text,
    faults_survived,
    human_gpu_hours,
    idle_gpu_hours,
    iso_epoch,
    link_gpu_hours,
    links_of,
)
from gymslurm.launcher.run_cost import final_metrics
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.launcher.verdicts import DECISION_COLOURS, RUNNING_LINK, ChainVerdict
from gymslurm.launcher.views.charts import COMPARISON_CSS, coverage_chart, gpu_chart, rewards_chart
from gymslurm.launcher.views.cost import cost_line
from gymslurm.launcher.views.counts import human_duration
from gymslurm.launcher.views.document import (
    ReportData,
    ShardRow,
    ShardTimeline,
    StatusDocument,
    SuiteRow,
)
from gymslurm.launcher.views.status import read_chains, run_status
from gymslurm.launcher.views.suite_status import suite_rows
from gymslurm.launcher.views.table import COLUMNS, cells_of, summary_line
from gymslurm.site.backend import Backend
from gymslurm.store.paths import RunPaths
from gymslurm.store.rewards import read_reward_histogram

REPORT_NAME = "report.html"


def report_data(
    run: RunDir,
    backend: Backend,
    status: StatusDocument | None = None,
    chains: Sequence[list[Record]] | None = None,
) -> ReportData:
    """The report's data: the status document (queried unless given) plus timelines, faults, rewards.

    ``chains``: the records ``status`` was made from (:func:`read_chains`), so no ledger is read twice.
    """
    info = run.read_info()
    chains = chains if chains is not None else read_chains(run, info.shards)
    status = status if status is not None else run_status(run, backend, chains=chains)
    shards = []
    for shard, records in enumerate(chains):
        links = links_of(records)
        shards.append(ShardTimeline(shard=shard, links=links, faults=faults_survived(records, links)))
    try:
        histogram = read_reward_histogram(RunPaths.for_output(run.merged_output(info.output_stem)))
    except StoreError:
        histogram = None
    rewards = None if histogram is None else [entry.model_dump() for entry in histogram]
    from gymslurm.store.comparison_file import read_comparison  # the compare machinery, only when asked

    comparison = read_comparison(run.root)
    return ReportData(
        status=status,
        shards=shards,
        metrics=final_metrics(run, info.output_stem)[0],
        rewards=rewards,
        suite=suite_rows(run, status.summary.gpu_hours),
        comparison=None if comparison is None else comparison.model_dump(mode="json"),
    )


_SPECIAL = frozenset("&<>\"'")


def _e(value: object) -> str:
    text = "-" if value is None else str(value)
    return html.escape(text) if not _SPECIAL.isdisjoint(text) else text  # most cells need no escaping


def _excluded(rows: Sequence[ShardRow]) -> str:
    """The bad nodes each chain keeps its later links off (status's ``excluded_nodes``)."""

    def named(nodes: dict[str, int]) -> str:
        return ", ".join(f"{node} ({n} node failures)" for node, n in nodes.items())

    found = [f"shard {row.shard}: {named(row.excluded_nodes)}" for row in rows if row.excluded_nodes]
    return "nodes excluded from a chain's later links: " + ("; ".join(found) if found else "none")


def _timeline(data: ReportData, now: float) -> str:
    spans = [
        (iso_epoch(link.get("start")), iso_epoch(link.get("end")) or now)
        for shard in data.shards
        for link in shard.links
    ]
    starts = [s for s, _ in spans if s is not None]
    if not starts:
        return '<p id="timeline" class="timeline">no link has started yet</p>'
    t0, t1 = min(starts), max(end for _, end in spans)
    width = max(t1 - t0, 1.0)
    rows, unstarted = [], 0
    for shard in data.shards:
        if not shard.links:  # no lane for a shard whose first link has not started: counted below
            unstarted += 1
            continue
        bars = []
        for link in shard.links:
            start, end = iso_epoch(link.get("start")), iso_epoch(link.get("end")) or now
            if start is None:
                continue
            left, span = 100 * (start - t0) / width, max(100 * (end - start) / width, 0.4)
            colour = DECISION_COLOURS.get(link.get("decision") or RUNNING_LINK, "#6a1b9a")
            title = (
                f"job {link['job']} (run {link['restart']}): {link.get('decision') or 'running'}; "
                f"{link.get('slurm_state')}, exit {link.get('exit_code')}; "
                f"{link.get('reason')}"
            )
            bars.append(
                f'<span class="bar" style="left:{left:.2f}%;width:{span:.2f}%;background:{colour}" '
                f'title="{_e(title)}"></span>'
            )
        rows.append(
            f'<div class="lane"><span class="label">shard {shard.shard}</span>'
            f'<span class="track">{"".join(bars)}</span></div>'
        )
    legend = " ".join(
        f'<span class="key" style="background:{c}"></span>{_e(d)}' for d, c in DECISION_COLOURS.items()
    )
    waiting = f" &middot; {unstarted} shard(s) not drawn: no link started yet" if unstarted else ""
    return (
        f'<div id="timeline" class="timeline">{"".join(rows)}</div>'
        f'<p class="legend">{legend} &middot; {human_duration(t1 - t0)} '
        f"from the first link's start{waiting}</p>"
    )


_CELL, _ROW = "\x1e", "\x1f"  # ASCII record separators: joined, escaped once, then made markup


def _table(headers: list[str], rows: list[list[object]], table_id: str) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{_body(rows)}</tbody></table>'


def _body(rows: list[list[object]]) -> str:
    """The rows as ``<tr><td>…``: every cell joined with separators and escaped in one pass (10,000
    shards are 100,000 cells), cell by cell only when a cell itself holds a separator."""
    if not rows:
        return ""
    text = _ROW.join(_CELL.join(["-" if c is None else str(c) for c in row]) for row in rows)
    if text.count(_CELL) + text.count(_ROW) != sum(len(row) for row in rows) - 1:
        return "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    text = html.escape(text) if not _SPECIAL.isdisjoint(text) else text
    return "<tr><td>" + text.replace(_CELL, "</td><td>").replace(_ROW, "</td></tr><tr><td>") + "</td></tr>"


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#212121}h1{font-size:1.4em}
h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left}
th{background:#f1f1f1}.summary{font-weight:600}.timeline{border:1px solid #ccc;padding:.4em}
.lane{display:flex;align-items:center;height:18px}.label{width:6em;font-size:12px}
.track{position:relative;flex:1;height:12px;background:#f6f6f6}.bar{position:absolute;top:0;height:12px}
.legend{font-size:12px}.key{display:inline-block;width:10px;height:10px;margin:0 .25em 0 .6em}
.chart{width:100%;max-width:760px;height:auto;display:block;margin:.3em 0;background:#fafafa}
"""


def render(data: ReportData, now: float | None = None, digest: str | None = None) -> str:
    """The whole page, from :func:`report_data`'s output (pure apart from ``now``'s default);
    ``digest``: its :func:`fingerprint`, if the caller made it already."""
    status = data.status
    now = datetime.now().timestamp() if now is None else now
    shard_rows = [list(cells_of(row)) for row in status.shards]
    coverage_rows: list[list[object]] = [
        [row.shard, row.expected, row.successful, row.failed, row.omitted, row.in_flight]
        for row in status.shards
    ]
    classes = sorted(status.summary.failed_by_class.items())
    names = [*KINDS, "retries_spent", "server_restarts"]
    fault_rows: list[list[object]] = [
        [s.shard, *(s.faults.get(name, 0) for name in names)] for s in data.shards
    ]
    totals = {name: sum(s.faults.get(name, 0) for s in data.shards) for name in names}
    fault_rows.append(["all", *totals.values()])
    fault_headers = ["shard", *(name.replace("_", " ") for name in names)]
    summary = status.summary
    gpu_rows: list[list[object]] = [
        [
            r.shard,
            human_gpu_hours(r.gpu_hours),
            human_gpu_hours(r.gpu_hours_idle),
            human_gpu_hours(r.gpu_hours_slurm),
        ]
        for r in status.shards
    ]
    gpu_rows.append(
        [
            "all",
            human_gpu_hours(summary.gpu_hours),
            human_gpu_hours(summary.gpu_hours_idle),
            human_gpu_hours(summary.gpu_hours_slurm),
        ]
    )
    expected = summary.expected
    link_rows: list[list[object]] = [
        [
            s.shard,
            link["job"],
            link["restart"],
            link.get("start"),
            link.get("end"),
            human_duration(link.get("elapsed_s")),
            link.get("gpus"),
            human_gpu_hours(link_gpu_hours(link, now, iso_epoch(link.get("start")))),
            human_gpu_hours(idle_gpu_hours(link)),
            link.get("slurm_state"),
            link.get("exit_code"),
            link.get("decision"),
            link.get("reason"),
        ]
        for s in data.shards
        for link in s.links
    ]
    metrics = data.metrics or {}
    embedded = orjson.dumps(data).decode().replace("</", "<\\/")
    parts = [
        f"<h1>gymslurm run {_e(status.run)}</h1>",
        f"<p>benchmark {_e(status.benchmark)} &middot; {_e(status.backend)} &middot; "
        f"{_e(status.path)} &middot; written {_e(status.generated_at)}</p>",
        f'<p class="summary" id="summary">{_e(summary_line(status.summary))}</p>',
        _verdict_legend(summary.verdicts),
        f"<p>aggregation: {_e(status.aggregation.job)} {_e(status.aggregation.state)}</p>",
        f'<p class="summary" id="result">{_e(headline(metrics) or _no_metrics(status))}</p>',
        *_suite_section(data.suite),
        *_comparison_section(data.comparison),  # near the top: the first thing a reader of a candidate wants
        "<h2>Shards</h2>",
        _table([c.title for c in COLUMNS], shard_rows, "shards"),
        "<h2>Timeline of links</h2>",
        _timeline(data, now),
        "<h2>Coverage by category</h2>",
        _table(
            ["shard", "expected", "successful", "failed", "omitted", "in flight"], coverage_rows, "coverage"
        ),
        "<h2>Failure classes</h2>",
        _table(["class", "selected failures"], [list(c) for c in classes], "failures")
        if classes
        else "<p>no selected failures</p>",
        "<h2>Coverage and rate over time</h2>",
        coverage_chart(data.shards, expected, now),
        "<h2>Faults survived</h2>",
        f'<p id="faults-total">faults survived: {_e(fault_text(totals))}</p>',
        _table(fault_headers, fault_rows, "faults"),
        f'<p id="excluded-nodes">{_e(_excluded(status.shards))}</p>',
        "<h2>GPU-hours</h2>",
        f'<p id="gpu-total">{_e(cost_line(summary) or "no GPU-hours recorded")}</p>',
        _table(
            ["shard", "allocated", "idle (no request in flight)", "Slurm recorded"], gpu_rows, "gpu-hours"
        ),
        gpu_chart(data.shards, now, summary.gpu_budget),
        "<h2>Walltime</h2>",
        _table(["shard", "walltime"], [[r.shard, r.walltime] for r in status.shards], "walltime"),
        "<h2>Links</h2>",
        _table(
            [
                "shard",
                "job",
                "run",
                "start",
                "end",
                "elapsed",
                "GPUs",
                "GPU-h",
                "idle GPU-h",
                "Slurm",
                "exit",
                "decision",
                "reason",
            ],
            link_rows,
            "links",
        ),
        "<h2>Final metrics</h2>",
        _table(["metric", "value"], [[k, v] for k, v in sorted(metrics.items())], "metrics")
        if metrics
        else f'<p id="metrics">{_e(_no_metrics(status))}</p>',
        "<h2>Reward distribution per taskset</h2>",
        rewards_chart(data.rewards),
    ]
    script = (
        "document.body.dataset.rendered = String(JSON.parse("
        "document.getElementById('gymslurm-report').textContent).status.shards.length);"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="gymslurm-data" content="{digest or fingerprint(data)}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>gymslurm {_e(status.run)}</title><style>{CSS}{COMPARISON_CSS}</style></head><body>"
        + "\n".join(parts)
        + f'\n<script type="application/json" id="gymslurm-report">{embedded}</script>'
        + f"\n<script>{script}</script>\n</body></html>\n"
    )


def _comparison_section(comparison: dict[str, Any] | None) -> list[str]:
    """``report --baseline``: compare's table, chart and notes (views/comparison.py), run = candidate."""
    if comparison is None:
        return []
    from gymslurm.comparison import ComparisonDocument
    from gymslurm.launcher.views.comparison import comparison_section

    document = ComparisonDocument.model_validate(comparison)
    return [
        f'<h2 id="compared">Compared with {_e(document.baseline)} (baseline)</h2>',
        comparison_section(document),
    ]


def _suite_section(rows: list[SuiteRow]) -> list[str]:
    """A suite run's table: each benchmark's headline with its uncertainty and the tasks it rests on."""
    if not rows:
        return []
    table = [
        [
            r.benchmark,
            r.verdict,
            f"{r.outcomes}/{r.expected or '?'}",
            *_score_cells(r.headline),
            human_duration(r.eta_s),
            human_gpu_hours(r.gpu_hours),
        ]
        for r in rows
    ]
    headers = ["benchmark", "verdict", "coverage", "headline", "± s.e.", "95% interval", "tasks", "rows"]
    return ["<h2>Suite</h2>", _table([*headers, "ETA", "GPU-h"], table, "suite")]


def _score_cells(score: dict[str, Any] | None) -> list[object]:
    """Headline, standard error, interval, tasks, rows (``-`` where there is none yet)."""
    if score is None:
        return ["-"] * 5
    if score["value"] is None:
        return ["-", "-", "-", score["tasks"], score["rows"]]
    low, high = score["ci95"] or (score["value"], score["value"])
    return [
        f"{score['metric']} {score['value']:.3f}",
        "-" if score["stderr"] is None else f"{score['stderr']:.3f}",
        f"[{low:.3f}, {high:.3f}]",
        score["tasks"],
        score["rows"],
    ]


def headline(metrics: dict[str, Any] | None) -> str | None:
    """``result: mean/reward 0.75, coverage/measured 40 of 40``: the metrics a reader looks for first."""
    if not metrics:
        return None
    parts = [
        f"{k} {v}"
        for k, v in sorted(metrics.items())
        if k.startswith("mean/") or ("/" in k and not k.startswith(("coverage/", "retries/", "scoring/")))
    ]
    if "coverage/measured" in metrics:
        expected = metrics.get("coverage/expected", "?")
        parts.append(f"coverage/measured {metrics['coverage/measured']} of {expected}")
    return "result: " + ", ".join(parts)


def _verdict_legend(verdicts: dict[str, int]) -> str:
    """``shards by verdict: ■ 20 DONE ■ 10 HEALTHY``, each in its page colour, its meaning on hover."""
    keys = []
    for word, n in verdicts.items():
        look = ChainVerdict(word).look
        swatch = f'<span class="key" style="background:{look.html}" title="{_e(look.meaning)}"></span>'
        keys.append(f"{swatch}{n} {_e(word)}")
    return f'<p class="legend" id="verdicts">shards by verdict: {" ".join(keys)}</p>'


def _no_metrics(status: StatusDocument) -> str:
    if status.final_metrics_problem:
        return f"the merged metrics cannot be read: {status.final_metrics_problem}"
    if status.aggregation.state.startswith("DONE"):
        return "the aggregation ended DONE but wrote no metrics file (its command is not gymslurm aggregate)"
    return "not merged yet (the aggregation writes them)"


# What changes with the clock alone (ages, running walltime, ETA, when it was made): left out of the
# fingerprint, so a page whose content is otherwise the same is not rewritten (it says when it was).
# Every other field counts, a field added later included.
_CLOCK_SHARD = frozenset(
    {"heartbeat_age_s", "walltime", "walltime_used_s", "walltime_budget_s", "eta", "eta_s"}
)
_steady_cells = attrgetter(*(f.name for f in fields(ShardRow) if f.name not in _CLOCK_SHARD))


def fingerprint(data: ReportData) -> str:
    """A digest of the report's data without what moves with the clock alone (pure)."""
    status = data.status
    steady = replace(
        data,
        status=replace(
            status,
            generated_at="",
            queries=0,
            summary=replace(status.summary, walltime_used_s=0.0, eta="", eta_s=None),
            shards=[],
        ),
    )
    rows = [_steady_cells(row) for row in status.shards]  # a tuple a row: 10,000 rows in milliseconds
    return hashlib.blake2b(orjson.dumps([steady, rows]), digest_size=16).hexdigest()


def _written_fingerprint(path: Path) -> str | None:
    """The fingerprint in the head of a page written before, if any."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(1024).decode(errors="replace")
    except OSError:
        return None
    _, found, rest = head.partition('<meta name="gymslurm-data" content="')
    return rest.split('"', 1)[0] if found else None


def report_path(run: RunDir) -> Path:
    """``<run>/report.html``."""
    return run.root / REPORT_NAME


def write_report(
    run: RunDir,
    backend: Backend,
    output: Path | None = None,
    status: StatusDocument | None = None,
    *,
    chains: Sequence[list[Record]] | None = None,
    keep_unchanged: bool = False,
) -> Path:
    """Read the run, render the page and replace ``report.html`` atomically; returns its path.

    ``status`` is a status document just made (``gymslurm status``, ``submit --wait``), so the page
    costs no second scheduler query; ``chains`` the records it was made from. ``keep_unchanged``:
    leave a page whose data differs only in what moves with the clock (:func:`fingerprint`).
    """
    path = output or report_path(run)
    data = report_data(run, backend, status, chains)
    digest = fingerprint(data)
    if keep_unchanged and _written_fingerprint(path) == digest:
        return path  # the same page but for the clock: 10,000 shards render in a fraction of a second
    atomic_write(path, render(data, digest=digest).encode())
    if output is None and run.read_info().report_share == "group":
        share_with_group(run, path)
    return path


def share_with_group(run: RunDir, page: Path) -> None:
    """``report.share: group``: the page 0640, the run folder 0710 (traversable, not listable)."""
    page.chmod(0o640)
    run.root.chmod(0o710)


def refresh_report(
    run: RunDir, backend: Backend, status: StatusDocument, chains: Sequence[list[Record]] | None = None
) -> Path | None:
    """Rewrite ``report.html`` from a status document, best effort: a view never fails a command.

    The login-side commands that look at one run (``status``, ``submit --wait``) keep the page
    current; no job renders it, so a link never queries the scheduler for the whole run.
    """
    try:
        return write_report(run, backend, status=status, chains=chains, keep_unchanged=True)
    except Exception as error:  # the report is a view; the ledgers hold the truth
        print(f"gymslurm: could not rewrite {report_path(run)}: {error}", file=sys.stderr)
        return None
