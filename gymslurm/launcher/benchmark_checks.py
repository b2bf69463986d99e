"""Checks of a benchmark's values that a job would otherwise fail on, made at submit. Pure.

A variable name with ``=`` (or empty) cannot be passed to a process; an override outside Hydra's
grammar fails the collector in every job, naming ``inputs/shard-000.jsonl``'s job instead of the
benchmark. Both are refused by ``launcher/settings.py`` when the benchmark is validated.
"""

from __future__ import annotations

import re

from gymslurm.launcher.server_refs import SERVER_REFERENCE
from gymslurm.redaction import redact_text


def env_name_problem(env: dict[str, str], where: str) -> str | None:
    """Why a variable name of ``env`` cannot be one (empty, ``=`` or a NUL in it), or None. Pure."""
    for name in env:
        if not name or "=" in name or "\0" in name:
            return (
                f"{where}: {name!r} cannot name an environment variable (empty, or holding '=' or a NUL); "
                "use a name such as API_KEY"
            )
    return None


def override_grammar_problem(overrides: list[str], where: str) -> str | None:
    """Why an override is not Hydra's grammar (the collector would fail on it in every job), or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for index, item in enumerate(overrides):
        try:  # a server reference is replaced in the job by what it names: check the override as it will be
            parser.parse_overrides([SERVER_REFERENCE.sub(_as_in_the_job, item)])
        except HydraException as error:
            first = (str(error).strip().splitlines() or ["a grammar error"])[0]
            return (
                f"{where}[{index}] {redact_text(item)!r} is not a Hydra override ({redact_text(first)}); "
                "write key=value, +key=value or ~key, and quote a value with spaces or special characters"
            )
    return None


def _as_in_the_job(reference: re.Match[str]) -> str:
    """What a ``{servers.NAME.FIELD}`` reference stands for in a job: a value of the field's shape."""
    return {"host": "127.0.0.1", "port": "1"}.get(reference.group(2), "http://127.0.0.1:1/metrics")
