"""The report's pictures as inline SVG (pure: data in, markup out; no script, no outside file).

Three charts, drawn from the links of every chain (launcher/links.py) and the merged run's reward
histogram, each an ``<svg>`` with a ``<title>`` on every mark so a pointer shows the figure:

- ``chart-coverage``: rollouts with an outcome over time (every shard together), with the rate
  (outcomes per second of every link running at that moment) below it, and a mark at each
  interruption, coloured by kind;
- ``chart-gpu``: allocated GPU-hours over time, and the budget as a line when one is set;
- ``chart-rewards``: one small histogram per taskset;
- ``chart-compare`` (``gymslurm compare --html``): per benchmark, the candidate's difference from the
  baseline as a dot on its interval, beside a line at 0.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from typing import Any

from gymslurm.launcher.links import iso_epoch
from gymslurm.launcher.views.document import ShardTimeline

W, H, PAD = 640, 150, 34
KIND_COLOURS = {
    "requeued": "#6a1b9a",
    "node_failure": "#b71c1c",
    "preempted": "#ef6c00",
    "time_limit": "#1565c0",
    "cancelled": "#5d4037",
    "crashed": "#c62828",
    "lost": "#616161",
}


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _spans(shards: Sequence[ShardTimeline], now: float) -> list[dict[str, Any]]:
    """Every link with a start as numbers: start, end, outcomes before and after, GPUs, kind."""
    out = []
    for shard in shards:
        for link in shard.links:
            start = iso_epoch(link.get("start"))
            if start is None:
                continue
            end = iso_epoch(link.get("end")) or now
            out.append(
                {
                    "shard": shard.shard,
                    "start": start,
                    "end": max(end, start),
                    "before": link.get("outcomes_before"),
                    "after": link.get("outcomes_after"),
                    "gpus": link.get("gpus") or 0,
                    "kind": link.get("interruption"),
                    "job": link.get("job"),
                }
            )
    return out


def coverage_series(shards: Sequence[ShardTimeline], now: float) -> list[tuple[float, int]]:
    """(time, outcomes of every shard) at each link's start and end: a shard counts its latest known."""
    events: list[tuple[float, int, int]] = []
    for span in _spans(shards, now):
        if span["before"] is not None:
            events.append((span["start"], span["shard"], int(span["before"])))
        if span["after"] is not None:
            events.append((span["end"], span["shard"], int(span["after"])))
    latest: dict[int, int] = {}
    series, total = [], 0
    for at, shard, outcomes in sorted(events):  # a running total: a sum per event is quadratic
        known = latest.get(shard, 0)
        latest[shard] = max(outcomes, known)
        total += latest[shard] - known
        series.append((at, total))
    return series


def rate_series(shards: Sequence[ShardTimeline], now: float) -> list[tuple[float, float, float]]:
    """(from, to, outcomes/s of every link running then), between consecutive link starts and ends."""
    spans = [s for s in _spans(shards, now) if s["before"] is not None and s["after"] is not None]
    cuts = sorted({t for s in spans for t in (s["start"], s["end"])})
    # One sweep: a span covers the interval between two consecutive cuts exactly when it starts at or
    # before the left one and ends after it (its end is itself a cut). A sum over every span per
    # interval is quadratic: 10,000 shards' links would be billions of terms.
    changes: dict[float, float] = {}
    for s in spans:
        if s["end"] > s["start"]:
            rate = (s["after"] - s["before"]) / max(s["end"] - s["start"], 1e-9)
            changes[s["start"]] = changes.get(s["start"], 0.0) + rate
            changes[s["end"]] = changes.get(s["end"], 0.0) - rate
    out, running = [], 0.0
    for left, right in itertools.pairwise(cuts):
        running += changes.get(left, 0.0)
        out.append((left, right, max(running, 0.0) if abs(running) > 1e-9 else 0.0))
    return out


def gpu_series(shards: Sequence[ShardTimeline], now: float, points: int = 60) -> list[tuple[float, float]]:
    """(time, GPU-hours allocated until then), sampled evenly from the first start to the last end."""
    spans = _spans(shards, now)
    if not spans:
        return []
    t0, t1 = min(s["start"] for s in spans), max(s["end"] for s in spans)
    times = sorted({t0, t1, *(t0 + (t1 - t0) * i / points for i in range(points))})
    # One sweep, not a sum over every span per point (10,000 shards' links × 61 points): at time t
    # the spans begun hold g·(t − start), less g·(t − end) for those ended.
    starts = sorted((s["start"], s["gpus"]) for s in spans if s["gpus"])
    ends = sorted((max(s["end"], s["start"]), s["gpus"]) for s in spans if s["gpus"])
    out, i, j, g_started, gs_started, g_ended, gs_ended = [], 0, 0, 0.0, 0.0, 0.0, 0.0
    for t in times:
        while i < len(starts) and starts[i][0] <= t:
            at, gpus = starts[i]
            g_started, gs_started, i = g_started + gpus, gs_started + gpus * at, i + 1
        while j < len(ends) and ends[j][0] <= t:
            at, gpus = ends[j]
            g_ended, gs_ended, j = g_ended + gpus, gs_ended + gpus * at, j + 1
        out.append((t, ((g_started * t - gs_started) - (g_ended * t - gs_ended)) / 3600.0))
    return out


def _x(t: float, t0: float, t1: float) -> float:
    return PAD + (W - 2 * PAD) * (t - t0) / max(t1 - t0, 1e-9)


def _y(v: float, top: float, height: float = H) -> float:
    return height - PAD + (2 * PAD / 3 - height + PAD) * (v / top if top else 0.0)


def _frame(chart_id: str, title: str, body: str, height: float = H) -> str:
    return (
        f'<svg id="{chart_id}" class="chart" viewBox="0 0 {W} {height:.0f}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{_e(title)}</title>'
        f'<line x1="{PAD}" y1="{height - PAD}" x2="{W - PAD}" y2="{height - PAD}" stroke="#999"/>'
        f'<line x1="{PAD}" y1="{PAD / 2}" x2="{PAD}" y2="{height - PAD}" stroke="#999"/>{body}</svg>'
    )


def _label(x: float, y: float, text: str, anchor: str = "start") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="10" text-anchor="{anchor}" fill="#444">{_e(text)}</text>'
    )


def coverage_chart(shards: Sequence[ShardTimeline], expected: int, now: float) -> str:
    """Outcomes over time with interruption marks, and the rate below (docstring above)."""
    series, spans = coverage_series(shards, now), _spans(shards, now)
    if not series:
        return '<p id="chart-coverage">no link has reported coverage yet</p>'
    t0, t1 = min(s["start"] for s in spans), max(*(s["end"] for s in spans), series[-1][0])
    top = max(expected, *(v for _, v in series), 1)
    points = " ".join(f"{_x(t, t0, t1):.1f},{_y(v, top):.1f}" for t, v in series)
    marks = []
    for span in spans:
        if span["kind"]:
            x = _x(span["end"], t0, t1)
            colour = KIND_COLOURS.get(span["kind"], "#000")
            marks.append(
                f'<line class="interruption" x1="{x:.1f}" y1="{PAD / 2}" x2="{x:.1f}" y2="{H - PAD}" '
                f'stroke="{colour}" stroke-dasharray="3,2"><title>{_e(span["kind"])}: job '
                f"{_e(span['job'])} (shard {span['shard']})</title></line>"
            )
    body = (
        f'<polyline fill="none" stroke="#2e7d32" stroke-width="2" points="{points}">'
        f"<title>{series[-1][1]} of {expected} rollouts have an outcome</title></polyline>"
        + "".join(marks)
        + _label(PAD - 4, _y(top, top) + 4, str(top), "end")
        + _label(PAD - 4, H - PAD, "0", "end")
        + _label(W - PAD, H - PAD + 14, f"{(t1 - t0) / 60:.1f} min", "end")
        + _label(PAD, H - PAD + 14, "outcomes over time (dashed: interruptions)")
    )
    return _frame("chart-coverage", "coverage over time", body) + rate_chart(shards, now, t0, t1)


def rate_chart(shards: Sequence[ShardTimeline], now: float, t0: float, t1: float) -> str:
    """Outcomes per second of every running link, as steps over the same time axis."""
    series, height = rate_series(shards, now), 110.0
    top = max((rate for _, _, rate in series), default=0.0) or 1.0
    bars = "".join(
        f'<rect x="{_x(a, t0, t1):.1f}" y="{_y(rate, top, height):.1f}" '
        f'width="{max(_x(b, t0, t1) - _x(a, t0, t1), 0.5):.1f}" '
        f'height="{height - PAD - _y(rate, top, height):.1f}" fill="#90caf9">'
        f"<title>{rate:.2f} outcomes/s</title></rect>"
        for a, b, rate in series
    )
    body = (
        bars
        + _label(PAD - 4, _y(top, top, height) + 4, f"{top:.2g}/s", "end")
        + _label(PAD, height - PAD + 14, "rate")
    )
    return _frame("chart-rate", "rate over time", body, height)


def gpu_chart(shards: Sequence[ShardTimeline], now: float, budget: float | None) -> str:
    """Allocated GPU-hours over time, with the budget as a red line when set."""
    series = gpu_series(shards, now)
    if not series or series[-1][1] <= 0:
        return '<p id="chart-gpu">no GPU-hours recorded (slurm.gpus is 0 and Slurm allocated none)</p>'
    t0, t1 = series[0][0], series[-1][0]
    top = max(series[-1][1], budget or 0.0)
    points = " ".join(f"{_x(t, t0, t1):.1f},{_y(v, top):.1f}" for t, v in series)
    body = (
        f'<polyline fill="none" stroke="#6a1b9a" stroke-width="2" points="{points}">'
        f"<title>{series[-1][1]:.2f} GPU-hours allocated</title></polyline>"
    )
    if budget:
        y = _y(budget, top)
        body += (
            f'<line id="budget-line" x1="{PAD}" y1="{y:.1f}" x2="{W - PAD}" y2="{y:.1f}" stroke="#c62828" '
            f'stroke-dasharray="5,3"><title>budget {budget:g} GPU-hours</title></line>'
        )
    body += _label(PAD - 4, _y(top, top) + 4, f"{top:.2g}", "end") + _label(
        PAD, H - PAD + 14, "GPU-hours allocated"
    )
    return _frame("chart-gpu", "GPU-hours over time", body)


def rewards_chart(tasksets: Sequence[dict[str, Any]] | None) -> str:
    """One histogram per taskset (counts per reward bin)."""
    if not tasksets:
        return '<p id="chart-rewards">no reward distribution yet (the aggregation writes it)</p>'
    panels, width = [], 200
    for index, entry in enumerate(tasksets):
        bins, left = entry["bins"], 10 + index * (width + 10)
        top = max(bins) or 1
        bar_w = (width - 20) / max(len(bins), 1)
        for i, count in enumerate(bins):
            low = entry["low"] + (entry["high"] - entry["low"]) * i / len(bins)
            high = entry["low"] + (entry["high"] - entry["low"]) * (i + 1) / len(bins)
            h = 90 * count / top
            panels.append(
                f'<rect x="{left + 10 + i * bar_w:.1f}" y="{110 - h:.1f}" width="{bar_w - 1:.1f}" '
                f'height="{h:.1f}" fill="#ffb74d"><title>{_e(entry["taskset"])}: {count} rows with '
                f"reward in [{low:.2g}, {high:.2g}]</title></rect>"
            )
        mean = "-" if entry.get("mean") is None else f"{entry['mean']:.3f}"
        panels.append(_label(left + 10, 126, f"{entry['taskset']}: {entry['count']} rows, mean {mean}"))
    total_w = max(W, 10 + len(tasksets) * (width + 10))
    return (
        f'<svg id="chart-rewards" class="chart" viewBox="0 0 {total_w} 135" role="img" '
        'xmlns="http://www.w3.org/2000/svg"><title>reward distribution per taskset</title>'
        f"{''.join(panels)}</svg>"
    )


CHANGE_COLOURS = {"improved": "#2e7d32", "regressed": "#c62828", "no change": "#616161"}
COMPARISON_CSS = ".improved{color:#2e7d32}.regressed{color:#c62828}"  # the rows of compare's table


def flips_text(flips: dict[str, Any]) -> str:
    """A benchmark's flips in a few characters (pure): ``↓3 ↑1`` (pass → fail, fail → pass) for 0/1
    rewards, ``5 changed`` for continuous ones, empty when none could be told."""
    if flips.get("mode") == "binary":
        return f"↓{len(flips.get('pass_to_fail') or [])} ↑{len(flips.get('fail_to_pass') or [])}"
    if flips.get("mode") == "continuous":
        return f"{len(flips.get('changed') or [])} changed"
    return ""


def comparison_chart(document: dict[str, Any]) -> str:
    """Each benchmark's delta (a dot) on its interval (a bar), against a dashed line at 0; at the
    right, its flips (↓ pass → fail, ↑ fail → pass). ``document``: compare's, as JSON."""
    rows = [entry for entry in document["benchmarks"] if entry.get("interval")]
    if not rows:
        return '<p id="chart-compare">no benchmark has a task measured on both sides</p>'
    low = min(0.0, *(entry["interval"][0] for entry in rows))
    high = max(0.0, *(entry["interval"][1] for entry in rows))
    margin = max(high - low, 1e-6) * 0.1
    low, high = low - margin, high + margin
    left, lane, right = 170.0, 26.0, 70.0  # right: room for the flips
    height = PAD + lane * len(rows) + PAD + 14

    def x(value: float) -> float:
        return left + (W - left - right) * (value - low) / (high - low)

    parts = [
        f'<line id="zero-line" x1="{x(0.0):.1f}" y1="{PAD / 2}" x2="{x(0.0):.1f}" y2="{height - PAD}" '
        'stroke="#999" stroke-dasharray="4,3"><title>no change</title></line>'
    ]
    for index, entry in enumerate(rows):
        y = PAD + lane * index + lane / 2
        start, end = entry["interval"]
        colour = CHANGE_COLOURS.get(entry["change"], "#000")
        title = (
            f"{entry['benchmark']}: delta {entry['delta']:+.4f}, interval [{start:+.4f}, {end:+.4f}], "
            f"{entry['tasks']['paired']} paired tasks, {entry['change']}"
        )
        parts.append(
            f'<line class="interval" x1="{x(start):.1f}" y1="{y:.1f}" x2="{x(end):.1f}" y2="{y:.1f}" '
            f'stroke="{colour}" stroke-width="4"><title>{_e(title)}</title></line>'
            f'<circle class="delta" cx="{x(entry["delta"]):.1f}" cy="{y:.1f}" r="5" fill="{colour}">'
            f"<title>{_e(title)}</title></circle>"
            + _label(left - 8, y + 4, entry["benchmark"], "end")
            + f'<g class="flips">{_label(W - right + 8, y + 4, flips_text(entry.get("flips") or {}))}</g>'
        )
    parts.append(_label(x(low), height - PAD + 14, f"{low:+.3f}", "start"))
    parts.append(_label(x(0.0), PAD / 2 - 4, "0: no change", "middle"))
    parts.append(_label(left, height - PAD + 28, "candidate - baseline: the dot, its interval the bar"))
    parts.append(_label(W - right + 8, PAD / 2 - 4, "flips ↓ ↑"))
    parts.append(_label(x(high), height - PAD + 14, f"{high:+.3f}", "end"))
    return (
        f'<svg id="chart-compare" class="chart" viewBox="0 0 {W} {height:.0f}" role="img" '
        'xmlns="http://www.w3.org/2000/svg"><title>candidate minus baseline, per benchmark</title>'
        f"{''.join(parts)}</svg>"
    )
