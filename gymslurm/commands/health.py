"""``gymslurm health``: failure-rate and completeness checks over a run or a merged file, standalone.

Exit codes: 0 every check passed, 1 a check failed, 3 skipped (the file holds superseded outcomes;
the message says how to export a selected projection with ``gymslurm aggregate``), 2 an error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gymslurm.exitcodes import HealthExit

if TYPE_CHECKING:
    from gymslurm.health import HealthReport

USAGE = """usage: gymslurm health PATH [OVERRIDE...]

Check a run (its selected history) or a merged file: failure rate (final failures over finished
rollouts; omissions never count) and completeness. Writes <stem>_health.json beside PATH unless a
collector holds the run's lock (then it only prints).

  +max_failure_rate=0.1      the failure-rate limit
  +min_completeness=1.0      the completeness a healthy run reaches
  +write_report=false        print only

Docs: docs/health.md. Exit codes: 0 pass, 1 a check failed, 3 skipped (superseded outcomes), 2 error."""

KNOWN = {"max_failure_rate": "", "min_completeness": "", "write_report": "", "output_jsonl_fpath": ""}


def main(argv: list[str]) -> int:
    """Run ``gymslurm health``; return its exit code."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE)
        return 0
    from gymslurm.clock import utc_now
    from gymslurm.commands.aggregate import as_bool, parse_overrides
    from gymslurm.errors import ConfigError
    from gymslurm.health import HealthThresholds, run_health_check

    settings, plain = parse_overrides(argv, KNOWN)
    targets = plain + ([str(settings["output_jsonl_fpath"])] if settings.get("output_jsonl_fpath") else [])
    if len(targets) != 1:
        raise ConfigError("pass exactly one run output or merged file to check (see --help)")
    try:
        thresholds = HealthThresholds(
            max_failure_rate=float(settings.get("max_failure_rate", 0.1)),
            min_completeness=float(settings.get("min_completeness", 1.0)),
        )
    except ValueError as error:
        raise ConfigError(f"a health limit is not a number: {error}") from None
    target = Path(targets[0]).expanduser()
    report = run_health_check(target, thresholds=thresholds, standalone=True)
    if report.status == "skipped":
        print(report.message, file=sys.stderr)
        return HealthExit.SKIPPED
    for check in report.checks:
        mark = "ok  " if check["passed"] else "FAIL"
        print(f"{mark} {check['name']}: {check['value']:.4f} (limit {check['limit']}) — {check['detail']}")
    for name, messages in report.failure_examples.items():
        print(f"     {name}: e.g. {messages[0]}")
    if as_bool(settings, "write_report", True):
        _write(target, report, utc_now())
    return HealthExit.PASS if report.status == "pass" else HealthExit.FAIL


def _write(target: Path, report: HealthReport, written_at: str) -> None:
    from gymslurm.errors import RunLockedError
    from gymslurm.health import write_report
    from gymslurm.store import RunLock, RunPaths

    paths = RunPaths.for_output(target)
    if not paths.manifest.exists():
        print(f"report: {write_report(target, report, written_at)}")
        return
    try:
        with RunLock(paths.lock):
            print(f"report: {write_report(target, report, written_at)}")
    except RunLockedError as error:
        print(f"report not written: a collector holds the run ({error})", file=sys.stderr)
