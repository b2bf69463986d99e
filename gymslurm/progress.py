"""What a person watching a collection sees: a progress bar, plain progress lines, a summary table.

Why counters plus a ticker: the collection loop may save thousands of outcomes a second, and
redrawing a terminal per outcome would cost more than the outcome. The loop only bumps integers in
:class:`Counters`; a reporter samples them a few times a second (bar) or every
``progress_interval_s`` (plain lines, for batch logs that are not a TTY). Rates and ETAs are
computed from the samples, over this invocation only (cached outcomes do not inflate the rate).

Output goes to stderr so that stdout stays free for the final summary table.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from gymslurm.selection import SUCCESSFUL, Disposition


def say(stream: IO[str], message: str) -> None:
    """One line for the person running the collection, redacted by the one rule (docs/security.md)."""
    from gymslurm.identity import redact_text

    print(f"gymslurm collect: {redact_text(message)}", file=stream, flush=True)


@dataclass
class Counters:
    """Live counts of this collection; ``*_before`` are what resume found already saved."""

    total: int
    done: int = 0
    failed: int = 0
    omitted: int = 0
    in_flight: int = 0
    interrupted: int = 0  # of ``failed``: interruptions (kill_shaped), which run again and spend no budget
    done_before: int = 0
    failed_before: int = 0
    omitted_before: int = 0
    started_at: float = field(default_factory=time.monotonic)

    def tally(self, disposition: Disposition, delta: int, interrupted: bool = False) -> None:
        """Count a rollout whose selected state is ``disposition`` (``delta`` -1 takes it back);
        ``interrupted``: its failure is an interruption (counted in ``failed`` and ``interrupted``)."""
        if disposition in SUCCESSFUL:
            self.done += delta
        elif disposition is Disposition.FAILED:
            self.failed += delta
            self.interrupted += delta if interrupted else 0
        elif disposition is Disposition.OMITTED:
            self.omitted += delta

    @property
    def finished(self) -> int:
        """Rollouts whose outcome is final or saved so far (successes, failures, omissions)."""
        return self.done + self.failed + self.omitted

    @property
    def new_outcomes(self) -> int:
        """Outcomes saved by this invocation."""
        return self.finished - (self.done_before + self.failed_before + self.omitted_before)


def rate_and_eta(counters: Counters, now: float) -> tuple[float, float | None]:
    """Outcomes per second in this invocation, and seconds left at that rate (None if unknown)."""
    elapsed = max(now - counters.started_at, 1e-9)
    rate = counters.new_outcomes / elapsed
    left = max(counters.total - counters.finished, 0)
    return rate, (left / rate if rate > 0 else None)


def _eta_text(eta: float | None) -> str:
    if eta is None:
        return "--:--"
    minutes, seconds = divmod(int(eta), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes:02d}:{seconds:02d}"


def plain_line(counters: Counters, now: float) -> str:
    """One progress line for batch logs."""
    rate, eta = rate_and_eta(counters, now)
    pct = 100.0 * counters.finished / counters.total if counters.total else 100.0
    return (
        f"gymslurm collect: {counters.finished}/{counters.total} ({pct:.1f}%) "
        f"done={counters.done} failed={counters.failed} omitted={counters.omitted} "
        f"in_flight={counters.in_flight} rate={rate:.1f}/s eta={_eta_text(eta)}"
    )


class Reporter(Protocol):
    """Shows progress; ``tick`` is called a few times a second by the collector."""

    def tick(self, now: float) -> None: ...

    def close(self, now: float) -> None: ...


class SilentReporter:
    """No progress output (``progress=none``)."""

    def tick(self, now: float) -> None:
        """Nothing to show."""

    def close(self, now: float) -> None:
        """Nothing to close."""


class PlainReporter:
    """A plain line every ``interval_s`` seconds, and one at the end."""

    def __init__(self, counters: Counters, interval_s: float, stream: IO[str]) -> None:
        self.counters, self.interval_s, self.stream = counters, interval_s, stream
        self._last = counters.started_at

    def tick(self, now: float) -> None:
        """Print a line when the interval has passed."""
        if now - self._last >= self.interval_s:
            self._last = now
            print(plain_line(self.counters, now), file=self.stream, flush=True)

    def close(self, now: float) -> None:
        """Print the last line."""
        print(plain_line(self.counters, now), file=self.stream, flush=True)


class BarReporter:
    """A rich progress bar: done / failed / omitted / in flight, rate and ETA."""

    def __init__(self, counters: Counters, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

        self.counters = counters
        self._progress = Progress(
            TextColumn("[bold]collect"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[detail]}"),
            console=Console(file=stream),
            transient=False,
            auto_refresh=False,
        )
        self._task = self._progress.add_task("collect", total=counters.total, detail="")
        self._progress.start()

    def _detail(self, now: float) -> str:
        c = self.counters
        rate, eta = rate_and_eta(c, now)
        return (
            f"[green]{c.done} done[/] [red]{c.failed} failed[/] [yellow]{c.omitted} omitted[/] "
            f"{c.in_flight} in flight  {rate:,.0f}/s  ETA {_eta_text(eta)}"
        )

    def tick(self, now: float) -> None:
        """Redraw the bar from the counters."""
        self._progress.update(self._task, completed=self.counters.finished, detail=self._detail(now))
        self._progress.refresh()

    def close(self, now: float) -> None:
        """Draw the final state and stop the bar."""
        self.tick(now)
        self._progress.stop()


def make_reporter(
    mode: str, counters: Counters, interval_s: float, stream: IO[str] | None = None
) -> Reporter:
    """The reporter for ``mode`` (auto: a bar on a terminal, plain lines otherwise)."""
    out = stream or sys.stderr
    if mode == "none":
        return SilentReporter()
    if mode == "bar" or (mode == "auto" and out.isatty()):
        return BarReporter(counters, out)
    return PlainReporter(counters, interval_s, out)


SUMMARY_ROWS = (
    ("expected", "logical rollouts"),
    ("successful", "completed results"),
    ("measured", "  with a numeric reward"),
    ("masked", "  masked by the grader"),
    ("unscored", "  without a reward"),
    ("failed", "selected failures"),
    ("intentionally_omitted", "intentional omissions"),
    ("not_started", "never dispatched"),
    ("missing", "reserved, no outcome (interrupted)"),
    ("failure_budget_exhausted", "failures out of budget"),
    ("retryable", "eligible for another attempt"),
    ("attempts", "executions reserved in all"),
)


def summary_table(coverage: dict[str, Any], coverage_path: str, stream: IO[str] | None = None) -> None:
    """Print the coverage inventory as a table (rich), with the coverage file's path."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"coverage ({coverage_path})", show_header=True, header_style="bold")
    table.add_column("category")
    table.add_column("count", justify="right")
    table.add_column("meaning")
    for key, meaning in SUMMARY_ROWS:
        table.add_row(key, str(coverage.get(key, "")), meaning)
    for name, count in sorted(coverage.get("failed_by_class", {}).items()):
        table.add_row(f"failed/{name}", str(count), "selected failures of this class")
    table.add_row("complete", str(coverage.get("complete")), "every rollout has a completed result")
    Console(file=stream or sys.stdout, width=100).print(table)
