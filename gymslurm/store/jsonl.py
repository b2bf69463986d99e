"""JSONL records: fast reading that tolerates a torn tail, and a flush-per-record appender.

A line is *complete* when it ends with ``\\n``. The appender writes each record and its newline with
one ``os.write`` on an ``O_APPEND`` descriptor, so a collector killed at any instant leaves, at worst,
one incomplete last line (a *torn tail*). Readers skip that tail and report its byte offset; only
``repair_torn_tail`` removes it, and the store calls it only after the run's identity was validated
(a refused resume changes no byte). A malformed *complete* line is never skipped: it raises
:class:`CorruptRecordError` naming the file and line, and nothing is changed.

Trade-offs: an unterminated last line is torn even if its bytes happen to parse (we never write one);
blank complete lines are skipped but still counted, so line numbers stay physical (the resubmit offset
counts lines). Each append reaches the kernel before the call returns (no Python buffering) but is
not fsynced: the guarantee covers process death, not machine or storage loss (spec 000).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from gymslurm.errors import CorruptRecordError, StoreError
from gymslurm.redaction import scrub_bytes
from gymslurm.store.atomic import open_run_file, write_error

_READ_CHUNK = 1 << 20


@dataclass(slots=True)
class TailReport:
    """What a full read of one file found at its end."""

    complete_lines: int = 0
    complete_bytes: int = 0  # where the complete lines end (set by the readers that parse: iter_records)
    torn_at: int | None = None  # byte offset where an incomplete last line starts
    torn_bytes: int = 0

    @property
    def torn(self) -> bool:
        return self.torn_at is not None


MAX_LINE_ENV = "GYMSLURM_MAX_LINE_BYTES"
DEFAULT_MAX_LINE_BYTES = 256 * 1024 * 1024  # above max_reply_bytes (64 MiB) and the stamps around it


def max_line_bytes() -> int:
    """The longest line a reader holds: ``GYMSLURM_MAX_LINE_BYTES`` or 256 MiB."""
    raw = os.environ.get(MAX_LINE_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_LINE_BYTES


def bounded_lines(handle: BinaryIO, path: Path, first_line: int = 0) -> Iterator[bytes]:
    """The lines of ``handle`` as ``for raw in handle`` gives them, but none held past the line limit:
    a longer line is refused naming its file and line (a file gymslurm wrote has none; the handle's
    first line is line ``first_line``, 0-based)."""
    limit = max_line_bytes()
    readline = handle.readline
    line = first_line
    while raw := readline(limit + 1):
        if len(raw) > limit and raw[-1:] != b"\n":
            raise over_the_line_limit(path, line + 1, limit)
        yield raw
        line += 1


def over_the_line_limit(path: Path, number: int, limit: int) -> CorruptRecordError:
    """The refusal of line ``number`` (1-based), longer than ``limit`` bytes (the one message)."""
    return CorruptRecordError(
        f"{path}, line {number}: is over {limit} bytes (the line limit, {MAX_LINE_ENV}); it was "
        "not read whole. No record gymslurm writes is that long: inspect that line, or raise "
        f"{MAX_LINE_ENV} if it is a result you expect"
    )


def iter_records(
    path: Path, tail: TailReport | None = None, start: tuple[int, int] = (0, 0)
) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, record)`` for every complete non-blank line (0-based line numbers).

    A missing file yields nothing. The torn tail, if any, is described in ``tail`` once exhausted.
    ``start``: (byte offset, line number) of a line start to read from (what comes before is known).
    """
    report = tail if tail is not None else TailReport()
    try:
        handle = open(path, "rb", buffering=_READ_CHUNK)  # noqa: SIM115
    except FileNotFoundError:
        return
    loads = orjson.loads
    offset, complete = start
    with handle:
        handle.seek(offset)
        for raw in bounded_lines(handle, path, complete):
            if raw[-1:] != b"\n":
                report.torn_at, report.torn_bytes = offset, len(raw)
                break
            line = complete
            complete += 1
            offset += len(raw)
            if raw.isspace():
                continue
            try:
                record = loads(raw)
            except orjson.JSONDecodeError as error:
                raise malformed(path, line, f"is not valid JSON ({error})") from None
            if type(record) is not dict:
                raise malformed(path, line, "is not a JSON object")
            yield line, record
    report.complete_lines, report.complete_bytes = complete, offset


def malformed(path: Path, line: int, problem: str) -> CorruptRecordError:
    """The error for a bad complete line (``line`` 0-based; the message counts from 1)."""
    return CorruptRecordError(
        f"{path}, line {line + 1}: {problem}. This complete record cannot be trusted and nothing was "
        "changed; inspect and fix or remove that line (keep a backup), or start a new output path"
    )


def read_tail(path: Path) -> TailReport:
    """Count complete lines and find a torn tail without parsing JSON."""
    report = TailReport()
    try:
        handle = open(path, "rb", buffering=_READ_CHUNK)  # noqa: SIM115
    except FileNotFoundError:
        return report
    with handle:
        offset = 0
        for raw in bounded_lines(handle, path):
            if raw[-1:] != b"\n":
                report.torn_at, report.torn_bytes = offset, len(raw)
                break
            offset += len(raw)
            report.complete_lines += 1
    return report


def repair_torn_tail(path: Path) -> int:
    """Truncate an incomplete last line; return how many bytes were removed (0 when none)."""
    try:
        fd = open_run_file(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    except OSError as error:
        raise StoreError(f"could not repair the torn tail of {path}: {error}; check permissions") from error
    try:
        removed = cut_torn_tail(fd)
        if removed:
            os.fsync(fd)
    except OSError as error:
        raise StoreError(f"could not repair the torn tail of {path}: {error}; check permissions") from error
    finally:
        os.close(fd)
    return removed


def cut_torn_tail(fd: int) -> int:
    """Truncate the open file ``fd`` after its last newline; return the bytes removed.

    Scans backwards from the end, so the cost is the length of the torn line, not of the file. For a
    writer that already holds ``fd`` (and any lock on it); :func:`repair_torn_tail` opens by path.
    """
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    keep = size
    while keep > 0:
        chunk_start = max(0, keep - 4096)
        newline = os.pread(fd, keep - chunk_start, chunk_start).rfind(b"\n")
        if newline >= 0:
            keep = chunk_start + newline + 1
            break
        keep = chunk_start
    os.ftruncate(fd, keep)
    return size - keep


def iter_complete_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line, raw)`` for every complete line (0-based, unparsed); a torn tail is left out.

    A missing file yields nothing. For small files whose records another module parses (ledgers).
    """
    try:
        handle = open(path, "rb", buffering=_READ_CHUNK)  # noqa: SIM115
    except FileNotFoundError:
        return
    with handle:
        for line, raw in enumerate(bounded_lines(handle, path)):
            if raw[-1:] != b"\n":
                return
            yield line, raw


def ends_cleanly(path: Path) -> bool:
    """True when the file is missing, empty, or ends with a newline."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return True
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"
    except FileNotFoundError:
        return True


def dump_line(record: Any, *, canonical: bool = False) -> bytes:
    """One JSONL line; ``canonical`` sorts keys (for digested files)."""
    option = orjson.OPT_APPEND_NEWLINE | (orjson.OPT_SORT_KEYS if canonical else 0)
    return orjson.dumps(record, option=option)


class Appender:
    """Appends one record per line to a JSONL file; each ``append`` reaches the kernel before returning."""

    def __init__(self, path: Path, next_line: int) -> None:
        if not ends_cleanly(path):
            raise StoreError(
                f"{path} ends with an incomplete line; it must be repaired (after validation) before "
                "new records are appended"
            )
        self.path = path
        self.next_line = next_line
        try:
            self._fd: int | None = open_run_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except StoreError:
            raise
        except OSError as error:
            raise write_error(error, f"could not open {path} for appending", path.parent) from error
        self._failed: StoreError | None = None
        self.last_written: bytes | None = None  # the last record's bytes, when written as serialized

    def append(self, record: Any) -> int:
        """Write ``record`` as one line; return its 0-based line number.

        A failed write (a full disk) cuts whatever part of the record reached the file, so the file
        still ends with a complete line, and closes the appender for good: nothing is ever appended
        after a partial write (if even the cut fails, the torn tail stays for the validated repair).
        """
        if self._failed is not None:
            raise self._failed
        if self._fd is None:
            raise StoreError(f"appender for {self.path} is closed")
        line_bytes = dump_line(record)
        scrubbed = scrub_bytes(line_bytes)  # no learned secret reaches a run file
        data = memoryview(scrubbed)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as error:
            self._failed = write_error(error, f"could not append to {self.path}", self.path.parent)
            self._cut(written)
            raise self._failed from error
        line = self.next_line
        self.next_line += 1
        self.last_written = scrubbed if scrubbed is line_bytes else None  # None: not the record as given
        return line

    def _cut(self, written: int) -> None:
        """Remove the ``written`` bytes of a record that did not reach the file whole."""
        if not written or self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
