"""The merged run's reward distribution per taskset: ``<stem>_rewards.json`` (version 1).

Why: the report draws one histogram per taskset, and a view must not re-read every merged row
each time ``status`` rewrites the page. The aggregation job reads the merged rows once, after
``gymslurm aggregate`` succeeded, and publishes the histogram here (:func:`write_reward_histogram`);
the report reads it back (:func:`read_reward_histogram`, the version checked first through the
store's one versioned-JSON reader). A row's taskset is its ``task_id.taskset`` (``-`` without one);
rows without a numeric ``reward`` are not counted.

Format: ``{"format_version": 1, "tasksets": [{"taskset", "count", "mean", "low", "high", "bins"}]}``
with :data:`REWARD_BINS` equal bins over ``[low, high]`` (``[0, 1]`` when every reward lies in it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from gymslurm.errors import ManifestError
from gymslurm.formats import version_of
from gymslurm.store.atomic import publish_json
from gymslurm.store.files import read_json_object, validation_problems
from gymslurm.store.paths import RunPaths, companion_path

REWARD_BINS = 10
_REMEDY = "the aggregation job writes it again"


class TasksetRewards(BaseModel):
    """One taskset's reward distribution: counts in :data:`REWARD_BINS` equal bins over ``[low, high]``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    taskset: str
    count: int
    mean: float | None
    low: float
    high: float
    bins: list[int]


def rewards_path(paths: RunPaths) -> Path:
    """``<stem>_rewards.json`` beside the merged output."""
    return companion_path(paths.output, "_rewards.json")


def reward_histogram(rewards: dict[str, list[float]], bins: int = REWARD_BINS) -> list[TasksetRewards]:
    """Each taskset's rewards as a histogram over their own range (pure; ``[0, 1]`` when all in it)."""
    out = []
    for taskset, values in sorted(rewards.items()):
        low, high = (min(values), max(values)) if values else (0.0, 1.0)
        if low >= 0.0 and high <= 1.0:
            low, high = 0.0, 1.0
        width = (high - low) or 1.0
        counts = [0] * bins
        for value in values:
            counts[min(int((value - low) / width * bins), bins - 1)] += 1
        mean = sum(values) / len(values) if values else None
        out.append(
            TasksetRewards(taskset=taskset, count=len(values), mean=mean, low=low, high=high, bins=counts)
        )
    return out


def rewards_by_taskset(lines: Iterable[bytes]) -> dict[str, list[float]]:
    """Rewards of result rows by ``task_id.taskset`` (``-`` without one); rows with none are skipped."""
    out: dict[str, list[float]] = {}
    for raw in lines:
        if not raw.strip():
            continue
        try:
            row = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # a torn tail: the projection never selects it
        reward = row.get("reward") if isinstance(row, dict) else None
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            continue
        task = row.get("task_id")
        taskset = task.get("taskset") if isinstance(task, dict) else None
        out.setdefault(str(taskset) if taskset else "-", []).append(float(reward))
    return out


def write_reward_histogram(paths: RunPaths) -> list[TasksetRewards]:
    """Read the merged rows once and publish ``<stem>_rewards.json`` (the aggregation job calls it)."""
    with paths.results.open("rb") as rows:
        histogram = reward_histogram(rewards_by_taskset(rows))
    document = {"format_version": version_of("rewards"), "tasksets": [h.model_dump() for h in histogram]}
    publish_json(rewards_path(paths), document)
    return histogram


def read_reward_histogram(paths: RunPaths) -> list[TasksetRewards] | None:
    """``<stem>_rewards.json``, version-checked first; None when the aggregation wrote none."""
    path = rewards_path(paths)
    data = read_json_object(path, "the reward histogram", _REMEDY, "rewards")
    if data is None:
        return None
    try:
        return [TasksetRewards.model_validate(entry) for entry in data.get("tasksets", [])]
    except ValidationError as error:
        raise ManifestError(
            f"the reward histogram {path} is malformed ({validation_problems(error)}); {_REMEDY}"
        ) from None
