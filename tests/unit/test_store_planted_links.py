"""Run files never follow a planted link (issue 10, section 3).

Only the output path itself follows its symlink (spec 000). The run lock, appended files, the
reservation table and the launcher's ledgers are opened ``O_NOFOLLOW``: a link planted at their
name is refused with a message saying what to do, and the file it points at is left untouched.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gymslurm.errors import StoreError
from gymslurm.launcher.ledger import Ledger, Submitted
from gymslurm.store.jsonl import Appender
from gymslurm.store.lock import Mount, RunLock
from gymslurm.store.paths import others_writable_warning

NO_MOUNTS: list[Mount] = []


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    return victim


def test_a_link_planted_at_the_run_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    """A symlink at ``<stem>_run.lock`` is never opened through: the lock refuses, the target is kept."""
    victim = _victim(tmp_path)
    lock = tmp_path / "out_run.lock"
    lock.symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"), RunLock(lock, mounts=NO_MOUNTS):
        pass
    assert victim.read_bytes() == b"precious\n"


def test_a_link_planted_at_an_appended_file_is_refused(tmp_path: Path) -> None:
    """A symlink at a JSONL companion (the failure sidecar) is refused instead of appended through."""
    victim = _victim(tmp_path)
    sidecar = tmp_path / "out_failures.jsonl"
    sidecar.symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        Appender(sidecar, next_line=0)
    assert victim.read_bytes() == b"precious\n"


def test_a_link_planted_at_a_ledger_is_refused(tmp_path: Path) -> None:
    """A symlink at a shard's ledger is refused; the file it points at is untouched."""
    victim = _victim(tmp_path)
    path = tmp_path / "ledger.jsonl"
    path.symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        Ledger(path).append(Submitted(job_id="1", by="submit"))
    assert victim.read_bytes() == b"precious\n"


@pytest.mark.parametrize(
    ("mode", "warned"),
    [(0o700, False), (0o755, False), (0o775, False), (0o777, True), (0o1777, True), (0o703, True)],
)
def test_an_output_folder_writable_by_others_gets_a_warning(mode: int, warned: bool) -> None:
    """Only a folder other users may write (o+w, sticky or not) is warned about, naming docs/security.md."""
    warning = others_writable_warning(Path("/runs"), stat.S_IFDIR | mode)
    assert (warning is not None) == warned
    if warning:
        assert "/runs" in warning and "security.md" in warning
