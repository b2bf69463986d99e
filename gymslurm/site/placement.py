"""Which Slurm cluster runs which shard of a run across clusters (``slurm.clusters``; pure).

The rule (docs/launcher.md, "Shards across clusters"): the shards are cut into one contiguous
block per cluster, in the order the benchmark lists the clusters, each block's size proportional
to the cluster's weight (``[a, b]``: equal weights; ``{a: 3, b: 1}``: three quarters on a), the
rounding by largest remainder (ties to the cluster listed first). Or each cluster names its
shards (``{a: "0-5,9", b: "6-8"}``): every shard exactly once, a block per contiguous range.
``submit`` records the blocks in ``run.json``; every later reader (status, cancel, resubmit, the
jobs) reads them from there and never recomputes the rule. Blocks keep each cluster's shards
contiguous, so each cluster's first links are a few job arrays of that cluster, and
``shard_slice`` stays the one dataset split.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gymslurm.errors import ConfigError


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


def parse_shard_numbers(text: str, shards: int, where: str) -> set[int]:
    """``0,3,7-9`` as shard numbers of ``0..shards-1``; an unreadable item or a number outside is a
    ConfigError naming ``where`` (before anything is written)."""
    chosen: set[int] = set()
    for item in text.strip().split(","):
        first, sep, last = item.strip().partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ConfigError(f"{where} {text!r}: expected shard numbers such as 0,3,7-9")
        low, high = int(first), int(last) if sep else int(first)
        if low > high or high >= shards:
            raise ConfigError(f"{where} {text!r}: the run has shards 0..{shards - 1}")
        chosen.update(range(low, high + 1))
    return chosen


def named_blocks(shards: int, ranges: dict[str, str]) -> list[Block]:
    """The blocks of ``{cluster: "0-5,9"}``: every shard named exactly once, a block per run of
    consecutive shards, in shard order; a shard named twice or by none is refused, by number."""
    owner: dict[int, str] = {}
    for cluster, text in ranges.items():
        for shard in parse_shard_numbers(text, shards, f"slurm.clusters.{cluster}"):
            if shard in owner:
                raise ConfigError(
                    f"slurm.clusters names shard {shard} for both {owner[shard]} and {cluster}: give "
                    "each shard to one cluster"
                )
            owner[shard] = cluster
    missing = [shard for shard in range(shards) if shard not in owner]
    if missing:
        raise ConfigError(
            f"slurm.clusters gives shard(s) {', '.join(map(str, missing[:10]))} to no cluster (the run "
            f"has shards 0..{shards - 1}): name each shard once"
        )
    blocks: list[Block] = []
    for shard in range(shards):
        if blocks and blocks[-1].cluster == owner[shard]:
            last = blocks[-1]
            blocks[-1] = Block(cluster=last.cluster, first=last.first, count=last.count + 1)
        else:
            blocks.append(Block(cluster=owner[shard], first=shard, count=1))
    return blocks


def blocks_for(shards: int, clusters: list[str] | dict[str, int | str]) -> list[Block]:
    """``slurm.clusters`` as blocks: by weight (a list, or whole numbers) or by the shards each names."""
    if isinstance(clusters, dict) and all(isinstance(v, str) for v in clusters.values()):
        return named_blocks(shards, {name: str(v) for name, v in clusters.items()})
    weights = dict(clusters) if isinstance(clusters, dict) else dict.fromkeys(clusters, 1)
    return place_shards(shards, {name: int(weight) for name, weight in weights.items()})


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
