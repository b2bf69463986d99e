"""Publish a whole file atomically: readers see the old bytes or the new bytes, never a mix.

Steps: create a temporary file in the target's folder under an unpredictable name
(``.<name>.tmp-<random>``, opened ``O_CREAT | O_EXCL | O_NOFOLLOW`` mode 0600, so a link planted
there is never followed and a name taken is never reused), write, flush, fsync, set the permission
bits, ``rename`` it over the target, fsync the folder.

Links: ``rename`` replaces a symlink at the target itself, never what it points at. Only the run's
*output path* follows its symlink (spec 000: the target is written and the symlink preserved); its
writers pass ``follow_link=True``. Every companion is replaced as a file, so a link planted at
``<stem>_coverage.json`` is replaced by the real file and its target is left alone.

Permissions: a new file gets ``mode`` (default 0600: run files may hold anything a task holds),
whatever the umask; an existing regular file of this user's keeps its bits.

Guarantee: a writer killed at any instant leaves the previous complete file (plus, at worst, a stray
``.<name>.tmp-*`` file that the next publish ignores). Trade-off: one fsync of the file and one of the
folder per publish; fine for manifests and coverage, not for per-record writes (those are appends).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

import orjson

from gymslurm.errors import DiskFullError, StoreError
from gymslurm.redaction import scrub_bytes

DEFAULT_MODE = 0o600  # a new run file is readable by its owner only, whatever the umask
_CHUNK = 1 << 20
# Create, never open an existing file, never follow a link: the temporary's name is unpredictable
# and exclusively ours (O_CLOEXEC: no child process inherits it).
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def publish_bytes(target: Path, data: bytes, *, follow_link: bool = False, mode: int = DEFAULT_MODE) -> None:
    """Replace ``target`` with ``data`` atomically (an existing file keeps its permission bits).

    Every secret this process learned is replaced first (:func:`gymslurm.redaction.scrub_bytes`).
    """
    publish_stream(target, (scrub_bytes(data),), follow_link=follow_link, mode=mode)


def publish_stream(
    target: Path, chunks: Iterable[bytes | memoryview], *, follow_link: bool = False, mode: int = DEFAULT_MODE
) -> int:
    """Replace ``target`` with the concatenated ``chunks``; return bytes written.

    ``follow_link`` is for the output path only (its symlink is kept and its target replaced); any
    other file is replaced as itself. For outputs too large to hold in memory (aggregation's merged
    projection) as for small files; the guarantee is the same.
    """
    real = Path(os.path.realpath(target)) if follow_link else Path(target)
    mode = _existing_mode(real, mode)
    written = 0
    tmp = real
    try:
        tmp, fd = _create_temporary(real)
        with os.fdopen(fd, "wb", _CHUNK) as handle:
            for chunk in chunks:
                written += handle.write(chunk)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, real)
        fsync_folder(real.parent)
    except BaseException as error:  # a stream that raises (a refused row) leaves no temporary file
        if tmp != real:
            with contextlib.suppress(OSError):
                tmp.unlink()
        if isinstance(error, OSError):
            raise write_error(error, f"could not publish {real}", real.parent) from error
        raise
    return written


# errno values that mean "no room to write": the disk (or the user's quota) is full.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def write_error(error: OSError, what: str, folder: Path) -> StoreError:
    """The store's error for a failed write of a run file: ``DiskFullError`` when no space was left.

    The one translation of a write's OSError: ``what`` names the file and the action ("could not
    append to X"); the message says what to do.
    """
    if error.errno in NO_SPACE:
        return DiskFullError(
            f"disk full: {what} ({error.strerror}); the filesystem holding {folder} has no space or "
            "quota left. Every outcome saved before this is intact: free space, then resume with "
            "+resume_from_cache=true"
        )
    return StoreError(
        f"{what}: {error.strerror or error}; check that the folder {folder} is writable and has space, "
        "then run again"
    )


def open_run_file(path: Path, flags: int, mode: int = DEFAULT_MODE) -> int:
    """``os.open`` of a run file that never follows a link (``O_NOFOLLOW``); a new file gets ``mode``.

    Every writer that opens a run file in place (the lock, appends, the reservation table, ledgers)
    opens it here, so a symlink planted at its name is refused instead of written through.
    """
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise StoreError(
                f"{path} is a symbolic link; gymslurm never writes a run file through a link (only the "
                "output path itself may be one): remove the link, find out who planted it, then run again"
            ) from None
        raise


def _create_temporary(real: Path) -> tuple[Path, int]:
    """A new file ``.<name>.tmp-<random>`` beside ``real``, created exclusively, mode 0600."""
    for _ in range(100):
        tmp = real.with_name(f".{real.name}.tmp-{secrets.token_hex(8)}")
        try:
            return tmp, os.open(tmp, _CREATE_FLAGS, 0o600)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {real}")


def publish_json(target: Path, value: object, *, follow_link: bool = False) -> None:
    """Publish ``value`` as indented, key-sorted JSON with a trailing newline."""
    data = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    publish_bytes(target, data, follow_link=follow_link)


def publish_text(target: Path, text: str) -> None:
    publish_bytes(target, text.encode())


def fsync_folder(folder: Path) -> None:
    """Make a rename or a creation in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_files(paths: Iterable[Path]) -> None:
    """Make what was written to ``paths`` durable together: one ``syncfs`` per filesystem (group commit).

    Why: an ``fsync`` per file costs a device flush each (1,000 ledgers of ``gymslurm cancel``: 7 s);
    one ``syncfs`` flushes every file written on that filesystem in one commit (milliseconds). Where
    ``syncfs`` is missing (not Linux) or fails, each file is fsynced as before. The guarantee of the
    caller is unchanged: nothing acts on the records (``scancel``) before this returns.
    """
    import ctypes

    by_device: dict[int, list[Path]] = {}
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            by_device.setdefault(os.stat(path).st_dev, []).append(path)
    for group in by_device.values():
        fd = os.open(group[0], os.O_RDONLY | os.O_CLOEXEC)
        try:
            try:
                done = ctypes.CDLL(None, use_errno=True).syncfs(ctypes.c_int(fd))
            except (OSError, AttributeError):
                done = -1
        finally:
            os.close(fd)
        if done != 0:
            for path in group:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


def _existing_mode(real: Path, default: int) -> int:
    """An existing regular file's permission bits, when it is this user's; ``default`` for a new file
    or anything else (a link, another user's file: their modes are never carried to our data)."""
    try:
        info = real.lstat()
    except FileNotFoundError:
        return default
    mine = stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
    return stat.S_IMODE(info.st_mode) if mine else default


FALLOC_FL_KEEP_SIZE = 1
RESERVE_BYTES = 64 * 1024  # room kept for an append-only file's next records when the disk fills


def reserve(fd: int, nbytes: int = RESERVE_BYTES) -> bool:
    """Allocate ``nbytes`` past the end of an open file without changing its size (best effort).

    ``fallocate(FALLOC_FL_KEEP_SIZE)``: later appends land in blocks the file already owns, so a
    ledger can still record "disk full at PATH" when the filesystem has no free block left. False
    where the filesystem or the platform cannot (the append then needs free space as before).
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)  # this process's own symbols: libc's fallocate
        size = os.fstat(fd).st_size
        done = libc.fallocate(
            ctypes.c_int(fd), ctypes.c_int(FALLOC_FL_KEEP_SIZE), ctypes.c_long(size), ctypes.c_long(nbytes)
        )
    except (OSError, AttributeError):
        return False
    return bool(done == 0)
