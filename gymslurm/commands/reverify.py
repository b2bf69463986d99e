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
from typing import TYPE_CHECKING, cast

from gymslurm.exitcodes import ExitCode

if TYPE_CHECKING:
    from gymslurm.records import Protocol

USAGE = """usage: gymslurm reverify --judge-failed-only +input_jsonl_fpath=RUN +output_jsonl_fpath=NEW
                         (+environment_server_url=URL | +head_server.host=H +head_server.port=P
                          [+environment_routing_mode=legacy] +environment_server_name=NAME)
                         [+request_timeout_s=60]
                         [+environment_protocol=episode|legacy_agent|legacy_reply]
                         [+require_complete=true]

Re-grade the answers saved with judge failures of a manifest-backed run, without running the agent,
into a separate output; completed results are carried through unchanged. The source run is never
written. A judge failure followed only by interruptions is re-judged in a new attempt; a newer
recorded outcome without an answer stops the reuse (with a warning). The Environment Server grades
through POST <URL>/verify (docs/aggregation.md, "Re-grading protocol"); with a legacy protocol URL is
the resources server and the body NeMo Gym's flat verify request. NeMo Gym's spelling names the
server instead (as collect takes it): a typed server is asked itself, a legacy one through its
resources server, each found in the head server's configuration, the protocol from its type.
Interrupted? Run the same command again: the re-grades already made are reused
(<output>_reverify_progress.jsonl), not judged again.
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
    # NeMo Gym's spelling, as collect takes it: the server by name, found through the head server
    "environment_server_name": "",
    "environment_routing_mode": "",
    "head_server_url": "",
    "head_server.host": "",
    "head_server.port": "",
}


def _grader(settings: dict[str, object], explicit: Protocol | None) -> tuple[str, Protocol]:
    """The URL and body re-grades go with: ``+environment_server_url``, or the server NeMo Gym names
    (``+environment_server_name`` through the head server, as ``collect`` finds it: collector/routing.py)."""
    from gymslurm.errors import ConfigError

    if settings.get("environment_server_url"):
        if settings.get("environment_server_name"):
            raise ConfigError(
                "both +environment_server_url and +environment_server_name name the grader: keep one"
            )
        return str(settings["environment_server_url"]).rstrip("/"), explicit or "episode"
    from urllib.parse import urlsplit

    from gymslurm.collector.routing import grader_by_name
    from gymslurm.dispatch import fetch_environment_config
    from gymslurm.settings import head_server_url

    block = {k.split(".")[1]: settings[k] for k in ("head_server.host", "head_server.port") if k in settings}
    try:
        head = str(settings.get("head_server_url") or "") or head_server_url(block or None)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    head = head or "http://127.0.0.1:11000"  # NeMo Gym's default head server, as collect assumes
    host = urlsplit(head).hostname or "127.0.0.1"
    name = str(settings["environment_server_name"])
    return grader_by_name(fetch_environment_config(head), name, host, explicit)


def main(argv: list[str]) -> int:
    """Run ``gymslurm reverify``; return its exit code."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE)
        return ExitCode.DONE
    from gymslurm.commands.aggregate import parse_overrides
    from gymslurm.errors import ConfigError
    from gymslurm.records import PROTOCOLS
    from gymslurm.reverify import http_regrader, reverify_judge_failed

    flags = [arg for arg in argv if arg.startswith("--")]
    if flags != ["--judge-failed-only"]:
        raise ConfigError(
            "only `gymslurm reverify --judge-failed-only` is supported: it re-grades saved judge failures; "
            "to re-score other history, export a selected projection with `gymslurm aggregate`"
        )
    import os

    from gymslurm.commands.overrides import secret_overrides
    from gymslurm.process_env import SECRET_OVERRIDES_ENV

    given = secret_overrides()
    os.environ.pop(SECRET_OVERRIDES_ENV, None)  # read once, as collect does
    settings, plain = parse_overrides([*(a for a in argv if not a.startswith("--")), *given], KNOWN)
    missing = [key for key in ("input_jsonl_fpath", "output_jsonl_fpath") if not settings.get(key)]
    if not (settings.get("environment_server_url") or settings.get("environment_server_name")):
        missing.append("environment_server_url (or NeMo Gym's +environment_server_name=NAME)")
    if missing or plain:
        raise ConfigError(
            f"missing settings {['+' + m for m in missing]} or stray arguments {plain} (see --help)"
        )
    explicit = cast("Protocol | None", settings.get("environment_protocol") or None)
    if explicit is not None and explicit not in PROTOCOLS:
        raise ConfigError(f"+environment_protocol={explicit!r}: use one of {sorted(PROTOCOLS)}")
    url, protocol = _grader(settings, explicit)
    timeout = float(settings.get("request_timeout_s", 60.0))
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
