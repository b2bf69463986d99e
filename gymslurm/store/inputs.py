"""The materialized inputs: one canonical JSON line per logical rollout, written once per run.

Its SHA-256 (``inputs_digest`` in the manifest) is taken over the file's bytes, so a resume can check
that the tasks on disk are the ones the run was created with by hashing, without parsing. Rows are
written canonically (orjson, sorted keys, one ``\\n`` per line). The per-rollout stamps the store adds
to every outcome (rollout id, task index, repeat index, task id) are read into a compact index.
"""

from __future__ import annotations

import hashlib
import operator
import os
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

import orjson

from gymslurm.errors import ConfigError, ManifestError
from gymslurm.store.atomic import publish_stream
from gymslurm.store.jsonl import dump_line, iter_records

_CHUNK = 1 << 20
# A results file in dispatch order needs few lookups by id (the readers guess the next rollout
# first): the first ones scan the ids' bytes, and only a reader that keeps missing sorts the hashes.
_SCANS_BEFORE_SORTING = 64


class Tasks(Protocol):
    """A run's materialized tasks as the store writes them: sized, and iterated once, in order."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[dict[str, Any]]: ...


def check_rows(rows: Sequence[dict[str, Any]]) -> None:
    """Refuse rows without a rollout id or task id, or with a repeated id, before anything is written."""
    seen: set[object] = set()
    for line, row in enumerate(rows):
        rollout_id = row.get("_ng_rollout_id")
        if type(rollout_id) is not str or type(row.get("task_id")) is not dict or rollout_id in seen:
            raise ConfigError(
                f"materialized task {line} has a missing or repeated _ng_rollout_id ({rollout_id!r}) or no "
                "task_id; nothing was written. Fix the dataset or its rollout ids"
            )
        seen.add(rollout_id)


def write_inputs(path: Path, rows: Iterable[dict[str, Any]]) -> tuple[str, RolloutIndex]:
    """Publish the materialized inputs; return their digest and the index of the written file.

    ``rows`` may be a stream (the fresh collection's materialization, never held whole): a row
    without an id, or an id repeated, raises before the file is published (nothing replaced).
    """
    index = RolloutIndex(path)
    sha = hashlib.sha256()

    def chunks() -> Iterator[bytes]:  # streamed: the file is never held whole in memory
        batch = bytearray()  # about _CHUNK bytes (a list of orjson's lines would keep ~4 KiB each)
        for line, row in enumerate(rows):
            data = dump_line(row, canonical=True)
            index.add(line, row, len(data))
            sha.update(data)
            batch += data
            if len(batch) >= _CHUNK:
                yield bytes(batch)
                batch.clear()
        index.check_unique()  # before the last chunk: a repeated id leaves the file unpublished
        yield bytes(batch)

    publish_stream(path, chunks())
    return "sha256:" + sha.hexdigest(), index


def write_nemo_gym_inputs(
    path: Path, tasks: Path, nemo_gym_row: Callable[[Mapping[str, Any]], dict[str, Any]]
) -> None:
    """Publish NeMo Gym's ``<stem>_materialized_inputs.jsonl`` from the run's own tasks file ``tasks``.

    One row per rollout in NeMo Gym's shape and bytes (compact orjson, as ``gym eval run`` writes it),
    so that NeMo Gym's ``+resume_from_cache=true`` resumes the run (docs/nemo-gym.md). Streamed.
    """

    def chunks() -> Iterator[bytes]:
        batch = bytearray()
        for _, row in iter_records(tasks):
            batch += orjson.dumps(nemo_gym_row(row)) + b"\n"
            if len(batch) >= _CHUNK:
                yield bytes(batch)
                batch.clear()
        yield bytes(batch)

    publish_stream(path, chunks())


def digest_file(path: Path) -> tuple[str, int]:
    """``(digest, line count)`` of a file, streamed."""
    sha = hashlib.sha256()
    lines = 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                sha.update(chunk)
                lines += chunk.count(b"\n")
    except FileNotFoundError:
        raise ManifestError(
            f"the materialized inputs {path} are missing beside the run manifest; restore them from a "
            "backup (keep a run's files together) or start at a new output path"
        ) from None
    return "sha256:" + sha.hexdigest(), lines


class RolloutIds(Sequence[str]):
    """The rollout ids by index, held as one byte string (no Python string per rollout)."""

    def __init__(self, index: RolloutIndex) -> None:
        self._index = index

    def __len__(self) -> int:
        return len(self._index.ends) - 1

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        ends = self._index.ends
        if not -len(ends) < index < len(ends) - 1:
            raise IndexError(index)
        index %= len(ends) - 1
        return self._index.blob[ends[index] : ends[index + 1]].decode()

    def __eq__(self, other: object) -> bool:  # equal to a list (or any sequence) of the same ids
        return isinstance(other, Sequence) and len(other) == len(self) and all(map(str.__eq__, self, other))

    __hash__ = None  # type: ignore[assignment]


class RolloutLookup:
    """``index_of`` as a read-only mapping over the index: ``get(rollout_id)`` (what the readers ask)."""

    def __init__(self, index: RolloutIndex) -> None:
        self._index = index

    def get(self, rollout_id: object, default: int | None = None) -> int | None:
        found = self._index.find(rollout_id)
        return default if found is None else found

    def __getitem__(self, rollout_id: str) -> int:
        found = self._index.find(rollout_id)
        if found is None:
            raise KeyError(rollout_id)
        return found

    def __contains__(self, rollout_id: object) -> bool:
        return self._index.find(rollout_id) is not None

    def __len__(self) -> int:
        return len(self._index)


def id_is_at(blob: bytes | bytearray, ends: Sequence[int], index: object, rollout_id: object) -> bool:
    """Whether rollout ``index`` of the ids ``blob``/``ends`` (see :class:`RolloutIndex`) is ``rollout_id``:
    one slice compared, so a reader may guess an index and never take a wrong guess on trust."""
    return (
        type(index) is int
        and 0 <= index < len(ends) - 1
        and type(rollout_id) is str
        and blob[ends[index] : ends[index + 1]] == rollout_id.encode()
    )


class RolloutIndex:
    """Rollout ids by index, id → index, and where each rollout's row sits in the file. No dict.

    Memory per rollout is its id's bytes plus five machine words (about 50 bytes for the ids of a
    1,000,000-rollout run, where a list of strings and a dict cost about 160): ``blob`` holds every
    id's UTF-8 bytes back to back, ``ends`` where each ends, ``offsets`` where each row starts in the
    file. The id → index lookup (:meth:`find`) is, after a few scans of ``blob``, a binary search
    over the ids' hashes sorted once
    (Python's own ``hash`` of the id string, so only within this process; an equal hash is checked
    against the id's bytes, so a collision can never confuse two rollouts). Rows are read back (one
    ``pread``) only when a task is dispatched or an outcome appended.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.blob = bytearray()
        self.ends = array("Q", [0])
        self.offsets = array("Q", [0])
        self.hashes = array("q")  # hash() of each id's bytes
        self.ids = RolloutIds(self)
        self.index_of = RolloutLookup(self)
        self._sorted: tuple[array[int], array[int]] | None = None  # (sorted hashes, their indices)
        self._scans = 0  # lookups answered by a scan of the bytes, before the hashes are sorted
        self._fd: int | None = None

    def add(self, line: int, row: dict[str, Any], size: int) -> None:
        """Append the next row's id (type-checked; a repeated id is found by :meth:`check_unique`)."""
        rollout_id = row.get("_ng_rollout_id")
        if type(rollout_id) is not str or type(row.get("task_id")) is not dict:
            raise ManifestError(
                f"{self.path}, line {line + 1}: a materialized input without _ng_rollout_id or task_id"
            )
        self.add_id(rollout_id.encode(), size)

    def add_id(self, rollout_id: bytes, size: int) -> None:
        """Append the next row's id (its UTF-8 bytes) and the size of its line."""
        blob = self.blob
        blob += rollout_id
        self.ends.append(len(blob))
        self.offsets.append(self.offsets[-1] + size)
        self.hashes.append(hash(rollout_id))
        self._sorted = None

    def find(self, rollout_id: object) -> int | None:
        """The index of ``rollout_id``, or None when the run has no such rollout."""
        if type(rollout_id) is not str:
            return None
        encoded = rollout_id.encode()
        if self._sorted is None and self._scans < _SCANS_BEFORE_SORTING:
            self._scans += 1
            return self._scan(encoded)
        hashes, order = self._sorted if self._sorted is not None else self._sort()
        wanted = hash(encoded)
        position = bisect_left(hashes, wanted)
        blob, ends = self.blob, self.ends
        while position < len(hashes) and hashes[position] == wanted:
            index = order[position]
            if blob[ends[index] : ends[index + 1]] == encoded:
                return index
            position += 1
        return None

    def _scan(self, encoded: bytes) -> int | None:
        """:meth:`find` by searching the ids' bytes (C speed), for the first few lookups of a reader."""
        blob, ends = self.blob, self.ends
        at = blob.find(encoded)
        while at >= 0:
            index = bisect_left(ends, at)  # an id starts here only if ``at`` is one of the ends
            if index + 1 < len(ends) and ends[index] == at and ends[index + 1] == at + len(encoded):
                return index
            at = blob.find(encoded, at + 1)
        return None

    def is_at(self, index: int, rollout_id: object) -> bool:
        """Whether rollout ``index`` has this id (the readers' cheap guess before :meth:`find`)."""
        return id_is_at(self.blob, self.ends, index, rollout_id)

    def _sort(self) -> tuple[array[int], array[int]]:
        hashes = self.hashes
        order = array("Q", sorted(range(len(hashes)), key=hashes.__getitem__))
        self._sorted = array("q", map(hashes.__getitem__, order)), order
        return self._sorted

    def first_repeat(self) -> tuple[int, int] | None:
        """The first (earlier index, later index) holding one id, or None when every id is unique."""
        hashes, order = self._sorted if self._sorted is not None else self._sort()
        if all(map(operator.lt, hashes, islice(hashes, 1, None))):
            return None  # strictly increasing hashes: no two ids alike (the common case, at C speed)
        repeats = []
        for position in range(1, len(hashes)):
            if hashes[position] == hashes[position - 1]:
                run = position - 1
                while run >= 0 and hashes[run] == hashes[position]:
                    if self.ids[order[run]] == self.ids[order[position]]:
                        repeats.append(tuple(sorted((order[run], order[position]))))
                    run -= 1
        return min(repeats, key=lambda pair: pair[1]) if repeats else None  # type: ignore[return-value]

    def check_unique(self) -> None:
        """Raise ManifestError naming the first line whose rollout id an earlier line already has."""
        repeat = self.first_repeat()
        if repeat is not None:
            raise ManifestError(
                f"{self.path}, line {repeat[1] + 1}: rollout id {self.ids[repeat[1]]!r} appears twice"
            )

    def row(self, index: int) -> dict[str, Any]:
        """The materialized row of rollout ``index``, read back from the file."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        start = self.offsets[index]
        value: dict[str, Any] = orjson.loads(os.pread(self._fd, self.offsets[index + 1] - start, start))
        return value

    __getitem__ = row  # the index reads as the sequence of materialized rows (one pread each)

    def __len__(self) -> int:
        return len(self.ends) - 1

    def by_task(self) -> dict[tuple[int, int], int]:
        """(task index, repeat index) → rollout index, for legacy rows without a usable rollout id."""
        by_task = {}
        for index, (_, row) in enumerate(iter_records(self.path)):
            by_task[(row.get("_ng_task_index", 0), row.get("_ng_rollout_index", 0))] = index
        return by_task

    def stamps(self, index: int, run_id: str, attempt: int) -> dict[str, Any]:
        row = self.row(index)
        task_id = row["task_id"]
        agent = (
            row.get("task_input", {}).get("agent_ref") if isinstance(row.get("task_input"), dict) else None
        )
        stamps = {
            "_ng_run_id": run_id,
            "_ng_rollout_id": self.ids[index],
            "_ng_attempt": attempt,
            "_ng_task_index": row.get("_ng_task_index", 0),
            "_ng_rollout_index": row.get("_ng_rollout_index", 0),
            "task_id": {"taskset": task_id.get("taskset"), "task_id": task_id.get("task_id")},
        }
        if isinstance(agent, dict) and agent.get("name"):  # a flat row's agent: NeMo Gym copies it to results
            stamps["agent_ref"] = agent
        return stamps

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_ID_PREFIX = b'{"_ng_rollout_id":"'
_ID_START = len(_ID_PREFIX)


def read_index(path: Path) -> RolloutIndex:
    """Index the materialized inputs file: ids and row offsets, without parsing most rows.

    Rows are canonical (sorted keys, written by the store; ``RunStore.open`` checked the file's
    digest against the manifest), so a row starting with ``{"_ng_rollout_id":"`` has its top-level
    rollout id right there, up to the next quote — unless the id holds an escape (a backslash), or
    another top-level key sorts first (an upper-case or digit key): those rows are parsed in full,
    with the same checks as before. Trade-off: a lean row's ``task_id`` is not type-checked here,
    and ids are not checked for repeats on open; the digest vouches for the bytes the store wrote
    after :func:`check_rows` and :meth:`RolloutIndex.check_unique`.
    """
    index = RolloutIndex(path)
    try:
        handle = open(path, "rb", buffering=1 << 20)  # noqa: SIM115
    except FileNotFoundError:
        raise ManifestError(
            f"the materialized inputs {path} are missing; restore them or use a new output"
        ) from None
    blob, ends, offsets, hashes = index.blob, index.ends, index.offsets, index.hashes
    add_end, add_offset, add_hash = ends.append, offsets.append, hashes.append
    prefix, start = _ID_PREFIX, _ID_START
    offset = 0
    with handle:
        for line, raw in enumerate(handle):
            size = len(raw)
            if raw[-1:] != b"\n":
                raise ManifestError(
                    f"{path}, line {line + 1}: incomplete; the materialized inputs are damaged"
                )
            # the id's bytes straight from the canonical row (inlined: a call per row shows here)
            end = raw.find(b'"', start) if raw.startswith(prefix) else -1
            if end > 0 and raw.find(b"\\", start, end) < 0:
                ident = raw[start:end]
                blob += ident
                add_end(len(blob))
                offset += size
                add_offset(offset)
                add_hash(hash(ident))
            else:
                index.add(line, orjson.loads(raw), size)  # the checked path (and its errors)
                offset += size
    return index


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [row for _, row in iter_records(path)]
