"""Which Slurm cluster runs which shard of a run across clusters (``slurm.clusters``; pure).

The rule (docs/launcher.md, "Shards across clusters"): the shards are cut into one contiguous
block per cluster, in the order the benchmark lists the clusters, each block's size proportional
to the cluster's weight (``[a, b]``: equal weights; ``{a: 3, b: 1}``: three quarters on a), the
rounding by largest remainder (ties to the cluster listed first). ``submit`` records the blocks in
``run.json``; every later reader (status, cancel, resubmit, the jobs) reads them from there and
never recomputes the rule. Blocks keep each cluster's shards contiguous, so each cluster's first
links are a few job arrays of that cluster, and ``shard_slice`` stays the one dataset split.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Block(BaseModel):
    """Shards ``first`` .. ``first + count - 1`` run on ``cluster``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str
    first: int
    count: int


def place_shards(shards: int, weights: dict[str, int]) -> list[Block]:
    """One block per cluster of ``weights`` (insertion order), sizes by largest remainder; clusters
    whose share rounds to no shard get no block."""
    total = sum(weights.values())
    if shards < 0 or total <= 0 or any(w <= 0 for w in weights.values()):
        raise ValueError(f"cannot place {shards} shards by weights {weights}")
    exact = {name: shards * weight / total for name, weight in weights.items()}
    counts = {name: int(share) for name, share in exact.items()}
    order = list(weights)
    left = shards - sum(counts.values())
    by_remainder = sorted(order, key=lambda name: (-(exact[name] - counts[name]), order.index(name)))
    for name in by_remainder[:left]:
        counts[name] += 1
    blocks, first = [], 0
    for name in order:
        if counts[name]:
            blocks.append(Block(cluster=name, first=first, count=counts[name]))
            first += counts[name]
    return blocks


def cluster_of(blocks: list[Block], shard: int) -> str:
    """The cluster whose block holds ``shard``."""
    for block in blocks:
        if block.first <= shard < block.first + block.count:
            return block.cluster
    raise ValueError(f"shard {shard} is in no block of {blocks}")


def cluster_parts(
    parts: list[tuple[int, int]], blocks: list[Block] | None
) -> list[tuple[int, int, int, str | None]]:
    """The job arrays of the first links: ``(base, offset, size, cluster)`` each, for the plan's
    ``(base, size)`` ranges (arrays.py) cut where a cluster's block begins (None: one cluster)."""
    if blocks is None:
        return [(base, 0, size, None) for base, size in parts]
    arrays: list[tuple[int, int, int, str | None]] = []
    for base, size in parts:
        for block in blocks:
            low, high = max(base, block.first), min(base + size, block.first + block.count)
            if low < high:
                arrays.append((base, low - base, high - low, block.cluster))
    return arrays
