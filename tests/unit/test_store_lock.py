"""The run lock: exclusive, self-describing, never blocked by a dead holder, refused on weak mounts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gymslurm.errors import LockUnsupportedError, RunLockedError
from gymslurm.store.lock import Mount, RunLock, mount_of, parse_mounts, read_holder

NO_MOUNTS: list[Mount] = []


def test_holder_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After acquiring, the lock file names this pid, host and Slurm job."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    with RunLock(tmp_path / "x_run.lock", mounts=NO_MOUNTS):
        holder = read_holder(tmp_path / "x_run.lock")
    assert (holder["pid"], holder["host"], holder["slurm_job_id"]) == (
        os.getpid(),
        socket.gethostname(),
        "4242",
    )


def test_second_acquisition_is_refused_naming_the_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second collector is refused with the holder's pid, host and job in the message."""
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    path = tmp_path / "x_run.lock"
    with RunLock(path, mounts=NO_MOUNTS), pytest.raises(RunLockedError) as refused:
        RunLock(path, mounts=NO_MOUNTS).acquire()
    message = str(refused.value)
    assert f"pid {os.getpid()}" in message
    assert socket.gethostname() in message
    assert "Slurm job 777" in message


def test_lock_held_by_another_process_refuses(tmp_path: Path) -> None:
    """A lock held by a live child process refuses this one."""
    path = tmp_path / "x_run.lock"
    code = (
        "import sys; from pathlib import Path; from gymslurm.store.lock import RunLock;"
        f"lock = RunLock(Path({str(path)!r}), mounts=[]); lock.acquire(); print('held', flush=True);"
        "sys.stdin.read()"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"held\n"
        with pytest.raises(RunLockedError, match=f"pid {child.pid}"):
            RunLock(path, mounts=NO_MOUNTS).acquire()
    finally:
        child.kill()
        child.wait()
    with RunLock(path, mounts=NO_MOUNTS):  # the kernel released the dead child's lock
        pass


def test_stale_lock_file_does_not_block(tmp_path: Path) -> None:
    """A lock file left by a dead process is taken over and rewritten."""
    path = tmp_path / "x_run.lock"
    path.write_bytes(orjson.dumps({"pid": 999999, "host": "gone", "slurm_job_id": None}))
    with RunLock(path, mounts=NO_MOUNTS):
        assert read_holder(path)["pid"] == os.getpid()


def test_release_never_unlinks(tmp_path: Path) -> None:
    """The lock file stays after release, so two processes never lock two inodes."""
    path = tmp_path / "x_run.lock"
    with RunLock(path, mounts=NO_MOUNTS):
        pass
    assert path.exists()


def test_noflock_mount_is_unsupported(tmp_path: Path) -> None:
    """A Lustre noflock mount cannot hold the lock."""
    mounts = [Mount(str(tmp_path.resolve()), "lustre", frozenset({"rw", "noflock"}))]
    with pytest.raises(LockUnsupportedError, match="noflock"):
        RunLock(tmp_path / "x_run.lock", mounts=mounts).acquire()
    assert not (tmp_path / "x_run.lock").exists()


def test_localflock_is_refused_unless_allowed(tmp_path: Path) -> None:
    """A localflock mount protects one node only: refused by default, allowed explicitly."""
    mounts = [Mount(str(tmp_path.resolve()), "lustre", frozenset({"rw", "localflock"}))]
    with pytest.raises(LockUnsupportedError, match="one node only"):
        RunLock(tmp_path / "x_run.lock", mounts=mounts).acquire()
    with RunLock(tmp_path / "x_run.lock", mounts=mounts, allow_localflock=True) as lock:
        assert lock.held


def test_mount_lookup_takes_the_longest_prefix() -> None:
    """The mount of a path is the deepest mount point containing it; escapes are decoded."""
    mounts = parse_mounts(
        "/dev/sda1 / ext4 rw 0 0\n"
        "fs@tcp:/lus /lus lustre rw,flock 0 0\n"
        "fs@tcp:/lus2 /lus/my\\040dir lustre rw,noflock 0 0\n"
    )
    assert mount_of(Path("/lus/my dir/out"), mounts) == mounts[2]
    assert mount_of(Path("/lus/other"), mounts) == mounts[1]
    assert mount_of(Path("/lusx"), mounts) == mounts[0]


def test_flock_is_called_in_one_module_only() -> None:
    """One lock primitive: of the package, only store/flock.py imports fcntl (every lock goes through it)."""
    package = Path(__file__).resolve().parents[2] / "gymslurm"
    callers = sorted(
        str(path.relative_to(package)) for path in package.rglob("*.py") if "fcntl" in path.read_text()
    )
    assert callers == ["store/flock.py"]
