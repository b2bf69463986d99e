"""A small real filesystem that the tests fill: a size-limited tmpfs mounted for one test (as root).

The tests run as root here and in CI, so a full disk is real (``ENOSPC`` from the kernel), never a
patched ``os.write``. ``fill(folder, leave)`` writes a filler file until only ``leave`` bytes stay
free; ``free()`` removes it. tmpfs counts whole pages (4 KiB): a file uses at least one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

PAGE = 4096


@contextlib.contextmanager
def small_filesystem(where: Path, size_kib: int) -> Iterator[Path]:
    """Mount a tmpfs of ``size_kib`` KiB at ``where`` for the block; unmount it afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def free_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def fill(folder: Path, leave: int = 0) -> Path:
    """Write ``folder/.filler`` until at most ``leave`` bytes (rounded down to pages) stay free."""
    filler = folder / ".filler"
    with open(filler, "ab", buffering=0) as handle:
        while free_bytes(folder) > leave:
            chunk = min(1 << 20, max(PAGE, free_bytes(folder) - leave))
            try:
                handle.write(b"\0" * chunk)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                break
    return filler


def free(folder: Path) -> None:
    """Remove the filler: the filesystem has room again."""
    (folder / ".filler").unlink(missing_ok=True)
