"""A watch's files: ``watch.json`` (what it watches, written once) and ``ledger.jsonl`` (append-only).

A watch folder is ``<run_root>/watches/<name>/``. Its ledger maps each checkpoint (its digest) to
what was done for it: ``claimed``, ``converting``/``converted``/``convert_failed``, ``submitted``
(the suite run), ``compared`` (with the comparison's summary); and ``tick`` (a watch job ran),
``scheduled`` (the next tick job queued) and ``cancelled``. One writer at a time: every tick holds
``watch.lock`` from its first read to its last append (:meth:`WatchFolder.lock`), so two watch
jobs racing never both claim a checkpoint: the second one reads the first one's claim (check, then
append, under one lock). Each append is one ``write`` of a whole line followed by ``fsync``; a torn
last line (a job killed mid-write) is cut before the next append. Versions: formats.py's
``watch`` and ``watch_ledger``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gymslurm.clock import utc_now_ms
from gymslurm.errors import ConfigError, CorruptRecordError, ManifestError
from gymslurm.formats import check_version, version_of, versioned_object
from gymslurm.store.atomic import open_run_file, publish_bytes
from gymslurm.store.flock import locked
from gymslurm.store.jsonl import Appender, iter_records, repair_torn_tail

WATCHES = "watches"
RecordKind = Literal[
    "claimed",
    "converting",
    "converted",
    "convert_failed",
    "submitted",
    "compared",
    "tick",
    "scheduled",
    "cancelled",
]


class WatchSettings(BaseModel):
    """``watch.json``: what a watch looks at and what it does with each checkpoint (version 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: int
    name: str
    source: str  # a folder (its children are the candidates) or a glob
    suite: str  # the suite file, resolved at creation
    overrides: list[str] = []
    every_s: int
    mode: Literal["marker", "pattern", "settle"]
    pattern: str = "*"
    marker: str = "READY"
    settle_s: float = 120.0
    backend: Literal["slurm", "local"]
    workdir: str
    run_root: str
    interpreter: str
    convert: list[str] | None = None  # argv with {checkpoint} and {output}; None: no conversion
    gate_policy: str | None = None
    slurm_directives: list[str] = []


class WatchRecord(BaseModel):
    """One line of a watch's ledger."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: int
    kind: RecordKind
    at: str
    digest: str | None = None
    checkpoint: str | None = None
    run: str | None = None
    job: str | None = None
    reason: str | None = None
    result: dict[str, Any] | None = None


def record(kind: RecordKind, **fields: Any) -> WatchRecord:
    """A new ledger record of this version, stamped now."""
    return WatchRecord(v=version_of("watch_ledger"), kind=kind, at=utc_now_ms(), **fields)


class WatchFolder:
    """One watch's folder and its files; the only reader and writer of them."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def name(self) -> str:
        """The watch's name (its folder's)."""
        return self.root.name

    settings_path = property(lambda self: self.root / "watch.json")
    ledger_path = property(lambda self: self.root / "ledger.jsonl")
    lock_path = property(lambda self: self.root / "watch.lock")
    scripts = property(lambda self: self.root / "scripts")
    logs = property(lambda self: self.root / "logs")
    suites = property(lambda self: self.root / "suites")
    local_dir = property(lambda self: self.root / "local")

    def create(self, settings: WatchSettings) -> None:
        """Make the folder (0700, refused when taken) and write ``watch.json``."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.root.mkdir(mode=0o700)
        except FileExistsError:
            raise ConfigError(
                f"a watch named {self.name!r} exists already ({self.root}): see it with 'gymslurm status "
                f"{self.name}', stop it with 'gymslurm cancel {self.name}', or choose another --name"
            ) from None
        for folder in (self.scripts, self.logs, self.suites):
            folder.mkdir(mode=0o700)
        publish_bytes(self.settings_path, settings.model_dump_json(indent=2).encode())

    def read_settings(self) -> WatchSettings:
        """``watch.json``, version-checked and validated."""
        try:
            raw = self.settings_path.read_bytes()
        except FileNotFoundError:
            raise ConfigError(f"{self.root} is not a watch: it has no watch.json") from None
        data = versioned_object(raw, "watch", str(self.settings_path), ManifestError)
        try:
            return WatchSettings.model_validate(data)
        except ValidationError as error:
            raise CorruptRecordError(f"{self.settings_path}: {error}") from None

    def read(self) -> list[dict[str, Any]]:
        """Every complete ledger record, validated (a torn last line is not a record yet)."""
        records = []
        for line, raw in iter_records(self.ledger_path):
            where = f"{self.ledger_path}, line {line + 1}"
            check_version("watch_ledger", raw.get("v"), where, CorruptRecordError)
            try:
                records.append(WatchRecord.model_validate(raw).model_dump(exclude_none=True))
            except ValidationError as error:
                raise CorruptRecordError(f"{where}: {error}") from None
        return records

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the watch's lock: the one writer of its ledger for the ``with`` block."""
        with locked(self.lock_path):
            yield

    def append(self, *entries: WatchRecord) -> None:
        """Append whole records, durable before this returns; call it holding :meth:`lock`."""
        repair_torn_tail(self.ledger_path)
        appender = Appender(self.ledger_path, 0)
        try:
            for entry in entries:
                appender.append(entry.model_dump(exclude_none=True))
        finally:
            appender.close()
        fd = open_run_file(self.ledger_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def watch_root(run_root: Path) -> Path:
    """Where a run root's watches live."""
    return run_root / WATCHES


def find_watch(ref: str, run_root: Path) -> WatchFolder | None:
    """The watch given as a folder or as a name under ``<run_root>/watches``, or None."""
    for candidate in (Path(ref), watch_root(run_root) / ref):
        if (candidate / "watch.json").is_file():
            return WatchFolder(candidate.resolve())
    return None
