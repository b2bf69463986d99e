"""The reservation table: durable, growing execution numbers, validated against the manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.errors import InconsistentHistoryError, ManifestError
from gymslurm.store.reservations import HEADER_SIZE, ReservationTable, create_table

RUN = "run-" + "a" * 32


def test_first_execution_is_zero_and_numbers_grow(tmp_path: Path) -> None:
    """reserve returns the old count: 0, then 1, then 2, per rollout."""
    create_table(tmp_path / "r.bin", RUN, 3)
    table = ReservationTable(tmp_path / "r.bin", RUN, 3)
    assert [table.reserve(1) for _ in range(3)] == [0, 1, 2]
    assert table.reserve(0) == 0
    assert list(table.counts()) == [1, 3, 0]


def test_reservations_survive_reopen(tmp_path: Path) -> None:
    """A reservation is on disk when reserve returns: a new table sees it and continues from it."""
    create_table(tmp_path / "r.bin", RUN, 2)
    ReservationTable(tmp_path / "r.bin", RUN, 2).reserve(1)  # never closed, like a killed process
    reopened = ReservationTable(tmp_path / "r.bin", RUN, 2)
    assert reopened.count(1) == 1
    assert reopened.reserve(1) == 1
    assert reopened.total() == 2


def test_file_layout_is_fixed_width(tmp_path: Path) -> None:
    """The file is a 64-byte header plus one little-endian u32 per rollout."""
    create_table(tmp_path / "r.bin", RUN, 4)
    ReservationTable(tmp_path / "r.bin", RUN, 4).reserve(2)
    raw = (tmp_path / "r.bin").read_bytes()
    assert len(raw) == HEADER_SIZE + 16
    assert raw[:8] == b"GSRESV\x00\x02"
    assert raw[HEADER_SIZE + 8 : HEADER_SIZE + 12] == b"\x01\x00\x00\x00"


def test_initial_counts_for_legacy_import(tmp_path: Path) -> None:
    """A table can start from counts (an imported run's reconstructed reservations)."""
    create_table(tmp_path / "r.bin", RUN, [2, 0, 1])
    assert ReservationTable(tmp_path / "r.bin", RUN, 3).reserve(0) == 2


@pytest.mark.parametrize(("run_id", "slots"), [("run-" + "b" * 32, 3), (RUN, 4)])
def test_header_disagreeing_with_manifest_is_inconsistent(tmp_path: Path, run_id: str, slots: int) -> None:
    """Another run's table, or one with another slot count, is inconsistent history."""
    create_table(tmp_path / "r.bin", RUN, 3)
    with pytest.raises(InconsistentHistoryError, match="mixed"):
        ReservationTable(tmp_path / "r.bin", run_id, slots)


@pytest.mark.parametrize("damage", ["truncate", "magic", "missing"])
def test_damaged_table_is_a_manifest_error(tmp_path: Path, damage: str) -> None:
    """A truncated, foreign-format or missing table is refused with advice."""
    path = tmp_path / "r.bin"
    create_table(path, RUN, 3)
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[:-2])
    elif damage == "magic":
        path.write_bytes(b"XXXXXXXX" + raw[8:])
    else:
        path.unlink()
    with pytest.raises(ManifestError):
        ReservationTable(path, RUN, 3)
