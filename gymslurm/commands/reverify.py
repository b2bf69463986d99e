"""``gymslurm reverify --judge-failed-only``: re-grade saved judge-failed answers into a new output.

Exit codes: 0 something was re-judged (see the summary), 1 nothing was eligible (the message says
why; never a silent "nothing to re-verify"), 2 refused or unreadable input (nothing written).
With ``+require_complete=true`` (each job of ``gymslurm submit --reverify RUN``): 0 the output is
published (every eligible answer re-graded, or none eligible: the completed results carried), 1 the
judge did not answer some re-grades (nothing published; the next run asks only those), 2 refused.
Overrides may also come in ``GYMSLURM_COLLECT_OVERRIDES`` (a JSON list, as for ``collect``): the
chain passes them there, never on the command line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import cast

from gymslurm.exitcodes import ExitCode

USAGE = """usage: gymslurm reverify --judge-failed-only +input_jsonl_fpath=RUN +output_jsonl_fpath=NEW
                         +environment_server_url=URL [+request_timeout_s=60]
                         [+environment_protocol=episode|legacy_agent|legacy_reply]
                         [+require_complete=true]

Re-grade the answers saved with judge failures of a manifest-backed run, without running the agent,
into a separate output; completed results are carried through unchanged. The source run is never
written. A judge failure followed only by interruptions is re-judged in a new attempt; a newer
recorded outcome without an answer stops the reuse (with a warning). The Environment Server grades
through POST <URL>/verify (docs/aggregation.md, "Re-grading protocol"); with a legacy protocol URL is
the resources server and the body NeMo Gym's flat verify request. Interrupted? Run the same command
again: the re-grades already made are reused (<output>_reverify_progress.jsonl), not judged again.
+require_complete=true (what each job of `gymslurm submit --reverify RUN` runs): publish only once every
eligible answer is re-graded (exit 1 while the judge leaves some unanswered), the completed results
alone when none is eligible.

Docs: docs/aggregation.md. Exit codes: 0 re-judged, 1 nothing eligible (explained), 2 refused."""

KNOWN = {
    "input_jsonl_fpath": "",
    "output_jsonl_fpath": "",
    "environment_server_url": "",
    "request_timeout_s": "",
    "environment_protocol": "",
    "require_complete": "",
}


def main(argv: list[str]) -> int:
    """Run ``gymslurm reverify``; return its exit code."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE)
        return ExitCode.DONE
    from gymslurm.commands.aggregate import parse_overrides
    from gymslurm.errors import ConfigError
    from gymslurm.records import PROTOCOLS, Protocol
    from gymslurm.reverify import http_regrader, reverify_judge_failed

    flags = [arg for arg in argv if arg.startswith("--")]
    if flags != ["--judge-failed-only"]:
        raise ConfigError(
            "only `gymslurm reverify --judge-failed-only` is supported: it re-grades saved judge failures; "
            "to re-score other history, export a selected projection with `gymslurm aggregate`"
        )
    import os

    from gymslurm.process_env import SECRET_OVERRIDES_ENV
    from gymslurm.settings import secret_overrides

    given = secret_overrides()
    os.environ.pop(SECRET_OVERRIDES_ENV, None)  # read once, as collect does
    settings, plain = parse_overrides([*(a for a in argv if not a.startswith("--")), *given], KNOWN)
    missing = [
        key
        for key in ("input_jsonl_fpath", "output_jsonl_fpath", "environment_server_url")
        if not settings.get(key)
    ]
    if missing or plain:
        raise ConfigError(
            f"missing settings {['+' + m for m in missing]} or stray arguments {plain} (see --help)"
        )
    url, timeout = str(settings["environment_server_url"]), float(settings.get("request_timeout_s", 60.0))
    protocol = cast("Protocol", str(settings.get("environment_protocol") or "episode"))
    if protocol not in PROTOCOLS:
        raise ConfigError(f"+environment_protocol={protocol!r}: use one of {sorted(PROTOCOLS)}")
    from gymslurm.commands.aggregate import as_bool

    chain = as_bool(settings, "require_complete")
    report = reverify_judge_failed(
        Path(str(settings["input_jsonl_fpath"])).expanduser(),
        Path(str(settings["output_jsonl_fpath"])).expanduser(),
        lambda run_id: http_regrader(url, run_id, timeout_s=timeout, protocol=protocol),
        require_complete=chain,
    )
    for warning in report.warnings:
        print(f"gymslurm reverify: warning: {warning}", file=sys.stderr)
    if chain and report.unanswered:
        kept = report.regraded_ok + report.regrade_failed + report.regrade_omitted
        print(
            f"gymslurm reverify: the judge did not answer {report.unanswered} re-grades; nothing published "
            f"yet ({kept} re-grades kept in the journal): run again, only the unanswered ones are asked",
            file=sys.stderr,
        )
        return ExitCode.RETRY
    if chain and not report.rejudged:
        print(f"gymslurm reverify: {report.nothing_to_do_message()}", file=sys.stderr)
        print(f"carried {report.carried} completed results; output {settings['output_jsonl_fpath']}")
        return ExitCode.DONE
    if not report.rejudged:
        print(f"gymslurm reverify: {report.nothing_to_do_message()}", file=sys.stderr)
        return ExitCode.RETRY
    print(
        f"re-judged {report.rejudged} saved answers ({report.regraded_ok} graded, {report.regrade_failed} "
        f"failed again and {report.regrade_omitted} omitted, in the output's _failures.jsonl), carried "
        f"{report.carried} completed results, skipped {report.skipped}"
        f"{f', reused {report.resumed} re-grades of an interrupted run' if report.resumed else ''};"
        f" output {settings['output_jsonl_fpath']}"
    )
    return ExitCode.DONE
