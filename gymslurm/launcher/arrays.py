"""How a Slurm run's shards become job arrays that fit the site's limits (pure; docs/launcher.md, "Scale").

Every shard's links are array tasks: the first links are ``ceil(shards / MaxArraySize)`` arrays
(shards ``base .. base + MaxArraySize - 1`` are tasks ``0 ..`` of the array at ``base``), and each
successor is a one-task array of the same range's script. What the queue holds at once:

- ``MaxJobCount`` (slurmctld, every user's jobs): every array task counts, pending ones too (seen on
  the sandbox's 22.05: the tenth array of 10,000 shards at MaxJobCount 10000 was refused with
  "Resource temporarily unavailable"), and a running link keeps its successor queued (one more).
  So a run holds ``shards + running + 1`` (the aggregation last). Without a throttle every shard
  may run, so when ``2 x shards + 1`` does not fit, the plan throttles (``%N``) each array so that
  ``shards + arrays x N + 1`` does; with ``slurm.max_running`` the user's throttle is split over the
  arrays (at least 1 each); when not even ``%1`` fits the plan is refused.
- ``MaxSubmitJobs`` (the user's association, when accounting exists): every array task counts,
  so ``shards + running + 1`` must fit; a throttle cannot help, so a plan past it is refused.
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

    @property
    def footprint(self) -> int:
        """Job records the run holds at most, by the rule of the module docstring (first links)."""
        shards = sum(size for _, size in self.parts)
        running = len(self.parts) * self.throttle if self.throttle else shards
        return shards + min(running, shards) + 1


def plan_arrays(
    shards: int, limits: dict[str, int], max_running: int | None, array_size: int | None = None
) -> ArrayPlan:
    """The arrays for ``shards`` under the site's ``limits`` (scontrol / sacctmgr names), or a ConfigError
    naming the limit the run cannot fit. ``array_size`` (slurm.array_size) caps the shards per array
    below ``MaxArraySize``."""
    site = limits.get("MaxArraySize", 1001)
    if site < 1:
        raise ConfigError(
            f"this cluster takes no job arrays (MaxArraySize = {site}), and every gymslurm link is an "
            "array task: ask the site for MaxArraySize >= 1 (Slurm's default is 1001)"
        )
    chunk = min(site, array_size) if array_size else site
    parts = [(base, min(chunk, shards - base)) for base in range(0, shards, chunk)]
    arrays = len(parts)
    throttle = None if max_running is None else max(1, max_running // arrays)
    note = None
    max_jobs = limits.get("MaxJobCount")
    if max_jobs is not None:
        room = (max_jobs - shards - 1) // arrays
        if room < 1:
            raise ConfigError(
                f"{shards} shards are {shards} array tasks, and MaxJobCount = {max_jobs} counts every one "
                f"(pending ones too) plus a queued successor per running link: not even one running link "
                "per array fits; use fewer, larger shards, or ask the site for a larger MaxJobCount"
            )
        running = arrays * throttle if throttle else shards
        if shards + min(running, shards) + 1 > max_jobs:
            throttle = room
            note = (
                f"MaxJobCount = {max_jobs}: at most {throttle} first links of each of the {arrays} arrays "
                f"run at once, so the run holds at most {shards + arrays * throttle + 1} job records"
            )
    max_submit = limits.get("MaxSubmitJobs")
    if max_submit is not None:
        running = min(arrays * throttle if throttle else shards, shards)
        need = shards + running + 1
        if need > max_submit:
            raise ConfigError(
                f"{shards} shards are {shards} array tasks, plus up to {running} queued successors and the "
                f"aggregation: {need} jobs, more than your MaxSubmitJobs = {max_submit} "
                "(sacctmgr show assoc; every array task counts): use fewer, larger shards, or ask for a "
                "larger MaxSubmitJobs"
            )
    return ArrayPlan(chunk, parts, throttle, note)
