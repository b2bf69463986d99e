"""What a watch decides, apart from any I/O: which checkpoints are ready, what each one needs next.

A watch (``gymslurm watch``, docs/watch.md) looks at a folder or a glob every interval. Each
candidate (a child of the folder, or a glob match) is described by a :class:`Candidate` (its files'
sizes and modification times, read by the caller); :func:`ready` says whether a trainer has finished
writing it, by one of three rules (:class:`FinderSettings`):

- ``marker``: a file of that name is inside the checkpoint folder (``READY``, ``.done``...);
- ``pattern``: its name matches the pattern at all (a trainer that writes ``step_100.tmp`` and
  renames it ``step_100`` when complete);
- ``settle``: nothing in it changed size or time for ``settle_s`` seconds (a trainer that writes in
  place and leaves no marker).

Every rule also needs the name to match ``pattern`` (default ``*``) and the candidate to hold a
file. A checkpoint is known by its :func:`digest`, of its resolved path: a folder written once is one
checkpoint, whatever is added to it later, so it is evaluated once. :func:`fold` turns the watch's
ledger (store/watch_ledger.py) into each checkpoint's state and :func:`next_step` says what a
checkpoint needs next; :func:`new_checkpoints` what to claim. Table-tested in
tests/unit/test_watch_rules.py.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gymslurm.errors import ConfigError

FinderMode = Literal["marker", "pattern", "settle"]
CHECKPOINT_PLACEHOLDER = "{checkpoint}"
_INTERVAL = re.compile(r"^(\d+)\s*(s|m|h)?$")


@dataclass(frozen=True)
class FinderSettings:
    """How a watch tells a finished checkpoint from one still being written."""

    mode: FinderMode = "settle"
    pattern: str = "*"
    marker: str = "READY"
    settle_s: float = 120.0


@dataclass(frozen=True)
class FileEntry:
    """One file of a candidate: its path inside the candidate, size and modification time."""

    relpath: str
    size: int
    mtime: float


@dataclass(frozen=True)
class Candidate:
    """A folder (or a file) that may be a checkpoint: its resolved path, name and files."""

    path: str
    name: str
    files: tuple[FileEntry, ...]


def ready(candidate: Candidate, finder: FinderSettings, now: float) -> bool:
    """True when ``candidate`` is a finished checkpoint by ``finder``'s rule at time ``now``."""
    if not candidate.files or not fnmatch.fnmatchcase(candidate.name, finder.pattern):
        return False
    if finder.mode == "marker":
        return any(entry.relpath == finder.marker for entry in candidate.files)
    if finder.mode == "pattern":
        return True
    newest = max(entry.mtime for entry in candidate.files)
    return now - newest >= finder.settle_s


def digest(path: str) -> str:
    """A checkpoint's identity in the ledger: the sha256 of its resolved path (16 hex digits)."""
    return hashlib.sha256(path.encode()).hexdigest()[:16]


def parse_interval(text: str) -> int:
    """Seconds of ``30s``, ``5m``, ``1h`` or ``90`` (seconds); at least 10 s."""
    match = _INTERVAL.match(text.strip())
    if not match:
        raise ConfigError(f"--every {text!r}: give a number of seconds, minutes or hours (30s, 5m, 1h)")
    seconds = int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]
    if seconds < 10:
        raise ConfigError(f"--every {text!r}: at least 10s (the scheduler is asked once per interval)")
    return seconds


@dataclass
class CheckpointState:
    """Everything the ledger says of one checkpoint, in claim order."""

    digest: str
    checkpoint: str
    order: int
    convert_job: str | None = None
    converted: str | None = None
    convert_failed: str | None = None
    run: str | None = None
    compared: dict[str, Any] | None = None


@dataclass
class WatchState:
    """The watch as its ledger tells it: its checkpoints, its tick jobs, whether it was cancelled."""

    checkpoints: dict[str, CheckpointState] = field(default_factory=dict)
    ticks: list[str] = field(default_factory=list)
    cancelled: bool = False

    def ordered(self) -> list[CheckpointState]:
        """The checkpoints in the order they were claimed."""
        return sorted(self.checkpoints.values(), key=lambda c: c.order)


def fold(records: Iterable[dict[str, Any]]) -> WatchState:
    """The watch's state from its ledger records (a record of an unknown checkpoint is ignored)."""
    state = WatchState()
    for record in records:
        kind, key = record["kind"], str(record.get("digest"))
        if kind == "claimed" and key not in state.checkpoints:
            state.checkpoints[key] = CheckpointState(key, record["checkpoint"], len(state.checkpoints))
        elif kind in ("tick", "scheduled"):
            state.ticks.append(record["job"])
        elif kind == "cancelled":
            state.cancelled = True
        elif key in state.checkpoints:
            _apply(state.checkpoints[key], kind, record)
    return state


def _apply(checkpoint: CheckpointState, kind: str, record: dict[str, Any]) -> None:
    if kind == "converting":
        checkpoint.convert_job = record["job"]
    elif kind == "converted":
        checkpoint.converted = record["checkpoint"]
    elif kind == "convert_failed":
        checkpoint.convert_failed = record.get("reason") or "the conversion job failed"
    elif kind == "submitted" and checkpoint.run is None:
        checkpoint.run = record["run"]
    elif kind == "compared" and checkpoint.compared is None:
        checkpoint.compared = record.get("result") or {}


Step = Literal["convert", "check_convert", "submit", "await_run", "compare", "done", "failed"]


def next_step(checkpoint: CheckpointState, converts: bool, run_ended: bool) -> Step:
    """What ``checkpoint`` needs next (``converts``: the watch has a conversion step). Until its
    conversion is known to have completed, a converted checkpoint's step is the conversion's: its
    suite run (on Slurm submitted with the conversion job, ``afterok``) is not compared before."""
    if checkpoint.convert_failed is not None:
        return "failed"
    if checkpoint.compared is not None:
        return "done"
    if converts and checkpoint.converted is None:
        return "check_convert" if checkpoint.convert_job is not None else "convert"
    if checkpoint.run is not None:
        return "compare" if run_ended else "await_run"
    return "submit"


def earlier_compared(state: WatchState, checkpoint: CheckpointState) -> bool:
    """Every checkpoint claimed before ``checkpoint`` is compared (or failed), so its "previous" is the
    checkpoint before it in claim order even when a later run ends first."""
    return all(
        c.compared is not None or c.convert_failed is not None
        for c in state.ordered()
        if c.order < checkpoint.order
    )


def new_checkpoints(state: WatchState, ready_paths: Sequence[str]) -> list[str]:
    """The ready paths not claimed yet, sorted (a trainer's step names sort in step order when padded)."""
    return sorted(p for p in set(ready_paths) if digest(p) not in state.checkpoints)


TICK_LOOKAHEAD = 2  # a tick keeps this many ticks queued behind it: any single one may be killed
TICKS_ASKED = 16  # the newest tick jobs of the ledger asked about: bounded whatever the watch's age


@dataclass(frozen=True)
class TickPlan:
    """The tick jobs to queue: the first ``afterany`` ``after`` (None: no dependency), each later one
    ``afterany`` the one queued before it; the n-th not before ``begins_s[n]`` seconds from now."""

    after: str | None
    begins_s: tuple[int, ...]


def ticks_to_queue(
    ticks: Sequence[str], pending: Iterable[str], me: str, every_s: int, lookahead: int = TICK_LOOKAHEAD
) -> TickPlan:
    """What ``me`` queues so that ``lookahead`` ticks the ledger knows wait behind it, each ``afterany``
    the one before and one interval later: a killed or cancelled queued tick releases its spare
    (afterany), so the watch survives any single lost tick job with no human command.

    ``pending``: the ledger's tick jobs the scheduler shows pending (a running one is no spare: it may
    be the one about to be killed). Bounded: the chain never queues more than ``lookahead``.
    """
    waiting = set(pending) - {me}
    queued = list(dict.fromkeys(job for job in ticks if job in waiting))
    begins = tuple(n * every_s for n in range(len(queued) + 1, lookahead + 1))
    return TickPlan(queued[-1] if queued and begins else None, begins)


def recent_ticks(ticks: Sequence[str]) -> list[str]:
    """The newest :data:`TICKS_ASKED` distinct tick jobs of the ledger: those that may still be queued."""
    return list(dict.fromkeys(reversed(ticks)))[:TICKS_ASKED]


def references(state: WatchState) -> tuple[str | None, str | None]:
    """The run of the previous compared checkpoint and the run of the best (highest ``score``) one."""
    compared = [c for c in state.ordered() if c.compared is not None and c.run is not None]
    if not compared:
        return None, None
    scored = [c for c in compared if isinstance((c.compared or {}).get("score"), int | float)]
    best = max(scored, key=lambda c: (c.compared or {})["score"]) if scored else None
    return compared[-1].run, best.run if best is not None else None


def with_checkpoint(value: Any, path: str) -> Any:
    """``value`` (a suite file's stack, as YAML data) with every ``{checkpoint}`` replaced by ``path``."""
    if isinstance(value, str):
        return value.replace(CHECKPOINT_PLACEHOLDER, path)
    if isinstance(value, list):
        return [with_checkpoint(item, path) for item in value]
    if isinstance(value, dict):
        return {key: with_checkpoint(item, path) for key, item in value.items()}
    return value


def uses_checkpoint(value: Any) -> bool:
    """True when ``{checkpoint}`` appears somewhere in ``value``."""
    return with_checkpoint(value, "\0") != value
