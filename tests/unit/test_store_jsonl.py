"""JSONL reading with torn tails, malformed lines, and the flush-per-record appender."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymslurm.errors import CorruptRecordError, StoreError
from gymslurm.store.jsonl import (
    Appender,
    TailReport,
    cut_torn_tail,
    iter_complete_lines,
    iter_records,
    read_tail,
    repair_torn_tail,
)


def test_torn_tail_is_ignored_and_reported(tmp_path: Path) -> None:
    """An incomplete last line is skipped and its offset reported; the file is not changed."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": ')
    tail = TailReport()
    assert [row["a"] for _, row in iter_records(path, tail)] == [1, 2]
    assert (tail.complete_lines, tail.torn_at, tail.torn_bytes) == (2, 18, 6)
    assert path.read_bytes().endswith(b'{"a": ')


def test_unterminated_parsable_line_is_still_torn(tmp_path: Path) -> None:
    """A last line without newline is torn even if its bytes parse."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}')
    assert [line for line, _ in iter_records(path)] == [0]


def test_repair_removes_only_the_torn_tail(tmp_path: Path) -> None:
    """Repair truncates the partial bytes and keeps every complete line."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": ')
    assert repair_torn_tail(path) == 6
    assert path.read_bytes() == b'{"a": 1}\n'
    assert repair_torn_tail(path) == 0


@pytest.mark.parametrize("bad", [b"{not json}\n", b"[1, 2]\n"])
def test_malformed_complete_line_raises_and_changes_nothing(tmp_path: Path, bad: bytes) -> None:
    """A malformed complete line names file and line (1-based) and leaves the file untouched."""
    path = tmp_path / "a.jsonl"
    content = b'{"a": 1}\n' + bad + b'{"a": 3}\n'
    path.write_bytes(content)
    with pytest.raises(CorruptRecordError, match=r"a\.jsonl, line 2"):
        list(iter_records(path))
    assert path.read_bytes() == content


def test_blank_lines_are_skipped_but_counted(tmp_path: Path) -> None:
    """Line numbers stay physical across blank lines (offsets count lines)."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n')
    assert [line for line, _ in iter_records(path)] == [0, 2]
    assert read_tail(path).complete_lines == 3


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    """A missing file yields no record and no tail."""
    assert list(iter_records(tmp_path / "none.jsonl")) == []
    assert read_tail(tmp_path / "none.jsonl").complete_lines == 0


def test_appender_returns_line_numbers_and_writes_whole_lines(tmp_path: Path) -> None:
    """Each append is one complete line, visible to readers at once, numbered from next_line."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 0}\n')
    appender = Appender(path, next_line=1)
    assert appender.append({"a": 1}) == 1
    assert [row["a"] for _, row in iter_records(path)] == [0, 1]
    assert appender.append({"a": 2}) == 2
    appender.close()
    assert path.read_bytes().count(b"\n") == 3


def test_appender_refuses_a_file_with_a_torn_tail(tmp_path: Path) -> None:
    """Appending after a torn tail would glue two records into a malformed line, so it is refused."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a"')
    with pytest.raises(StoreError, match="incomplete line"):
        Appender(path, next_line=1)


@pytest.mark.parametrize(
    ("data", "kept"),
    [(b"", b""), (b"a\n", b"a\n"), (b"a\nb", b"a\n"), (b"torn", b""), (b"a\n" + b"x" * 9000, b"a\n")],
    ids=["empty", "clean", "torn", "only-torn", "torn-longer-than-a-chunk"],
)
def test_cut_torn_tail_keeps_everything_up_to_the_last_newline(
    tmp_path: Path, data: bytes, kept: bytes
) -> None:
    """cut_torn_tail truncates an open file after its last newline and says how much it removed."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    try:
        assert cut_torn_tail(fd) == len(data) - len(kept)
    finally:
        os.close(fd)
    assert path.read_bytes() == kept


def test_iter_complete_lines_leaves_out_the_torn_tail(tmp_path: Path) -> None:
    """Complete lines come back raw with 0-based numbers; an incomplete last line does not."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n{"a"')
    assert list(iter_complete_lines(path)) == [(0, b'{"a": 1}\n'), (1, b"\n"), (2, b'{"a": 2}\n')]
    assert list(iter_complete_lines(tmp_path / "missing.jsonl")) == []
