"""Where a run's logs are: one listing of ``logs/``, so ``status`` stays one pass however many shards.

Split from views/status.py (the status document names each shard's job log and server logs from it).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from gymslurm.launcher.rundir import RunDir
from gymslurm.site.slurm import split_job_id


@dataclass(frozen=True)
class LogIndex:
    """Where a run's logs are (one listing of ``logs/``, so status stays one pass however many shards)."""

    folder: Path
    names: frozenset[str]

    @classmethod
    def of(cls, run: RunDir) -> LogIndex:
        """List ``logs/`` once."""
        folder = run.root / "logs"
        try:
            return cls(folder, frozenset(os.listdir(folder)))
        except OSError:
            return cls(folder, frozenset())

    def job_log(self, shard: int | None, job: str | None) -> str | None:
        """A job's output file (``logs/shard-NNN-<job>.out``; past the first array
        ``logs/shard-BASE+TASK-<job>.out``), if it exists. Slurm names the file by its own id: a run
        across clusters' ``b:12_3`` is ``12_3`` there, and the same id of another cluster is another
        shard's file, told apart by the shard the name gives."""
        if job is None:
            return None
        raw = split_job_id(job)[1]
        name = f"{'aggregate' if shard is None else f'shard-{shard:03d}'}-{raw}.out"
        if name in self.names:
            return str(self.folder / name)
        found = [n for n in self._by_job.get(raw, []) if _log_shard(n) == shard] if shard is not None else []
        return str(self.folder / found[0]) if found else None

    @functools.cached_property
    def _by_job(self) -> dict[str, list[str]]:
        by_job: dict[str, list[str]] = {}
        for n in self.names:
            if n.startswith("shard-") and n.endswith(".out"):
                by_job.setdefault(n.rsplit("-", 1)[1][:-4], []).append(n)
        return by_job

    def server_logs(self, shard: int) -> list[str]:
        """The shard's Environment Server logs (``logs/server-<name>-sNNN.log``)."""
        return self._servers.get(f"s{shard:03d}", [])

    @functools.cached_property
    def _servers(self) -> dict[str, list[str]]:
        """Server logs by shard (``sNNN``), from one pass over the listing: a pass per shard would be
        quadratic at 10,000 shards, whose ``logs/`` holds a file per link."""
        found: dict[str, list[str]] = {}
        for name in sorted(self.names):
            if name.startswith("server-") and name.endswith(".log"):
                found.setdefault(name[:-4].rsplit("-", 1)[-1], []).append(str(self.folder / name))
        return found


def _log_shard(name: str) -> int | None:
    """The shard a job log's name gives: ``shard-007-...`` is 7, ``shard-1001+5-...`` is 1006."""
    head = name[len("shard-") :].split("-", 1)[0]
    base, _, task = head.partition("+")
    if not base.isdigit() or (task and not task.isdigit()):
        return None
    return int(base) + (int(task) if task else 0)
