"""The run lock: one collector per output, released by the kernel when its holder dies.

``RunLock`` takes ``flock(LOCK_EX | LOCK_NB)`` on ``<stem>_run.lock`` (through the one primitive,
``store/flock.py``) and then writes one JSON line
naming the holder (pid, host, Slurm job, time). A refused acquisition raises :class:`RunLockedError`
quoting that line. The file is never unlinked (unlinking would let two processes lock two different
inodes); a file left by a dead process does not block, because the kernel dropped its lock.

The filesystem must give flock across every writer node. Before locking we read ``/proc/mounts``:
a Lustre ``noflock`` mount cannot lock at all (:class:`LockUnsupportedError`); a ``localflock`` mount
locks one node only, so it is refused too unless the caller passes ``allow_localflock=True`` (for a
deliberately single-node setup; a warning is logged). An flock call the filesystem rejects (ENOSYS,
ENOLCK, EINVAL, EOPNOTSUPP) is also :class:`LockUnsupportedError`. Decision: refuse by default,
because collectors of a Slurm chain can land on different nodes and a one-node lock would silently
allow two writers.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import orjson

from gymslurm.clock import utc_now
from gymslurm.errors import LockUnsupportedError, RunLockedError, StoreError
from gymslurm.store.atomic import NO_SPACE, open_run_file, write_error
from gymslurm.store.flock import LOCK_MODE, lock_fd

log = logging.getLogger(__name__)
_UNSUPPORTED = {errno.ENOSYS, errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP}


@dataclass(frozen=True, slots=True)
class Mount:
    point: str
    fstype: str
    options: frozenset[str]


def parse_mounts(text: str) -> list[Mount]:
    """Parse ``/proc/mounts`` text (octal escapes such as ``\\040`` decoded)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
            mounts.append(Mount(point, fields[2], frozenset(fields[3].split(","))))
    return mounts


def mount_of(path: Path, mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path``: the longest mount point that is a prefix of it (last one wins)."""
    best: Mount | None = None
    target = str(path)
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        inside = target == point or target.startswith(point if point == "/" else point + "/")
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = mount
    return best


def flock_problem(mount: Mount | None) -> str | None:
    """``"noflock"`` / ``"localflock"`` when the mount cannot lock across nodes, else None."""
    if mount is None:
        return None
    if "noflock" in mount.options:
        return "noflock"
    if "localflock" in mount.options:
        return "localflock"
    return None


def _read_mounts() -> list[Mount]:
    try:
        return parse_mounts(Path("/proc/mounts").read_text())
    except OSError:
        return []


class RunLock:
    """Exclusive ownership of one output path for the duration of a ``with`` block."""

    def __init__(self, lock_path: Path, *, allow_localflock: bool = False, mounts: list[Mount] | None = None):
        self.path = lock_path
        self.allow_localflock = allow_localflock
        self._mounts = mounts
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self) -> None:
        self._check_filesystem()
        try:
            fd = open_run_file(self.path, os.O_RDWR | os.O_CREAT, LOCK_MODE)
        except OSError as error:
            if error.errno in NO_SPACE:
                what = f"cannot create the run lock {self.path}"
                raise write_error(error, what, self.path.parent) from error
            raise StoreError(f"cannot open the run lock {self.path}: {error}; check permissions") from error
        try:
            taken = lock_fd(fd, wait=False)
        except OSError as error:
            os.close(fd)
            if error.errno == errno.EACCES:  # what some network filesystems answer for "held"
                raise RunLockedError(self._refusal()) from None
            if error.errno in _UNSUPPORTED:
                raise LockUnsupportedError(
                    f"the filesystem holding {self.path} does not support flock ({error.strerror}); "
                    "put the output on a filesystem mounted with global flock support"
                ) from None
            raise StoreError(f"cannot lock {self.path}: {error}") from error
        if not taken:
            os.close(fd)
            raise RunLockedError(self._refusal())
        self._fd = fd
        self._write_holder()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file stays
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _check_filesystem(self) -> None:
        mounts = _read_mounts() if self._mounts is None else self._mounts
        mount = mount_of(self.path.parent.resolve(), mounts)
        problem = flock_problem(mount)
        if problem is None or mount is None:
            return
        where = f"{mount.point} ({mount.fstype}, {problem})"
        if problem == "noflock":
            raise LockUnsupportedError(
                f"the output folder {self.path.parent} is on {where}, which cannot hold the run lock; "
                "move the output to a filesystem mounted with 'flock'"
            )
        if not self.allow_localflock:
            raise LockUnsupportedError(
                f"the output folder {self.path.parent} is on {where}: the lock protects one node only and "
                "collectors on different nodes could both write this run. Move the output to a filesystem "
                "mounted with 'flock', or allow a local lock explicitly for a single-node setup"
            )
        log.warning("run lock %s is on %s: it protects this node only", self.path, where)

    def _write_holder(self) -> None:
        assert self._fd is not None
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "acquired_at": utc_now(),
        }
        data = orjson.dumps(holder) + b"\n"
        try:  # over the old line first, then cut: a failed write never leaves a lock naming no holder
            if os.pwrite(self._fd, data, 0) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.ftruncate(self._fd, len(data))
        except OSError as error:
            self.release()
            what = f"could not record the holder of the run lock {self.path}"
            raise write_error(error, what, self.path.parent) from error

    def _refusal(self) -> str:
        holder = read_holder(self.path)
        who = (
            f"pid {holder.get('pid')} on host {holder.get('host')}"
            + (f", Slurm job {holder['slurm_job_id']}" if holder.get("slurm_job_id") else "")
            + (f", since {holder['acquired_at']}" if holder.get("acquired_at") else "")
            if holder
            else "a process that has not recorded itself yet"
        )
        return (
            f"another collector holds the run lock {self.path}: {who}. Wait for it to finish or stop "
            "it; to run in parallel, give each collector its own output path and aggregate afterwards"
        )


def read_holder(path: Path) -> dict[str, object]:
    """The holder line of a lock file, or {} when absent or unreadable."""
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}
