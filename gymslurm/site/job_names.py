"""The Slurm job names of a run's jobs, and the test that picks a run's lines out of a queue (pure).

Every job gymslurm queues for run ``R`` is named after it: ``gs-R`` (every link of an array run:
first links, spares, successors), ``gs-R-agg`` (the aggregation), ``gs-R-sNNN`` (a link of shard
NNN of a run without arrays: the local backend, a run saved before arrays). ``status`` asks the
queue for these names only (``squeue --name``), so a user's other runs, however many rows they
hold, are neither sent by squeue nor typed here (issue 32); the list of runs, which reads the
user's whole queue once, keeps each run's lines by the same rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

PREFIX = "gs-"
NAMES_ASKED_MAX = 64  # names put on one squeue --name (beyond: the user's queue, filtered here)


def links_job_name(run: str) -> str:
    """Every link of an array run: ``gs-R``."""
    return f"{PREFIX}{run}"


def shard_job_name(run: str, shard: int) -> str:
    """A link of one shard of a run without arrays: ``gs-R-s007``."""
    return f"{PREFIX}{run}-s{shard:03d}"


def aggregation_job_name(run: str) -> str:
    """The run's aggregation job: ``gs-R-agg``."""
    return f"{PREFIX}{run}-agg"


@dataclass(frozen=True)
class RunJobs:
    """Which queue rows are one run's: its name, and its shards when its links are named per shard."""

    run: str
    shards_named: int = 0  # shards of a run without arrays (gs-R-sNNN names); 0: an array run

    def squeue_names(self) -> list[str] | None:
        """The names for ``squeue --name``, or None when there are too many to list (then the rows
        are kept by :meth:`keeps`)."""
        names = [links_job_name(self.run), aggregation_job_name(self.run)]
        names += [shard_job_name(self.run, shard) for shard in range(self.shards_named)]
        return names if len(names) <= NAMES_ASKED_MAX else None

    def keeps(self, name: str) -> bool:
        """Whether a job of this name is one of the run's (exactly: run ``R-2``'s jobs are not ``R``'s)."""
        own = links_job_name(self.run)
        if not name.startswith(own):
            return False
        rest = name[len(own) :]
        return rest in ("", "-agg") or _SHARD_SUFFIX.fullmatch(rest) is not None


_SHARD_SUFFIX = re.compile(r"-s\d{3,}")


def squeue_name(line: str) -> str | None:
    """The job name of one ``squeue -o '%i|%j|...'`` line (its second field) without typing the row;
    None for a line that is no such row (kept, so that the parser refuses it, quoting it)."""
    parts = line.split("|", 2)
    return parts[1].strip() if len(parts) == 3 else None


def lines_by_name(stdout: str) -> dict[str | None, list[str]]:
    """squeue's lines grouped by job name, in one pass: each run then takes its own names' lines."""
    groups: dict[str | None, list[str]] = {}
    for line in stdout.splitlines():
        if line.strip():
            groups.setdefault(squeue_name(line), []).append(line)
    return groups


def run_lines(groups: dict[str | None, list[str]], jobs: RunJobs) -> Iterable[str]:
    """The lines of ``groups`` (:func:`lines_by_name`) that are ``jobs``' run's, and any line that is
    no squeue row at all (the parser refuses it)."""
    for name, lines in groups.items():
        if name is None or jobs.keeps(name):
            yield from lines
