"""The report's GPU-hours series: one sweep over the links, equal to summing every link at every point."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from gymslurm.launcher.views.charts import gpu_series
from gymslurm.launcher.views.document import ShardTimeline


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()


def _shards(seed: int) -> list[ShardTimeline]:
    rng = random.Random(seed)
    shards = []
    for shard in range(20):
        links: list[dict[str, Any]] = []
        for _ in range(rng.randint(0, 4)):
            start = 1_000_000 + rng.uniform(0, 5000)
            end = None if rng.random() < 0.2 else start + rng.uniform(0, 3000)  # None: running until now
            links.append(
                {
                    "start": _iso(start),
                    "end": None if end is None else _iso(end),
                    "gpus": rng.choice([0, 1, 4, 8]),
                    "job": f"{shard}",
                }
            )
        shards.append(ShardTimeline(shard=shard, links=links, faults={}))
    return shards


@pytest.mark.parametrize("seed", range(8))
def test_gpu_series_equals_the_sum_over_every_link_at_each_point(seed: int) -> None:
    """Each point is Σ gpus × (time held until then) over every link: running links until now."""
    shards, now = _shards(seed), 1_000_000 + 9000.0
    spans = [
        (
            datetime.fromisoformat(link["start"]).timestamp(),
            datetime.fromisoformat(link["end"]).timestamp() if link["end"] else now,
            link["gpus"],
        )
        for shard in shards
        for link in shard.links
    ]
    for t, value in gpu_series(shards, now):
        naive = sum(g * max(min(t, end) - start, 0.0) for start, end, g in spans) / 3600.0
        assert value == pytest.approx(naive, rel=1e-9, abs=1e-9)


def test_gpu_series_is_empty_before_any_link_started() -> None:
    """No link started: no series (the chart says so instead)."""
    assert gpu_series([ShardTimeline(shard=0, links=[], faults={})], 0.0) == []


def _outcome_shards(seed: int) -> list[ShardTimeline]:
    rng = random.Random(seed)
    shards = []
    for shard in range(15):
        links: list[dict[str, Any]] = []
        outcomes, at = 0, 1_000_000 + rng.uniform(0, 500)
        for _ in range(rng.randint(0, 4)):
            start = at + rng.choice([0.0, rng.uniform(0, 300)])  # some links start where one ended
            end = start + rng.choice([0.0, rng.uniform(1, 900)])
            after = outcomes + rng.randint(0, 50)
            links.append(
                {
                    "start": _iso(start),
                    "end": _iso(end),
                    "gpus": 1,
                    "job": f"{shard}",
                    "outcomes_before": outcomes,
                    "outcomes_after": after,
                }
            )
            outcomes, at = after, end
        shards.append(ShardTimeline(shard=shard, links=links, faults={}))
    return shards


@pytest.mark.parametrize("seed", range(8))
def test_rate_series_sums_the_links_running_over_each_interval(seed: int) -> None:
    """Each interval between link starts and ends carries the summed outcomes/s of the links over it."""
    from gymslurm.launcher.views.charts import _spans, rate_series

    shards = _outcome_shards(seed)
    spans = [s for s in _spans(shards, 0.0) if s["before"] is not None and s["after"] is not None]
    for left, right, rate in rate_series(shards, 0.0):
        naive = sum(
            (s["after"] - s["before"]) / max(s["end"] - s["start"], 1e-9)
            for s in spans
            if s["start"] <= left and s["end"] >= right
        )
        assert rate == pytest.approx(max(naive, 0.0), rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_coverage_series_counts_each_shards_latest_outcomes(seed: int) -> None:
    """At each link start and end, the series is the sum over shards of the latest count known then."""
    from gymslurm.launcher.views.charts import coverage_series

    shards = _outcome_shards(seed)
    series = coverage_series(shards, 0.0)
    latest: dict[int, int] = {}
    events = sorted(
        (datetime.fromisoformat(link[key]).timestamp(), shard.shard, link[count])
        for shard in shards
        for link in shard.links
        for key, count in (("start", "outcomes_before"), ("end", "outcomes_after"))
    )
    assert len(series) == len(events)
    for (at, shard, outcomes), (t, total) in zip(events, series, strict=True):
        latest[shard] = max(outcomes, latest.get(shard, 0))
        assert t == at and total == sum(latest.values())
