"""The one advisory-lock primitive: ``flock`` on a run file opened without following links.

Every lock gymslurm takes (the shard's link lock, a ledger append, the aggregation's submit, the
local backend's job table, the doctor's probe, the collector's run lock) goes through here, so
the way a lock file is opened (``O_NOFOLLOW``, mode 0600, close-on-exec: a child never inherits
a lock) is written once, and ``flock`` itself is called in one place (:func:`lock_fd`; a test keeps
every other module off ``fcntl``). Closing the descriptor releases the lock, whatever ends the process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from gymslurm.store.atomic import open_run_file

LOCK_MODE = 0o600


def try_lock(path: Path, *, create_parent: bool = True) -> int | None:
    """Take ``path``'s exclusive lock without waiting: its descriptor, or None when another holds it."""
    if create_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_run_file(path, os.O_RDWR | os.O_CREAT, LOCK_MODE)
    try:
        taken = lock_fd(fd, wait=False)
    except OSError:
        os.close(fd)
        raise
    if not taken:
        os.close(fd)
        return None
    return fd


def lock_fd(fd: int, *, wait: bool = True) -> bool:
    """Lock an already open descriptor; False when ``wait`` is off and another holds it.

    Any other refusal (the filesystem cannot lock: ENOSYS, ENOLCK, EOPNOTSUPP) is raised as the
    ``OSError`` it is, for the caller to explain.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def held_here(path: Path) -> bool | None:
    """Whether a process of this host holds ``path``'s lock, seen without taking it (``/proc/locks``):
    a probe that took the lock, even for an instant, could turn away the link starting then.

    None when this host cannot tell (no ``/proc/locks``). A lock held on another host of a network
    filesystem is not listed here: the caller asks only about a holder it believes is on this host.
    """
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    inode = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    return any("FLOCK" in line.split() and inode in line.split() for line in table.splitlines())


@contextlib.contextmanager
def locked(path: Path, *, create_parent: bool = True) -> Iterator[int]:
    """Hold ``path``'s exclusive lock (waiting for it) for the ``with`` block; yields the descriptor."""
    if create_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_run_file(path, os.O_RDWR | os.O_CREAT, LOCK_MODE)
    try:
        lock_fd(fd)
        yield fd
    finally:
        os.close(fd)
