"""Loaded by every Python process of a test's local jobs when this folder is on ``PYTHONPATH``.

With ``GYMSLURM_TEST_READS`` set, it appends one JSON line to that file (one ``write`` with
``O_APPEND``, so processes never interleave) for every ledger read (``Ledger.read``, its path), every
read of a collector's coverage (``store.files.read_coverage``) and when a link's collector starts and
ends (``run_collector`` as ``job/collect_phase.py`` calls it), each with the process id: one link, one pid.
The real functions still run; nothing else changes.
"""

from __future__ import annotations

import json
import os
from typing import Any

_LOG = os.environ.get("GYMSLURM_TEST_READS")


def _note(**what: object) -> None:
    assert _LOG is not None
    fd = os.open(_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (json.dumps({"pid": os.getpid(), **what}) + "\n").encode())
    finally:
        os.close(fd)


def _install() -> None:
    from gymslurm.job import collect_phase
    from gymslurm.launcher import ledger
    from gymslurm.store import files

    read, read_coverage, run_collector = ledger.Ledger.read, files.read_coverage, collect_phase.run_collector

    def counted_read(self: ledger.Ledger) -> list[Any]:
        _note(read=str(self.path))
        return read(self)

    def counted_coverage(*args: Any, **kwargs: Any) -> Any:
        _note(coverage=True)
        return read_coverage(*args, **kwargs)

    def marked_collector(*args: Any, **kwargs: Any) -> Any:
        _note(collector="start")
        try:
            return run_collector(*args, **kwargs)
        finally:
            _note(collector="end")

    ledger.Ledger.read = counted_read  # type: ignore[method-assign]
    files.read_coverage = counted_coverage
    collect_phase.run_collector = marked_collector


if _LOG:
    _install()
