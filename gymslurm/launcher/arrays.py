"""How a Slurm run's shards become job arrays that fit the site's limits (pure; docs/launcher.md, "Scale").

Every shard's links are array tasks: the first links are ``ceil(shards / MaxArraySize)`` arrays
(shards ``base .. base + MaxArraySize - 1`` are tasks ``0 ..`` of the array at ``base``), and each
successor is a one-task array of the same range's script. What the queue holds at once:

- ``MaxJobCount`` (slurmctld, every user's jobs): every array task counts, pending ones too (seen on
  the sandbox's 22.05: the tenth array of 10,000 shards at MaxJobCount 10000 was refused with
  "Resource temporarily unavailable"), and a running link keeps ``k = slurm.lookahead`` jobs queued
  behind it (docs/launcher.md, "The invariant"), as does the aggregation. So a run holds
  ``shards + running x k + k``. Without a throttle every shard may run, so when
  ``shards x (1 + k) + k`` does not fit, the plan throttles (``%N``) each array so that
  ``shards + arrays x N x k + k`` does; with ``slurm.max_running`` the user's throttle is split over
  the arrays (at least 1 each); when not even ``%1`` fits the plan is refused.
- ``MaxSubmitJobs`` (the user's association, when accounting exists): every array task counts,
  so ``shards + running x k + k`` must fit; a throttle cannot help, so a plan past it is refused.
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
    lookahead: int = 1  # jobs each running link (and the aggregation) keeps queued behind it

    @property
    def footprint(self) -> int:
        """Job records the run holds at most, by the rule of the module docstring (first links)."""
        shards = sum(size for _, size in self.parts)
        running = len(self.parts) * self.throttle if self.throttle else shards
        return shards + min(running, shards) * self.lookahead + self.lookahead


def plan_arrays(
    shards: int, limits: dict[str, int], max_running: int | None, array_size: int | None = None,
    lookahead: int = 1,
) -> ArrayPlan:  # fmt: skip
    """The arrays for ``shards`` under the site's ``limits`` (scontrol / sacctmgr names), or a ConfigError
    naming the limit the run cannot fit. ``array_size`` (slurm.array_size) caps the shards per array
    below ``MaxArraySize``; ``lookahead`` (slurm.lookahead) is the jobs queued behind each running one."""
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
    k = lookahead
    max_jobs = limits.get("MaxJobCount")
    if max_jobs is not None:
        room = (max_jobs - shards - k) // (arrays * k)
        if room < 1:
            raise ConfigError(
                f"{shards} shards are {shards} array tasks, and MaxJobCount = {max_jobs} counts every one "
                f"(pending ones too) plus the {k} job(s) queued behind each running link "
                "(slurm.lookahead): not even one running link per array fits; use fewer, larger shards, "
                "or ask the site for a larger MaxJobCount"
            )
        running = arrays * throttle if throttle else shards
        if shards + min(running, shards) * k + k > max_jobs:
            throttle = room
            note = (
                f"MaxJobCount = {max_jobs}: at most {throttle} first links of each of the {arrays} arrays "
                f"run at once, so the run holds at most {shards + arrays * throttle * k + k} job records "
                f"({k} queued behind each running link: slurm.lookahead)"
            )
    max_submit = limits.get("MaxSubmitJobs")
    if max_submit is not None:
        running = min(arrays * throttle if throttle else shards, shards)
        need = shards + running * k + k
        if need > max_submit:
            raise ConfigError(
                f"{shards} shards are {shards} array tasks, plus {k} queued job(s) behind each of up to "
                f"{running} running links and the aggregation: {need} jobs, more than your "
                f"MaxSubmitJobs = {max_submit} (sacctmgr show assoc; every array task counts): use fewer, "
                "larger shards, or ask for a larger MaxSubmitJobs"
            )
    return ArrayPlan(chunk, parts, throttle, note, lookahead)
