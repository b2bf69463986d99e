"""The split NeMo Gym prepared is written once, never over another run's input (nemo_gym_serve.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.commands.nemo_gym_serve import write_once
from gymslurm.errors import ConfigError


def test_prepared_rows_are_written_where_none_are(tmp_path: Path) -> None:
    """No file yet: the rows are written (folders made)."""
    target = tmp_path / "nemo_gym_prepared" / "x.jsonl"
    assert write_once(target, b'{"a": 1}\\n') is True
    assert target.read_bytes() == b'{"a": 1}\\n'


def test_the_same_rows_leave_the_file_untouched(tmp_path: Path) -> None:
    """The same rows again: nothing is rewritten (same inode, same mtime)."""
    target = tmp_path / "x.jsonl"
    write_once(target, b"row\\n")
    before = target.stat()
    assert write_once(target, b"row\\n") is False
    after = target.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_other_rows_never_replace_an_earlier_runs_input(tmp_path: Path) -> None:
    """Other rows for the same file: refused, saying what to do; the earlier rows stay."""
    target = tmp_path / "x.jsonl"
    write_once(target, b"old\\n")
    with pytest.raises(ConfigError, match=r"nothing was written\. Move that file aside"):
        write_once(target, b"new\\n")
    assert target.read_bytes() == b"old\\n"
