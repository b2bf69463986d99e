"""What a link reads of the collector's files of its shard, always through the store.

A file the store refuses (unreadable, a foreign version) is said on the job's output and read as
absent: the chain never stops on it, it only loses the evidence of progress.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gymslurm.errors import StoreError
from gymslurm.job.heartbeat import log
from gymslurm.launcher.decide import Progress
from gymslurm.store import live
from gymslurm.store.paths import RunPaths, file_identity

if TYPE_CHECKING:
    from gymslurm.coverage import Coverage


def saved_coverage(output: Path) -> Coverage | None:
    """The collector's coverage of ``output``, read through the store; None when none is usable.

    An unreadable or foreign-version file is said on the job's output and treated as no coverage
    (no evidence of progress), as a missing one is: the chain never stops on it.
    """
    from gymslurm.store.files import read_coverage  # at the link's end: keeps chain-step's start fast

    try:
        return read_coverage(RunPaths.for_output(output))
    except StoreError as error:
        log(f"no usable coverage: {error}")
        return None


def read_progress(output: Path) -> Progress | None:
    """The progress counts of the collector's coverage file, or None when it has none yet."""
    snapshot = file_identity(RunPaths.for_output(output).coverage)  # before reading: never newer than it
    coverage = saved_coverage(output)
    if coverage is None:
        return None
    return Progress(
        successful=coverage.successful,
        failed=coverage.failed,
        intentionally_omitted=coverage.intentionally_omitted,
        progress_outcomes_recorded=coverage.progress_outcomes_recorded,
        snapshot=repr(snapshot),
    )


def ledger_resubmit_offset(output: Path) -> str | None:
    """The failure-line count of the collector's ``<stem>_resubmit_offset`` as a decision record keeps it
    (None: no file), not the store's ``(failures, results)`` pair that a resume reads.

    Parsed by the store's one reader; a malformed file is said on the job's output and kept as None.
    """
    from gymslurm.store.files import read_resubmit_offset

    paths = RunPaths.for_output(output)
    if not paths.resubmit_offset.exists():
        return None
    try:
        failures, _ = read_resubmit_offset(paths)
    except StoreError as error:
        log(f"unreadable resubmit offset: {error}")
        return None
    return str(failures)


def saved_bytes(output: Path) -> int:
    """The size of the shard's outcome files now (see :func:`gymslurm.store.store.saved_outcome_bytes`)."""
    from gymslurm.store.paths import saved_outcome_bytes  # imported late: keeps chain-step's start fast

    return saved_outcome_bytes(RunPaths.for_output(output))


def read_live_progress(output: Path) -> live.LiveProgress | None:
    """The collector's live progress record of ``output`` (None when absent or unreadable)."""
    try:
        return live.read_progress(live.progress_path(output))
    except StoreError:
        return None


def collector_busy_s(output: Path, started_epoch: float) -> float:
    """The seconds the collector started since ``started_epoch`` had requests in flight (0: none)."""
    try:
        record = live.read_progress(live.progress_path(output))
    except StoreError:
        record = None
    return record.busy_s if record is not None and record.started_epoch >= started_epoch - 1.0 else 0.0
