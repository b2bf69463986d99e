"""Reading a JSONL file's lines by number: a verified line index, and the selected lines' raw bytes.

A file is indexed once — byte offsets of its complete lines and the ``(st_dev, st_ino)`` of the
descriptor that read them — and rows are read later by offset (spec 002's stale-offset case). Every
later read opens the path again and compares ``fstat`` with the indexed identity and size, so a file
replaced in between (a fresh collection reusing the path) is a :class:`StaleFileError` instead of
another run's bytes read through old offsets. Append-only growth keeps the inode and remains valid.

Health and reverification read examples and rows through :class:`LineIndex`; aggregation copies
selected lines as saved (no re-serialization) with :func:`selected_lines`.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from gymslurm.errors import StaleFileError
from gymslurm.selection import RolloutState
from gymslurm.store.jsonl import bounded_lines, iter_complete_lines

_CHUNK = 1 << 20


@dataclass
class LineIndex:
    """Byte offsets of a file's complete lines and the identity of the file they were read from."""

    path: Path
    device: int
    inode: int
    size: int
    offsets: array = field(default_factory=lambda: array("q"))  # start of line i; one extra at the end
    blank: int = 0

    @property
    def lines(self) -> int:
        return max(len(self.offsets) - 1, 0)


def index_file(path: Path) -> LineIndex | None:
    """Index a file's complete lines (torn tail left out); None when it does not exist."""
    try:
        handle = open(path, "rb", buffering=_CHUNK)  # noqa: SIM115
    except FileNotFoundError:
        return None
    with handle:
        info = os.fstat(handle.fileno())
        index = LineIndex(path, info.st_dev, info.st_ino, info.st_size)
        offsets = index.offsets
        offset = 0
        offsets.append(0)
        for raw in bounded_lines(handle, path):
            if raw[-1:] != b"\n":
                break
            offset += len(raw)
            offsets.append(offset)
            index.blank += raw.isspace()
    return index


def verify_identity(index: LineIndex, handle: IO[bytes]) -> None:
    """Raise :class:`StaleFileError` unless ``handle`` is the indexed file, not shrunk."""
    info = os.fstat(handle.fileno())
    if (info.st_dev, info.st_ino) != (index.device, index.inode) or info.st_size < index.offsets[-1]:
        raise StaleFileError(
            f"{index.path} was replaced or truncated after it was indexed (device/inode "
            f"{index.device}/{index.inode} → {info.st_dev}/{info.st_ino}, size {index.size} → "
            f"{info.st_size}); its indexed offsets would read another file's bytes. Nothing was "
            "counted: run the health check again once no collection is replacing this output"
        )


def verify_unchanged(*indexes: LineIndex | None) -> None:
    """Check every given index still describes its file (see :func:`verify_identity`)."""
    for index in indexes:
        if index is not None:
            with open(index.path, "rb") as handle:
                verify_identity(index, handle)


def read_lines(index: LineIndex, lines: Iterable[int]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parse the given (0-based) lines through the index, verifying the file's identity first."""
    with open(index.path, "rb") as handle:
        verify_identity(index, handle)
        offsets = index.offsets
        for line in sorted(lines):
            handle.seek(offsets[line])
            raw = handle.read(offsets[line + 1] - offsets[line])
            if raw.isspace():
                continue
            yield line, orjson.loads(raw)


def selected_lines(path: Path, lines: Sequence[int]) -> bytes:
    """The raw bytes of the given (0-based, sorted) complete lines of ``path``, each with its newline.

    The file is read whole and split at newlines (C speed): line numbers are physical, and a torn
    tail is never among the selected lines. Memory peaks at about twice the file.
    """
    if not len(lines):
        return b""
    split = path.read_bytes().split(b"\n")
    return b"\n".join([split[line] for line in lines]) + b"\n"


def selected_rows(path: Path, states: Sequence[RolloutState]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(rollout index, saved row) of every selected result in ``path``, one at a time in file order.

    What is held is one 8-byte slot per results line (line → rollout index), never the rows.
    """

    def picked() -> Iterator[tuple[int, int]]:
        for index, state in enumerate(states):
            if state.selected is not None and state.selected.kind == "result":
                yield state.selected.line, index

    top = max((line for line, _ in picked()), default=-1)
    if top < 0:
        return
    index_at = array("q", [-1]) * (top + 1)
    for line, index in picked():
        index_at[line] = index
    for line, raw in iter_complete_lines(path):
        if line > top:
            break
        if index_at[line] >= 0:
            yield index_at[line], orjson.loads(raw)
