"""Every shard's chain records as ``status`` and the report read them (one listing of ``shards/``, the
run's records once), each built when first asked for, and which chains are their queued array
submission alone (issue 32: a held 10,000-shard run's rows are made without their records)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from gymslurm.launcher.ledger import Record
from gymslurm.launcher.rundir import RunDir, folder_listing


class RunChains(Sequence[list[Record]]):
    """Every shard's chain records (one listing of ``shards/``, the run's records read once), each
    shard's built when first asked for: ``status`` folds them and the report draws its timeline from
    the same object. :meth:`bare_jobs` names the chains that are their array submission alone, which
    ``status`` shows without building their records (:func:`queued_rows`)."""

    def __init__(self, run: RunDir, shards: int) -> None:
        self.run, self.shards = run, shards
        self.array = run.read_array()
        self.present = folder_listing(run.root / "shards")
        self.shared = run.run_ledger.read() if self.array is not None else []
        self._built: dict[int, list[Record]] = {}

    def __len__(self) -> int:
        return self.shards

    @overload
    def __getitem__(self, index: int) -> list[Record]: ...

    @overload
    def __getitem__(self, index: slice) -> list[list[Record]]: ...

    def __getitem__(self, index: int | slice) -> list[Record] | list[list[Record]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.shards))]
        shard = index + self.shards if index < 0 else index
        if not 0 <= shard < self.shards:
            raise IndexError(index)
        records = self._built.get(shard)
        if records is None:
            records = self.run.chain_records(shard, self.array, self.present, self.shared)
            self._built[shard] = records
        return records

    @property
    def built(self) -> list[int]:
        """The shards whose records were built so far (the bench's and the tests' count), in order."""
        return sorted(self._built)

    def bare_jobs(self, shard: int) -> list[str] | None:
        """The first link and spares of a shard whose chain is its array submission alone (no ledger
        folder, no run-level record), in submission order: its records are exactly one ``Submitted``
        of each (:meth:`RunDir.chain_records`). None for any other chain."""
        if self.array is None or self.shared or f"{shard:03d}" in self.present:
            return None
        return self.array.first_links(shard) or None

    def bare_chains(self) -> Iterator[tuple[int, list[str]]]:
        """Every shard with :meth:`bare_jobs`, and them, in one pass over the arrays (shard order
        within each array): the ids made per array, not a lookup of its part per shard."""
        if self.array is None or self.shared:
            return
        present = self.present
        for part in self.array.arrays:
            arrays = [part.job_id, *(part.spares or [])]
            for shard in range(part.first, part.first + part.size):
                if not present or f"{shard:03d}" not in present:
                    task = f"_{shard - part.base}"
                    yield shard, [job + task for job in arrays]


def read_chains(run: RunDir, shards: int) -> RunChains:
    """Every shard's chain records (:class:`RunChains`: each read once, when first asked for)."""
    return RunChains(run, shards)
