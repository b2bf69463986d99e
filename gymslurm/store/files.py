"""A run's JSON companions: one reader of a JSON object with a format version, and the files read with it.

Every such file is read the same way (:func:`read_json_object`): absent is None; unreadable, not JSON,
not an object, or (for a versioned kind) another format version is a :class:`ManifestError` that names
the file and says what to do — the version is checked before any field is read (``formats.py``).
The manifest (``manifest.py``), the saved identity, the coverage snapshot and gymslurm's metrics go
through it. NeMo Gym's ``<stem>_aggregate_metrics.json`` is NeMo Gym's format (a list of per-server
entries, no version field): :func:`read_aggregate_metrics` reads it into typed entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from gymslurm.coverage import Coverage
from gymslurm.errors import ManifestError
from gymslurm.formats import check_version, json_object, version_of
from gymslurm.store.atomic import publish_json
from gymslurm.store.paths import RunPaths

# NeMo Gym's stamps in an aggregate-metrics entry (gymslurm.nemogym writes them).
_SERVER_KEY, _AGENT_KEY = "_ng_environment_server", "agent_ref"


def read_json_object(path: Path, what: str, remedy: str, kind: str | None = None) -> dict[str, Any] | None:
    """The JSON object at ``path`` (``kind``: its format version checked first); None when absent.

    ``what`` names the file in messages ("the coverage file"), ``remedy`` says what to do.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ManifestError(f"cannot read {what} {path}: {error.strerror}; check permissions") from None
    return parse_json_object(path, raw, what, remedy, kind)


def parse_json_object(
    path: Path, raw: bytes, what: str, remedy: str, kind: str | None = None
) -> dict[str, Any]:
    """:func:`read_json_object` for bytes already read."""
    data = json_object(raw, f"{what} {path}", ManifestError, remedy)
    if kind is not None:
        check_version(kind, data.get("format_version"), str(path), ManifestError)
    return data


def validation_problems(error: ValidationError) -> str:
    """A pydantic error as ``field: message; …`` for a ManifestError."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in error.errors())


_COVERAGE_REMEDY = "the collector rewrites it on its next run"


def read_coverage(paths: RunPaths) -> Coverage | None:
    """``<stem>_coverage.json``, version-checked and validated; None when none was written yet.

    The one reader of the collector's coverage: the chain and ``status`` read it through here, so
    collector and launcher cannot drift apart.
    """
    where = paths.coverage
    data = read_json_object(where, "the coverage file", _COVERAGE_REMEDY, "coverage")
    if data is None:
        return None
    try:
        return Coverage.model_validate(data)
    except ValidationError as error:
        raise ManifestError(
            f"the coverage file {where} is malformed ({validation_problems(error)}); {_COVERAGE_REMEDY}"
        ) from None


def write_coverage(paths: RunPaths, coverage: Coverage) -> None:
    """Replace ``<stem>_coverage.json`` atomically (the one writer; :func:`read_coverage` reads it)."""
    publish_json(paths.coverage, coverage.model_dump(mode="json"))


def read_gymslurm_metrics(path: Path) -> dict[str, Any] | None:
    """gymslurm's metrics file, version-checked first; None when none was written yet."""
    return read_json_object(path, "the metrics file", "the next collection rewrites it", "gymslurm_metrics")


def write_gymslurm_metrics(path: Path, metrics: Mapping[str, Any]) -> None:
    """Replace gymslurm's metrics file (collector and aggregate alike), stamped with its format version."""
    publish_json(path, {"format_version": version_of("gymslurm_metrics"), **metrics})


@dataclass(frozen=True)
class MetricsEntry:
    """One entry of NeMo Gym's ``<stem>_aggregate_metrics.json``: one Environment Server's metrics."""

    server: str  # the Environment Server's name (a URL, redacted, when its name is unknown)
    agent: str
    agent_metrics: dict[str, Any]
    key_metrics: dict[str, Any]
    note: str | None = None  # gymslurm's note when these are its own metrics (no server answered)


def read_aggregate_metrics(paths: RunPaths) -> list[MetricsEntry] | None:
    """NeMo Gym's aggregate metrics of a run or merged output; None when none were written yet.

    The file is a JSON list with one object per Environment Server (``nemogym.metrics_entry``); a
    file of another shape is a :class:`ManifestError` naming it.
    """
    where, remedy = paths.aggregate_metrics, "the next collection or aggregation rewrites it"
    try:
        data: Any = orjson.loads(where.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as error:
        raise ManifestError(f"cannot read the aggregate metrics {where} ({error}); {remedy}") from None
    if not isinstance(data, list) or not all(isinstance(entry, dict) for entry in data):
        raise ManifestError(f"the aggregate metrics {where} are not a list of objects (NeMo Gym's); {remedy}")
    return [_entry(where, entry, remedy) for entry in data]


def _entry(where: Path, entry: dict[str, Any], remedy: str) -> MetricsEntry:
    agent = entry.get(_AGENT_KEY)
    agent_name = agent.get("name") if isinstance(agent, dict) else None
    server = entry.get(_SERVER_KEY)
    metrics, key = entry.get("agent_metrics", {}), entry.get("key_metrics", {})
    if not isinstance(server, str) or not isinstance(metrics, dict) or not isinstance(key, dict):
        raise ManifestError(
            f"an entry of the aggregate metrics {where} has no {_SERVER_KEY} name or no agent_metrics "
            f"object; {remedy}"
        )
    note = entry.get("gymslurm_note")
    return MetricsEntry(
        server,
        agent_name if isinstance(agent_name, str) else server,
        metrics,
        key,
        note if isinstance(note, str) else None,
    )


def read_resubmit_offset(paths: RunPaths) -> tuple[int, int]:
    """``(failure lines, result lines)`` excluded from the current budget; ``(0, 0)`` when absent."""
    try:
        text = paths.resubmit_offset.read_text()
    except FileNotFoundError:
        return 0, 0
    values = text.split()
    try:
        parsed = [int(value) for value in values[:2]]
    except ValueError:
        parsed = [-1]
    if not 1 <= len(values) <= 2 or min(parsed) < 0:
        raise ManifestError(
            f"{paths.resubmit_offset} must hold one or two non-negative line counts, found {text[:80]!r}; "
            "restore it from a backup, or delete it to count every saved failure against the budget"
        )
    return parsed[0], parsed[1] if len(parsed) > 1 else 0
