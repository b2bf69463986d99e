"""The two small "still alive" files a running link leaves for ``status``: progress and heartbeat.

Why: ``status`` must tell the truth while a link runs, long before the link writes its decision.
Two writers leave a sign of life, each the only writer of its file, each replacing it whole
(``atomic.publish_json``) so a reader sees the previous record or the new one, never a mix:

- ``<stem>_progress.json`` beside a collector's output: the **live progress record**, written by
  the collector every ``live_progress_interval_s`` while it dispatches (and once at its start and
  end): counts by category, this invocation's rate, requests in flight and the age of the oldest.
- ``shards/NNN/heartbeat.json`` of a launcher run: the chain step's **heartbeat**, written every
  ``interval_s`` (15 s) while a link runs: which job, since when, its pid and host.

Format: the progress record is version 2, the heartbeat version 1 (``format_version``, ``formats.py``),
unknown fields rejected, read by the
store's one JSON-object reader (``files.read_json_object``: the version checked before anything else).
A reader gets ``None`` when the file does not exist yet; a file it cannot trust raises
:class:`~gymslurm.errors.ManifestError` naming it, as every other companion does.
Guarantee: a writer killed at any instant leaves the previous whole record. Not
covered: clocks that disagree between the compute node and the login node (ages are computed from
the writer's wall clock; a skew of seconds only shifts them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gymslurm.errors import ManifestError
from gymslurm.store.atomic import publish_json
from gymslurm.store.files import read_json_object, validation_problems

HEARTBEAT_S = 15.0  # how often a running chain step replaces its heartbeat


class _Live(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[1] = 1


_T = TypeVar("_T", bound=_Live)


class LiveProgress(_Live):
    """``<stem>_progress.json``: what a running collector has done so far (version 2; a version 1
    record reads with ``in_flight_s`` and ``requests`` 0: not measured)."""

    format_version: Literal[1, 2] = 2  # type: ignore[assignment]  # the heartbeat stays version 1
    written_at: str
    epoch: float = Field(description="written_at as seconds since the epoch (writer's clock)")
    job_id: str | None = None
    pid: int
    expected: int = Field(ge=0)
    successful: int = Field(ge=0)
    failed: int = Field(ge=0)
    intentionally_omitted: int = Field(ge=0)
    in_flight: int = Field(ge=0)
    interrupted: int = Field(default=0, ge=0, description="of failed: interruptions, run again for free")
    new_outcomes: int = Field(ge=0, description="outcomes saved by this invocation")
    started_epoch: float
    rate_per_s: float = Field(ge=0, description="new outcomes per second over this invocation")
    oldest_in_flight_s: float | None = Field(default=None, ge=0)
    last_outcome_age_s: float | None = Field(default=None, ge=0)
    stalled: bool = False
    ended: bool = False
    busy_s: float = Field(default=0.0, ge=0, description="seconds of this invocation with requests in flight")
    in_flight_s: float = Field(
        default=0.0, ge=0, description="summed over this invocation's requests: each one's time in flight"
    )
    requests: int = Field(default=0, ge=0, description="requests this invocation sent")

    @property
    def finished(self) -> int:
        """Rollouts with an outcome (successful, failed or omitted)."""
        return self.successful + self.failed + self.intentionally_omitted


class Heartbeat(_Live):
    """``shards/NNN/heartbeat.json``: the running link's last sign of life (version 1)."""

    job_id: str
    restart_count: int = 0
    start: str
    at: str
    epoch: float
    interval_s: float = Field(gt=0)
    pid: int
    host: str = ""
    collector_pid: int | None = None  # the link's collector once started: gymslurm inject signals it
    collector_started: float | None = None  # when it started (epoch): liveness counts from there
    collector_pids: list[int] = Field(default_factory=list)  # a suite link's: every collector it started
    stall_window_s: float | None = None  # the link ends a collector that does nothing for this long


def progress_path(output: Path) -> Path:
    """``<stem>_progress.json`` beside a collector output (docs/formats.md)."""
    from gymslurm.store.paths import COMPANION_SUFFIXES, companion_path

    return companion_path(output, COMPANION_SUFFIXES["progress"])


def write_progress(path: Path, record: LiveProgress) -> None:
    """Replace the live progress record (the collector is its only writer)."""
    publish_json(path, record.model_dump(mode="json"))


def write_heartbeat(path: Path, record: Heartbeat) -> None:
    """Replace the heartbeat (the running chain step is its only writer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    publish_json(path, record.model_dump(mode="json"))


def read_progress(path: Path) -> LiveProgress | None:
    """The live progress record at ``path``, or None when no collector wrote one yet."""
    return _read(path, LiveProgress, "the live progress record", "progress")


def read_heartbeat(path: Path) -> Heartbeat | None:
    """The heartbeat at ``path``, or None when no link wrote one yet."""
    return _read(path, Heartbeat, "the heartbeat", "heartbeat")


def _read(path: Path, model: type[_T], what: str, kind: str) -> _T | None:
    """The record at ``path`` through the store's one JSON-object reader (version first), then its model."""
    remedy = "delete it, the next writer replaces it"
    raw = read_json_object(path, what, remedy, kind)
    if raw is None:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise ManifestError(f"{what} {path} is malformed ({validation_problems(error)}); {remedy}") from None
