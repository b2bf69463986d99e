"""Publish a whole file atomically: readers see the old bytes or the new bytes, never a mix.

Steps: write a temporary file in the target's folder, flush, fsync, copy the target's permission bits,
``rename`` it over the target, fsync the folder. A symlinked target is written through: the rename goes
to the symlink's resolved target, so the link survives and keeps pointing at the new content.

Guarantee: a writer killed at any instant leaves the previous complete file (plus, at worst, a stray
``.<name>.tmp-*`` file that the next publish ignores). Trade-off: one fsync of the file and one of the
folder per publish; fine for manifests and coverage, not for per-record writes (those are appends).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

import orjson

from gymslurm.errors import DiskFullError, StoreError

DEFAULT_MODE = 0o666  # like open(): the umask applies
_CHUNK = 1 << 20


def publish_bytes(target: Path, data: bytes) -> None:
    """Replace ``target`` (through a symlink) with ``data`` atomically, keeping its permission bits."""
    publish_stream(target, (data,))


def publish_stream(target: Path, chunks: Iterable[bytes]) -> int:
    """Replace ``target`` (through a symlink) with the concatenated ``chunks``; return bytes written.

    For outputs too large to hold in memory (aggregation's merged projection); the guarantee is the
    same as :func:`publish_bytes`.
    """
    real = Path(os.path.realpath(target))
    mode = _existing_mode(real)
    tmp = real.with_name(f".{real.name}.tmp-{os.getpid()}")
    written = 0
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb", _CHUNK) as handle:
            for chunk in chunks:
                written += handle.write(chunk)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, real)
        fsync_folder(real.parent)
    except OSError as error:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_error(error, f"could not publish {real}", real.parent) from error
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


def publish_json(target: Path, value: object) -> None:
    """Publish ``value`` as indented, key-sorted JSON with a trailing newline."""
    publish_bytes(target, orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


def publish_text(target: Path, text: str) -> None:
    publish_bytes(target, text.encode())


def fsync_folder(folder: Path) -> None:
    """Make a rename or a creation in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _existing_mode(real: Path) -> int:
    try:
        return stat.S_IMODE(real.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return DEFAULT_MODE & ~umask
