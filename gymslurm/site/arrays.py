"""How a Slurm run's shards become job arrays that fit the site's limits (pure; docs/launcher.md, "Scale").

Every shard's links are array tasks: the first links are ``ceil(shards / MaxArraySize)`` arrays
(shards ``base .. base + MaxArraySize - 1`` are tasks ``0 ..`` of the array at ``base``), and each
successor is a one-task array of the same range's script. What the queue holds at once:

- ``MaxJobCount`` (slurmctld, every user's jobs): every array task counts, pending ones too (seen on
  the sandbox's 22.05: the tenth array of 10,000 shards at MaxJobCount 10000 was refused with
  "Resource temporarily unavailable"). With ``slurm.lookahead`` = k, a shard that has not started
  holds k tasks (its first link and k - 1 spares), a running chain k + 1 (its link and the k queued
  behind it), the aggregation k: a run holds ``k x shards + running + k``. Without a throttle every
  shard may run, so when ``(k + 1) x shards + k`` does not fit, the plan throttles (``%N``) each
  array so that ``k x shards + arrays x N + k`` does; with ``slurm.max_running`` the user's throttle
  is split over the arrays (at least 1 each); when not even ``%1`` fits the plan is refused.
- ``MaxSubmitJobs`` (the user's association, when accounting exists): every array task counts,
  so ``k x shards + running + k`` must fit; a throttle cannot help much, so a plan past it is refused.
- ``MaxArraySize`` 0: the site takes no arrays; refused.

The throttle bounds the *first* links: a chain that continues queues its successor outside the
array, so later links are bounded by the chains already started, not by ``%N``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gymslurm.errors import ConfigError


@dataclass(frozen=True)
class ArrayPlan:
    """The arrays of a run: ``(base, size)`` each, the task-id range each covers, the per-array throttle."""

    chunk: int
    parts: list[tuple[int, int]]
    throttle: int | None
    note: str | None = None  # why the plan throttles (printed by submit)
    lookahead: int = (
        3  # slurm.lookahead (its default): jobs queued behind each running job, first links included
    )

    @property
    def footprint(self) -> int:
        """Job records the run holds at most, by the rule of the module docstring."""
        shards = sum(size for _, size in self.parts)
        running = len(self.parts) * self.throttle if self.throttle else shards
        return footprint(shards, min(running, shards), self.lookahead)


def footprint(shards: int, running: int, lookahead: int) -> int:
    """Job records of a run with ``running`` chains running at once (pure; the module docstring)."""
    return lookahead * shards + running + lookahead


def plan_arrays(
    shards: int,
    limits: dict[str, int],
    max_running: int | None,
    array_size: int | None = None,
    lookahead: int = 3,
) -> ArrayPlan:
    """The arrays for ``shards`` under the site's ``limits`` (scontrol / sacctmgr names), or a ConfigError
    naming the limit the run cannot fit. ``array_size`` (slurm.array_size) caps the shards per array
    below ``MaxArraySize``; ``lookahead`` is ``slurm.lookahead``."""
    site = limits.get("MaxArraySize", 1001)
    if site < 1:
        raise ConfigError(
            f"this cluster takes no job arrays (MaxArraySize = {site}), and every gymslurm link is an "
            "array task: ask the site for MaxArraySize >= 1 (Slurm's default is 1001)"
        )
    chunk = min(site, array_size) if array_size else site
    parts = [(base, min(chunk, shards - base)) for base in range(0, shards, chunk)]
    arrays, k = len(parts), lookahead
    throttle = None if max_running is None else max(1, max_running // arrays)
    note = None
    queued = f"{shards} shards are {k * shards} array tasks (each first link and {k - 1} spare(s))"
    max_jobs = limits.get("MaxJobCount")
    if max_jobs is not None:
        room = (max_jobs - footprint(shards, 0, k)) // arrays
        if room < 1:
            raise ConfigError(
                f"{queued}, and MaxJobCount = {max_jobs} counts every one (pending ones too) plus the "
                f"{k} queued behind each running link: not even one running link per array fits; use "
                "fewer, larger shards, a smaller slurm.lookahead, or ask the site for a larger MaxJobCount"
            )
        running = arrays * throttle if throttle else shards
        if footprint(shards, min(running, shards), k) > max_jobs:
            throttle = room
            note = (
                f"MaxJobCount = {max_jobs}: at most {throttle} first links of each of the {arrays} arrays "
                f"run at once, so the run holds at most {footprint(shards, arrays * throttle, k)} job records"
            )
    max_submit = limits.get("MaxSubmitJobs")
    if max_submit is not None:
        running = min(arrays * throttle if throttle else shards, shards)
        need = footprint(shards, running, k)
        if need > max_submit:
            raise ConfigError(
                f"{queued}, plus one more per running link ({running}) and the aggregation's {k}: "
                f"{need} jobs, more than your MaxSubmitJobs = {max_submit} "
                "(sacctmgr show assoc; every array task counts): use fewer, larger shards, a smaller "
                "slurm.lookahead, or ask for a larger MaxSubmitJobs"
            )
    return ArrayPlan(chunk, parts, throttle, note, lookahead)
