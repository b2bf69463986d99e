"""The store on a full disk (a real size-limited tmpfs, as root): clear errors, nothing saved lost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gymslurm.errors import DiskFullError
from gymslurm.store import RunLock, RunPaths, RunStore
from gymslurm.store.jsonl import Appender, ends_cleanly, read_tail
from tests.full_disk import fill, free, small_filesystem
from tests.unit.test_store_runstore import create


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_filesystem(tmp_path / "fs", 256) as folder:
        yield folder


def test_append_on_a_full_disk_cuts_its_partial_record_and_appends_no_more(disk: Path) -> None:
    """A failed append leaves the file ending with a complete line and refuses every later append."""
    path = disk / "out.jsonl"
    appender = Appender(path, 0)
    appender.append({"n": 0})
    fill(disk, leave=0)
    with pytest.raises(DiskFullError, match=rf"disk full: could not append to {path}") as full:
        for n in range(1, 100_000):
            appender.append({"n": n, "pad": "x" * 500})
    assert ends_cleanly(path)
    lines = read_tail(path).complete_lines
    free(disk)
    with pytest.raises(DiskFullError) as again:
        appender.append({"n": -1})
    assert str(again.value) == str(full.value) and read_tail(path).complete_lines == lines
    appender.close()


def test_store_saves_nothing_after_its_first_failed_append(disk: Path) -> None:
    """After one failed append the store saves no further outcome, in either file, even with room."""
    paths = RunPaths.for_output(disk / "out.jsonl")
    store = create(paths, 3)
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    fill(disk, leave=0)
    with pytest.raises(DiskFullError, match=r"out\.jsonl"):
        store.append_result(1, store.reserve(1), {"reward": 1.0, "pad": "x" * 8000})
    free(disk)
    with pytest.raises(DiskFullError, match="nothing more is saved after the first failed append"):
        store.append_omission(2, store.reserve(2))
    store.close()
    states = RunStore.open(paths).reconcile().states
    assert [state.pending for state in states] == [False, True, True]


def test_run_lock_on_a_full_disk_names_the_lock_file(disk: Path) -> None:
    """With no space to create the lock file, a disk-full error names it (no traceback, no lock)."""
    fill(disk, leave=0)
    lock = disk / "out_run.lock"
    with pytest.raises(DiskFullError, match=rf"disk full: .*{lock}"):
        RunLock(lock).acquire()
