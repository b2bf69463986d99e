"""The reservation table: execution numbers reserved per rollout, one fixed-width slot each.

Layout in docs/formats.md. ``reserve(i)`` is one 4-byte ``pwrite`` of ``count+1`` into slot ``i``
that reaches the kernel before it returns, so a collector killed right after it (before or while the
request is in flight) still has the reservation and never reuses the number. Cost is O(1) per
reservation; an in-memory mirror avoids reads. Values only grow.

Trade-off: no fsync per reservation (process death is covered, a machine crash is not, as in spec 000);
the file is created whole and atomically, so a half-written header is never seen.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from pathlib import Path

from gymslurm.errors import InconsistentHistoryError, ManifestError, StoreError
from gymslurm.formats import check_version, version_of
from gymslurm.store.atomic import open_run_file, publish_bytes, write_error

MAGIC = b"GSRESV\x00\x02"
TABLE_VERSION = version_of("reservations")
HEADER = struct.Struct("<8sII Q40s")
HEADER_SIZE = 64
SLOT = struct.Struct("<I")
MAX_COUNT = 2**32 - 1
assert HEADER.size == HEADER_SIZE


def _to_little(values: array) -> bytes:
    if sys.byteorder == "big":
        values = array("I", values)
        values.byteswap()
    return values.tobytes()


def create_table(path: Path, run_id: str, counts: list[int] | int) -> None:
    """Publish a new table; ``counts`` is N (all zero) or the initial count per slot (legacy import)."""
    values = array("I", bytes(4 * counts)) if isinstance(counts, int) else array("I", counts)
    header = HEADER.pack(MAGIC, TABLE_VERSION, 0, len(values), run_id.encode("ascii"))
    publish_bytes(path, header + _to_little(values))


class ReservationTable:
    """An open table with its in-memory mirror; the only writer is the lock holder."""

    def __init__(self, path: Path, run_id: str, slot_count: int, *, writable: bool = True) -> None:
        self.path = path
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ManifestError(
                f"the reservation table {path} is missing beside its manifest; restore it from a backup "
                "or start at a new output path (lost reservations cannot be recreated)"
            ) from None
        self._counts = _parse(path, raw, run_id, slot_count)
        self._fd: int | None = open_run_file(path, os.O_RDWR) if writable else None
        self.writable = writable

    def __len__(self) -> int:
        return len(self._counts)

    def count(self, index: int) -> int:
        return self._counts[index]

    def counts(self) -> array:
        """Reserved executions per rollout index (a copy)."""
        return array("I", self._counts)

    def total(self) -> int:
        return sum(self._counts)

    def reserve(self, index: int) -> int:
        """Durably reserve the next execution number of rollout ``index`` and return it."""
        if self._fd is None:
            raise StoreError(f"{self.path} was opened read-only")
        attempt = self._counts[index]
        if attempt >= MAX_COUNT:
            raise StoreError(f"rollout index {index} has exhausted the execution-number space in {self.path}")
        data = SLOT.pack(attempt + 1)
        try:
            written = os.pwrite(self._fd, data, HEADER_SIZE + 4 * index)
        except OSError as error:
            what = f"could not reserve an execution in {self.path}"
            raise write_error(error, what, self.path.parent) from error
        if written != len(data):
            raise StoreError(f"short write reserving rollout {index} in {self.path}; check free space")
        self._counts[index] = attempt + 1
        return attempt

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _parse(path: Path, raw: bytes, run_id: str, slot_count: int) -> array:
    if len(raw) < HEADER_SIZE:
        raise ManifestError(f"the reservation table {path} is truncated; restore it or use a new output path")
    magic, version, _, slots, stored_id = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise ManifestError(
            f"{path} is not a gymslurm reservation table; restore it or use a new output path"
        )
    check_version("reservations", version, str(path), ManifestError)
    stored = stored_id.rstrip(b"\x00").decode("ascii", "replace")
    if stored != run_id or slots != slot_count:
        raise InconsistentHistoryError(
            f"the reservation table {path} belongs to run {stored!r} with {slots} rollouts, but the manifest "
            f"says run {run_id!r} with {slot_count}: the run's files were mixed. Restore a consistent set "
            "from a backup or start at a new output path"
        )
    if len(raw) != HEADER_SIZE + 4 * slots:
        raise ManifestError(
            f"the reservation table {path} has {len(raw)} bytes, expected {HEADER_SIZE + 4 * slots}; "
            "restore it or use a new output path"
        )
    values = array("I")
    values.frombytes(raw[HEADER_SIZE:])
    if sys.byteorder == "big":
        values.byteswap()
    return values
