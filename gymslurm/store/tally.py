"""The run's tally (``<run>/tally.jsonl``): how many chains finished and the GPU-hours links spent,
so a link answers "is every chain finished?" and "is the budget spent?" without reading every shard.

Why: a link that read every shard's ledger to learn whether the run is over, or what the run spent,
did work that grows with the run (10,000 ledgers per finishing link). Here each finishing chain and
each decided link appends one line carrying the run's new totals, computed from the line before it
under the file's exclusive ``flock``; a reader reads the last line only (a seek from the end).

Format (version 1): one JSON object per line, ``{"v": 1, "at", "event", "shard", "finished",
"gpu_hours"}``; ``event`` is ``finished`` (a chain finished: ``finished`` + 1), ``spent`` (a link
decided: its GPU-hours added) or ``recount`` (``finished`` set from a read of every ledger).
Append-only; a torn last line is cut before the next append and ignored on read.

What it promises: ``finished`` is never below the number of chains finished, since every chain that
finishes appends before anyone asks (it may be above: a chain counted twice, a chain resubmitted),
so a count below the shards is a sure "not yet", and a count at or above them is checked by reading
every ledger once (which writes a ``recount`` when it was above). ``gpu_hours`` is what the decided
links spent (a link killed between its decision and its line is missing: under by one link).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from gymslurm.clock import utc_now_ms
from gymslurm.errors import CorruptRecordError
from gymslurm.formats import version_of, versioned_object
from gymslurm.store.atomic import open_run_file
from gymslurm.store.flock import lock_fd
from gymslurm.store.jsonl import cut_torn_tail

TALLY_VERSION = version_of("run_tally")
_TAIL_BYTES = 4096  # a line is under 200 bytes: the last complete one is in the file's last 4 KiB


class TallyLine(BaseModel):
    """One line of the tally: what happened and the run's totals after it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: int = TALLY_VERSION
    at: str = ""
    event: Literal["finished", "spent", "recount"]
    shard: int | None = None
    finished: int = 0
    gpu_hours: float = 0.0


class RunTally:
    """The run's tally file: append an event (totals updated under the lock), read the last totals."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> TallyLine:
        """The totals as the last complete line says (zeros when there is none)."""
        try:
            fd = open_run_file(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return TallyLine(event="recount")
        try:
            return _last_line(fd, self.path)
        finally:
            os.close(fd)

    def chain_finished(self, shard: int) -> TallyLine:
        """A chain finished: one more."""
        return self._append(
            lambda last: last.model_copy(
                update={"event": "finished", "shard": shard, "finished": last.finished + 1}
            )
        )

    def spent(self, shard: int | None, gpu_hours: float) -> TallyLine:
        """Links of ``shard`` (None: the aggregation) decided, having held ``gpu_hours``."""
        return self._append(
            lambda last: last.model_copy(
                update={"event": "spent", "shard": shard, "gpu_hours": round(last.gpu_hours + gpu_hours, 6)}
            )
        )

    def recount(self, finished: int) -> TallyLine:
        """The finished chains as a read of every ledger counted them."""
        return self._append(
            lambda last: last.model_copy(update={"event": "recount", "shard": None, "finished": finished})
        )

    def _append(self, after: object) -> TallyLine:
        assert callable(after)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_run_file(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            lock_fd(fd)
            cut_torn_tail(fd)
            line: TallyLine = after(_last_line(fd, self.path)).model_copy(update={"at": utc_now_ms()})
            os.write(fd, orjson.dumps(line.model_dump(mode="json")) + b"\n")
            os.fsync(fd)
            return line
        finally:
            os.close(fd)


def _last_line(fd: int, path: Path) -> TallyLine:
    size = os.fstat(fd).st_size
    start = max(0, size - _TAIL_BYTES)
    tail = os.pread(fd, size - start, start)
    complete = tail[: tail.rfind(b"\n") + 1]
    lines = [raw for raw in complete.split(b"\n") if raw.strip()]
    if not lines:
        return TallyLine(event="recount")
    data = versioned_object(lines[-1], "run_tally", f"{path}, its last line", CorruptRecordError)
    try:
        return TallyLine.model_validate(data)
    except ValidationError as error:
        raise CorruptRecordError(
            f"{path}: its last line is not a tally line ({error}); move the file aside: the next link "
            "that finds every chain finished writes the count again"
        ) from None
