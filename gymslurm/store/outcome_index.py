"""``<stem>_outcome_index.bin``: what a reconcile read from a run's outcome files, keyed by those bytes.

A reconcile parses every saved row to learn each rollout's outcomes: at 1,000,000 rollouts that is
most of a resume's reading time, and every link of a chain pays it again for rows that have not
changed. The run's writer (the store that holds the run lock) leaves this file behind: the outcomes
of the first N complete lines of the results file and the failure sidecar, with the SHA-256 of those
exact bytes. A later reconcile hashes the same bytes (SHA-256 runs at more than a GB/s, several
times faster than parsing them), and only when every digest matches takes the outcomes from here and
parses what was appended since.

Content, not identity: the file is trusted only for bytes that hash the same, so an edit anywhere
in the covered part (or a copied, replaced or truncated file) makes it unused, never wrong. It is
keyed also by the run, its rollout count, and the source of the code that reads rows into outcomes
(:func:`reader_digest`), so a gymslurm whose reading differs never takes another's. A damaged,
foreign or outdated index is ignored, and the next writer replaces it. Legacy (imported) runs have
none: their rows are numbered by arrival across both files.

Layout: one JSON header line, then for the failure sidecar and the results file in that order (the
order the reader adds outcomes): ``records`` fixed-size records (:data:`RECORD`: rollout index,
execution, line, reward, flags) and a JSON array of the full fields of each record flagged
``DETAILED`` (a failure, an omission, a masked result, a reward that is not a plain number).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gymslurm.formats import version_of, version_problem
from gymslurm.redaction import scrub_bytes
from gymslurm.selection import SavedOutcome, plain, shared_reward
from gymslurm.store.atomic import publish_stream
from gymslurm.store.jsonl import TailReport
from gymslurm.store.paths import Identity, RunPaths, file_identity, file_size, own_file

Chunk = bytes | memoryview  # a part of the index as written: a view of the old one or of the log's buffers
RECORD = struct.Struct("<IIIdB")  # rollout index, execution, line, reward, flags
REWARD_NONE, REWARD_INT, DETAILED = 1, 2, 4
FILES = ("failures", "results")  # the reader's order: the sidecar first (spec 000 numbers legacy rows so)
_EXACT_INT = 2**53  # an int reward beyond this would not survive the float slot
_READ_CHUNK = 1 << 20
# The modules whose source decides what a row reads as: a change to any of them retires every index.
READER_MODULES = (
    "gymslurm.store.history",
    "gymslurm.store.jsonl",
    "gymslurm.store.outcome_index",
    "gymslurm.selection",
    "gymslurm.records",
    "gymslurm.formats",
)


@functools.cache
def reader_digest() -> str | None:
    """The digest of the source of :data:`READER_MODULES`; None when it cannot be read (no index then)."""
    digest = hashlib.sha256()
    try:
        for name in READER_MODULES:
            digest.update(inspect.getsource(importlib.import_module(name)).encode())
    except (OSError, TypeError):
        return None
    return digest.hexdigest()


@dataclass
class Section:
    """One outcome file as far as the index covers it: its bytes, their digest, and their outcomes."""

    covered_bytes: int = 0
    lines: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)
    records: bytearray = field(default_factory=bytearray)  # since the index on disk (``base``)
    details: bytearray = field(default_factory=bytearray)  # the JSON array's items, each followed by ","
    detailed: int = 0  # how many of ``records`` are DETAILED
    base: Base | None = None  # this file's records and details in the index on disk: not kept in memory

    def add(self, index: int, outcome: SavedOutcome) -> None:
        """Append one outcome's record (in file order: the order the reader adds them)."""
        reward = outcome.reward
        if type(outcome) is SavedOutcome and outcome.kind == "result":
            if reward is None:
                self.records += RECORD.pack(index, outcome.attempt, outcome.line, 0.0, REWARD_NONE)
                return
            if type(reward) is float:
                self.records += RECORD.pack(index, outcome.attempt, outcome.line, reward, 0)
                return
            if type(reward) is int and -_EXACT_INT < reward < _EXACT_INT:
                self.records += RECORD.pack(index, outcome.attempt, outcome.line, float(reward), REWARD_INT)
                return
        self.records += RECORD.pack(index, 0, 0, 0.0, DETAILED)
        self.details += orjson.dumps(outcome.fields())  # in one buffer: orjson's bytes hold 4 KB each
        self.details += b","
        self.detailed += 1

    def written(self, data: bytes) -> None:
        """Count bytes appended to the file (every one of them a complete line)."""
        self.hasher.update(data)
        self.covered_bytes += len(data)
        self.lines += data.count(b"\n")

    def header(self, records: int, details: int, detailed: int) -> dict[str, Any]:
        return {
            "bytes": self.covered_bytes,
            "lines": self.lines,
            "sha256": self.hasher.hexdigest(),
            "records": records // RECORD.size,
            "details": detailed,
            "details_bytes": details,
        }

    def payload(self, on_disk: memoryview) -> tuple[list[Chunk], list[Chunk], int]:
        """(records, details array, detailed count) as chunks, never copied whole: the base's from the
        index on disk, then the new ones."""
        records: list[Chunk] = [memoryview(self.records)]
        inner: Chunk = b""
        detailed = self.detailed
        if self.base is not None:
            records.insert(0, self.base.records(on_disk))
            inner, detailed = self.base.inner(on_disk), detailed + self.base.detailed
        new = memoryview(self.details)[:-1]
        return records, [b"[", inner, b"," if len(inner) and len(new) else b"", new, b"]"], detailed

    def rebased(self, offset: int, records: int, details: int, detailed: int) -> int:
        """Point ``base`` at this file's part of the index just written at ``offset``; the end offset."""
        self.base = Base(offset, records, offset + records, details, detailed)
        self.records, self.details, self.detailed = bytearray(), bytearray(), 0
        return offset + records + details


@dataclass(frozen=True)
class Base:
    """Where one file's records and details array sit in the index on disk."""

    records_at: int
    records_size: int
    details_at: int
    details_size: int
    detailed: int

    def records(self, data: memoryview) -> memoryview:
        return data[self.records_at : self.records_at + self.records_size]

    def inner(self, data: memoryview) -> memoryview:
        """The details array's items, without its brackets."""
        return data[self.details_at + 1 : self.details_at + self.details_size - 1]


@dataclass
class OutcomeLog:
    """What the index will hold: each file's section and the failure records among the sidecar's rows."""

    run_id: str
    rollout_count: int
    sections: dict[str, Section]
    failure_lines: int = 0
    written_as: tuple[int, int] | None = None  # the covered sizes the index on disk was written with
    on_disk: Identity = None  # the identity of the index file the sections' bases point into

    @classmethod
    def empty(cls, run_id: str, rollout_count: int) -> OutcomeLog:
        return cls(run_id, rollout_count, {name: Section() for name in FILES})

    def saved(
        self, which: str, written: bytes | None, index: int, outcome: SavedOutcome, *, failure: bool = False
    ) -> bool:
        """Add a row the writer just appended (``written``: its bytes, None when they are not the row
        as given); False when the log can no longer stand for the file (the writer drops it)."""
        if written is None:  # a learned secret was cut out: the row read back may differ
            return False
        self.sections[which].written(written)
        self.sections[which].add(index, outcome)
        self.failure_lines += failure
        return True

    def starts(self) -> dict[str, tuple[int, int]]:
        """Where each file's reading goes on: (byte offset, line number) after what is covered."""
        return {name: (part.covered_bytes, part.lines) for name, part in self.sections.items()}

    def caught_up(self, paths: RunPaths, tails: dict[str, TailReport]) -> None:
        """Cover each file up to the end of its complete lines as the reader just found them.

        The reader added the outcomes of those lines; their bytes are hashed here (from the page
        cache the read just filled), so the digest is of exactly what was parsed.
        """
        for name, part in self.sections.items():
            end = tails[name].complete_bytes
            if end > part.covered_bytes:
                if not _hash_range(part.hasher, getattr(paths, name), part.covered_bytes, end):
                    raise OSError(f"{getattr(paths, name)} shrank while it was read")
                part.covered_bytes = end
            part.lines = max(part.lines, tails[name].complete_lines)

    def covers(self, paths: RunPaths) -> bool:
        """Whether the sections cover both files exactly as they are now (nothing appended unseen)."""
        return all(file_size(getattr(paths, name)) == self.sections[name].covered_bytes for name in FILES)

    def write(self, paths: RunPaths) -> None:
        """Replace the index with this log, when it covers the files as they are and is new."""
        sizes = (self.sections["failures"].covered_bytes, self.sections["results"].covered_bytes)
        digest = reader_digest()
        if digest is None or sizes == self.written_as or not self.covers(paths):
            return
        if any(scrub_bytes(part.details) is not part.details for part in self.sections.values()):
            return  # a row saved before a secret was learned holds it: no second file gets a copy
        on_disk = memoryview(b"")
        if any(self.sections[name].base is not None for name in FILES):
            data, identity = own_file(paths.outcome_index)
            on_disk = memoryview(data)
            if identity != self.on_disk:  # not the index this log was read from: its bases are lost
                raise OSError(f"{paths.outcome_index} changed under its writer; it is written again next run")
        header = {
            "format_version": version_of("outcome_index"),
            "run_id": self.run_id,
            "rollout_count": self.rollout_count,
            "reader": digest,
            "failure_lines": self.failure_lines,
        }
        parts = {name: self.sections[name].payload(on_disk) for name in FILES}
        payload = [chunk for name in FILES for chunk in (*parts[name][0], *parts[name][1])]
        lengths = {
            name: (_size_of(parts[name][0]), _size_of(parts[name][1]), parts[name][2]) for name in FILES
        }
        try:
            for name in FILES:
                header[name] = self.sections[name].header(*lengths[name])
            header["payload_sha256"] = _digest(payload)  # a damaged index is ignored, never read as outcomes
            head = orjson.dumps(header) + b"\n"
            publish_stream(paths.outcome_index, [head, *payload])
        finally:  # a view left on the log's buffers would stop the next save from growing them
            for chunk in payload:
                if isinstance(chunk, memoryview):
                    chunk.release()
        self.written_as, self.on_disk, offset = sizes, file_identity(paths.outcome_index), len(head)
        for name in FILES:  # what was written is read back from the file, not kept in memory
            offset = self.sections[name].rebased(offset, *lengths[name])


@dataclass
class IndexRead:
    """An index whose covered bytes still hash as written: the log to go on from, and its outcomes."""

    log: OutcomeLog  # where each file goes on, and where its indexed outcomes sit in the index file
    blocks: dict[str, tuple[memoryview, list[Any]]]  # per file: its records, its details

    def add_to(self, groups: list[Any], name: str) -> None:
        """Put the outcomes indexed of file ``name`` into ``groups`` as the reader would have.

        Called for the sidecar, whose newer rows are then read, then for the results file: the
        order of a full read, which a rollout's outcomes keep."""
        shared: dict[float, float] = {}
        names: dict[str, str] = {}
        records, details = self.blocks.pop(name)  # the index's bytes are freed once both are in
        fields = iter(details)
        for index, attempt, line, reward, flags in RECORD.iter_unpack(records):
            if flags & DETAILED:  # its names shared, as the reader shares them (one string per name)
                values: list[Any] = [names.setdefault(v, v) if type(v) is str else v for v in next(fields)]
                outcome = SavedOutcome(*values)
            else:
                outcome = plain(SavedOutcome)
                outcome.attempt, outcome.kind, outcome.line = attempt, "result", line
                if flags & REWARD_NONE:
                    outcome.reward = None
                elif flags & REWARD_INT:
                    outcome.reward = int(reward)
                else:
                    outcome.reward = shared_reward(shared, reward)  # as the reader shares them
            group = groups[index]
            if group is None:
                groups[index] = outcome
            elif type(group) is list:
                group.append(outcome)
            else:
                groups[index] = [group, outcome]


def read_index(paths: RunPaths, run_id: str, rollout_count: int) -> IndexRead | None:
    """The run's index when it can be used as written (module docstring), else None; never an error.

    Its log keeps where each file's records and details sit in the index file (``Section.base``), not
    their bytes: a writer reads them back from that file when it writes the next index."""
    try:
        data, identity = own_file(paths.outcome_index)
        offset = data.index(b"\n") + 1
        header = orjson.loads(data[:offset])
        if (
            not _usable(header, run_id, rollout_count)
            or _digest([memoryview(data)[offset:]]) != header["payload_sha256"]
        ):
            return None
        sections, blocks = {}, {}
        for name in FILES:
            part = header[name]
            size, details_size = part["records"] * RECORD.size, part["details_bytes"]
            records = memoryview(data)[offset : offset + size]
            raw_details = data[offset + size : offset + size + details_size]
            details = orjson.loads(raw_details)
            offset += size + details_size
            if len(records) != size or type(details) is not list or len(details) != part["details"]:
                return None
            hasher = _prefix_hasher(getattr(paths, name), part["bytes"], part["sha256"])
            if hasher is None:
                return None
            base = Base(offset - size - details_size, size, offset - details_size, details_size, len(details))
            sections[name] = Section(part["bytes"], part["lines"], hasher, base=base)
            blocks[name] = (records, details)
    except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        return None
    if offset != len(data):
        return None
    written = (sections["failures"].covered_bytes, sections["results"].covered_bytes)
    log = OutcomeLog(run_id, rollout_count, sections, header["failure_lines"], written, identity)
    return IndexRead(log, blocks)


def _usable(header: Any, run_id: str, rollout_count: int) -> bool:
    return (
        type(header) is dict
        and version_problem("outcome_index", header.get("format_version")) is None
        and header.get("run_id") == run_id
        and header.get("rollout_count") == rollout_count
        and header.get("reader") is not None
        and header.get("reader") == reader_digest()
        and type(header.get("failure_lines")) is int
        and type(header.get("payload_sha256")) is str
        and all(_section_usable(header.get(name)) for name in FILES)
    )


def _size_of(chunks: list[Chunk]) -> int:
    return sum(len(chunk) for chunk in chunks)


def _digest(parts: list[Chunk]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def _section_usable(part: Any) -> bool:
    keys = ("bytes", "lines", "records", "details", "details_bytes")
    return (
        type(part) is dict
        and all(type(part.get(key)) is int and part[key] >= 0 for key in keys)
        and type(part.get("sha256")) is str
    )


def _prefix_hasher(path: Path, size: int, expected: str) -> Any:
    """A SHA-256 fed the first ``size`` bytes of ``path`` when they hash to ``expected``, else None."""
    hasher = hashlib.sha256()
    if not _hash_range(hasher, path, 0, size) or hasher.hexdigest() != expected:
        return None
    return hasher


def _hash_range(hasher: Any, path: Path, start: int, end: int) -> bool:
    """Feed bytes ``start``..``end`` of ``path`` to ``hasher``; False when the file has fewer."""
    if end <= start:
        return True
    try:
        with open(path, "rb", buffering=0) as handle:
            handle.seek(start)
            left = end - start
            while left > 0:
                chunk = handle.read(min(_READ_CHUNK, left))
                if not chunk:
                    return False
                hasher.update(chunk)
                left -= len(chunk)
    except FileNotFoundError:
        return False
    return True
