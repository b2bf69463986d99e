"""``gymslurm logs RUN [--shard N | --aggregate] [--link K] [--follow]``: a link's job and server logs.

Why: the logs a user needs sit in ``<run>/logs/`` under names they should not have to rebuild
(``shard-NNN-<job>.out`` per job, appended across requeues; ``server-<name>-sNNN.log`` per shard and
server, appended across links). The link is picked from the shard's ledger (no scheduler query):
``--link 1`` is the first job of the chain that started, ``--link -1`` (default) the newest.
``--follow`` keeps printing what is appended until the link has written its decision (or Ctrl-C).

:func:`pick_job` and :func:`log_files` are pure; :func:`show` does the reading and printing.
:class:`LogIndex` finds every shard's logs from one listing of ``logs/`` (``status``'s ``log`` column).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gymslurm.errors import ConfigError
from gymslurm.launcher.ledger import Ledger, Record, Started, summarize
from gymslurm.launcher.rundir import RunDir
from gymslurm.site.slurm import split_job_id


def chain_links(records: list[Record]) -> list[str]:
    """The chain's links in order: the jobs that started, else (none started yet) the jobs submitted."""
    started = list(dict.fromkeys(r.job_id for r in records if isinstance(r, Started)))
    return started or summarize(records).jobs


def pick_job(jobs: list[str], link: int, where: str) -> str:
    """The job of link ``link`` (1-based; negative counts from the newest) of :func:`chain_links`."""
    if not jobs:
        raise ConfigError(f"{where} has no job yet: nothing was submitted (its ledger is empty)")
    if link == 0 or not -len(jobs) <= link <= len(jobs):
        raise ConfigError(f"{where} has {len(jobs)} link(s): --link takes 1..{len(jobs)} or -1..-{len(jobs)}")
    return jobs[link - 1 if link > 0 else link]


@dataclass(frozen=True)
class LogFiles:
    """A link's job log and the Environment Server logs of its shard."""

    job: str
    job_log: Path
    server_logs: list[Path]


def log_files(run: RunDir, shard: int | None, job: str, listing: list[str]) -> LogFiles:
    """Where a job's log and its shard's server logs are, given the names in ``logs/`` (pure)."""
    folder = run.root / "logs"
    slurm_id = split_job_id(job)[1]  # a run across clusters names the cluster (b:12_3); %A_%a does not
    job_log = folder / f"{'aggregate' if shard is None else f'shard-{shard:03d}'}-{slurm_id}.out"
    if shard is not None and job_log.name not in listing:  # past the first array: shard-BASE+TASK-<job>.out
        named = (folder / n for n in listing if n.startswith("shard-") and n.endswith(f"-{slurm_id}.out"))
        job_log = next(named, job_log)
    suffix = "" if shard is None else f"-s{shard:03d}.log"
    servers = sorted(
        folder / n for n in listing if shard is not None and n.startswith("server-") and n.endswith(suffix)
    )
    return LogFiles(job, job_log, servers)


def _ledger(run: RunDir, shard: int | None) -> Ledger:
    return run.aggregate_ledger if shard is None else run.ledger(shard)


def show(run: RunDir, shard: int | None, link: int, follow: bool, out: IO[str] = sys.stdout) -> int:
    """Print the link's job log then its servers' logs; with ``follow``, keep printing until it decided."""
    info = run.read_info()
    if shard is not None and not 0 <= shard < info.shards:
        raise ConfigError(f"run {run.name} has shards 0..{info.shards - 1}, not {shard}")
    where = f"run {run.name} {'aggregation' if shard is None else f'shard {shard}'}"
    records = _ledger(run, shard).read() if shard is None else run.chain_records(shard, run.read_array())
    job = pick_job(chain_links(records), link, where)
    folder = run.root / "logs"
    listing = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    files = log_files(run, shard, job, listing)
    offsets: dict[Path, int] = {}
    for path in [files.job_log, *files.server_logs]:
        offsets[path] = _print_file(path, out, 0, header=True)
    if not files.server_logs and shard is not None:
        print(
            f"(no server logs: the benchmark's servers are given by url, or none started yet in {folder})",
            file=out,
        )
    while follow and not _settled(run, shard, job):
        time.sleep(1.0)
        for path in [files.job_log, *files.server_logs]:
            offsets[path] = _print_file(path, out, offsets[path], header=False)
    if follow:
        for path in [files.job_log, *files.server_logs]:
            offsets[path] = _print_file(path, out, offsets[path], header=False)
        print(f"(job {job} has written its decision, or the chain ended; stopped following)", file=out)
    return 0


def _settled(run: RunDir, shard: int | None, job: str) -> bool:
    state = summarize(_ledger(run, shard).read())
    decided = any(decided_job == job for decided_job, _ in state.decided)
    return state.finished or (decided and not any(started.job_id == job for started in state.open_runs))


def _print_file(path: Path, out: IO[str], offset: int, header: bool) -> int:
    """Print ``path`` from ``offset``; returns the new offset."""
    if header:
        print(f"==> {path} <==", file=out)
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        if header:
            print(
                "(not written yet: the job has not started, or Slurm writes its output elsewhere)", file=out
            )
        return offset
    out.write(data.decode(errors="replace"))
    out.flush()
    return offset + len(data)


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
        if job is None or not self.names:  # (a held run's logs/ is empty: nothing to look up)
            return None
        raw = split_job_id(job)[1]
        name = f"{'aggregate' if shard is None else f'shard-{shard:03d}'}-{raw}.out"
        if name in self.names:
            return str(self.folder / name)
        named = self._by_job.get(raw) if shard is not None else None
        if not named:  # (most jobs of a large run have no log yet: no list made for them)
            return None
        found = [n for n in named if _log_shard(n) == shard]
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
        return self._servers.get(f"s{shard:03d}", []) if self._servers else []

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
