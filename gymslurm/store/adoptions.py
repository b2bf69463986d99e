"""Outcome rows another tool appended to a run: NeMo Gym's own collector resuming it (docs/nemo-gym.md).

A run is portable both ways: ``gym eval run ... +resume_from_cache=true`` may resume a run gymslurm
started or touched, and appends its rows to the shared ``<stem>.jsonl`` and ``<stem>_failures.jsonl``.
NeMo Gym reserves no execution and stamps no ``_ng_run_id``, so gymslurm **adopts** each such row: it
gives the row the next execution number of its rollout (the row is newer than anything the run
reserved, since NeMo Gym ran after gymslurm's last turn), raises the reservation table to cover it, and
journals ``(file, line) → execution`` in ``<stem>_adoptions.jsonl``, gymslurm's own file. The outcome
files are never rewritten; a later read takes every adopted row's number from the journal, so the
numbering never moves however many turns each tool takes.

An imported run (a NeMo Gym run gymslurm resumed first) starts its journal with the line counts of
the files it imported: rows before them are numbered by arrival per rollout, failures first (spec
000's legacy rule); unstamped rows after them are adopted like any other. An import written before
this journal existed has none and keeps the legacy rule for every unstamped row.

Trade-off: the journal grows by one line per adopted row (only rows NeMo Gym wrote); a reserved
execution NeMo Gym's turn left without an outcome stays missing, as a killed one does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymslurm.errors import CorruptRecordError, InconsistentHistoryError
from gymslurm.formats import check_version, version_of
from gymslurm.store.atomic import publish_bytes
from gymslurm.store.jsonl import Appender, dump_line, iter_records, read_tail, repair_torn_tail
from gymslurm.store.reservations import ReservationTable

FORMAT_VERSION = version_of("adoptions")
FILES = ("failures", "results")


@dataclass
class Adoptions:
    """The journal as read, and the rows a read found that it does not hold yet (``pending``)."""

    journal: dict[tuple[str, int], int] = field(default_factory=dict)  # (file, line) → execution
    imported: dict[str, int] | None = None  # lines of each file an import numbered by arrival
    counts: Sequence[int] = ()  # executions reserved per rollout when read
    pending: list[tuple[str, int, int, int]] = field(default_factory=list)  # (file, line, rollout, execution)
    _extra: dict[int, int] = field(default_factory=dict)

    def imported_row(self, which: str, line: int) -> bool:
        """Whether a legacy row at ``line`` of ``which`` is one an import numbered by arrival."""
        return self.imported is None or line < self.imported.get(which, 0)

    def execution(self, which: str, line: int, index: int) -> int:
        """The execution number of the unstamped row at ``line`` of ``which`` (rollout ``index``)."""
        known = self.journal.get((which, line))
        if known is not None:
            return known
        extra = self._extra.get(index, 0)
        self._extra[index] = extra + 1
        number = self.counts[index] + extra
        self.pending.append((which, line, index, number))
        return number

    def raised(self, counts: Sequence[int]) -> list[int]:
        """The reservation counts once every pending row is adopted (what selection checks against)."""
        out = list(counts)
        for index, extra in self._extra.items():
            out[index] += extra
        return out


def read_adoptions(path: Path, counts: Sequence[int], *, imported_run: bool) -> Adoptions:
    """The journal at ``path`` (none: nothing adopted yet) for a run with these reservation counts.

    ``imported_run``: the run was imported; without an import line its every unstamped row is legacy.
    """
    adoptions = Adoptions(counts=counts, imported=None if imported_run else {})
    for line, record in iter_records(path):
        check_version(
            "adoptions", record.get("format_version"), f"{path}, line {line + 1}", CorruptRecordError
        )
        if "imported" in record:
            adoptions.imported = _imported(path, line, record["imported"])
            continue
        which, at, number = record.get("file"), record.get("line"), record.get("execution")
        if (
            which not in FILES
            or type(at) is not int
            or type(number) is not int
            or number >= _count(counts, record)
        ):
            raise CorruptRecordError(
                f"{path}, line {line + 1}: not an adoption this run's reservations cover ({record!r}); "
                "restore the run's files together from a backup, or use a new output path"
            )
        adoptions.journal[(which, at)] = number
    return adoptions


def _count(counts: Sequence[int], record: dict[str, Any]) -> int:
    rollout = record.get("rollout")
    return counts[rollout] if type(rollout) is int and 0 <= rollout < len(counts) else -1


def _imported(path: Path, line: int, value: object) -> dict[str, int]:
    if isinstance(value, dict) and all(type(value.get(name)) is int for name in FILES):
        return {name: value[name] for name in FILES}
    raise CorruptRecordError(f"{path}, line {line + 1}: an import line without its files' line counts")


def append_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Append journal lines (the run's writer only, holding the run lock)."""
    repair_torn_tail(path)
    appender = Appender(path, read_tail(path).complete_lines)
    try:
        for record in records:
            appender.append({"format_version": FORMAT_VERSION, **record})
    finally:
        appender.close()


def start_imported(path: Path, lines: dict[str, int]) -> None:
    """Publish an imported run's journal: its one line says how many lines of each file the import
    numbered by arrival (a journal left by an interrupted import is replaced)."""
    record = {"format_version": FORMAT_VERSION, "imported": {name: lines[name] for name in FILES}}
    publish_bytes(path, dump_line(record))


def adoption_record(which: str, line: int, index: int, execution: int) -> dict[str, Any]:
    return {"file": which, "line": line, "rollout": index, "execution": execution}


def adopt_pending(adoptions: Adoptions | None, table: ReservationTable, journal: Path) -> int:
    """Reserve each pending row's execution, then journal them; the number of rows adopted.

    Reserve first, journal after: interrupted between, the rows are adopted again above the
    reservations made (their rollouts' newest execution still holds them).
    """
    pending = adoptions.pending if adoptions is not None else []
    for which, line, index, number in pending:
        if table.reserve(index) != number:
            raise InconsistentHistoryError(
                f"{table.path} changed while the run was read (adopting {which} line {line + 1}); "
                "run the command again"
            )
    if pending:
        append_records(journal, [adoption_record(*row) for row in pending])
    return len(pending)
