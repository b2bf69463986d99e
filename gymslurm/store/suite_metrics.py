"""What the model scored on a suite: ``<suite run>/suite_metrics.json`` (version 1).

One entry per benchmark: its headline metric (the mean over tasks of each task's mean ``metric``,
``reward`` by default: a task with repeats counts once), the standard error over tasks, a 95%
bootstrap interval over tasks (:data:`BOOTSTRAP_RESAMPLES` resamples, a fixed seed, so the file is
the same each time it is written from the same rows), the number of tasks and rows it rests on,
and the benchmark's verdict and weight; then the weighted mean of the headlines of the benchmarks
that have one. Written by the suite's aggregation job once it merged every benchmark, from each
benchmark's merged rows (read once); ``status`` and the report read it back.

Format: ``{"format_version": 1, "suite", "benchmarks": [{"name", "metric", "value", "stderr",
"ci95": [low, high], "tasks", "rows", "verdict", "weight", "run"}], "weighted_mean"}``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from gymslurm.errors import ManifestError
from gymslurm.formats import version_of
from gymslurm.store.atomic import publish_json
from gymslurm.store.files import read_json_object, validation_problems

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 20260
_REMEDY = "the suite's aggregation job writes it again ('gymslurm resubmit RUN' reruns it)"


class BenchmarkScore(BaseModel):
    """One benchmark's headline, its uncertainty over tasks and the counts it rests on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    metric: str
    value: float | None
    stderr: float | None
    ci95: list[float] | None
    tasks: int
    rows: int
    verdict: str
    weight: float = 1.0
    run: str = ""  # the benchmark's run folder, relative to the suite run


class SuiteMetrics(BaseModel):
    """``suite_metrics.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: int
    suite: str
    benchmarks: list[BenchmarkScore]
    weighted_mean: float | None


def task_values(lines: Iterable[bytes], metric: str) -> dict[str, list[float]]:
    """Each task's values of ``metric`` in merged result rows (keyed by taskset and task index; rows
    without a number there are skipped; a torn line is skipped as the projection never selects it)."""
    out: dict[str, list[float]] = {}
    for raw in lines:
        if not raw.strip():
            continue
        try:
            row = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        value = row.get(metric) if isinstance(row, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        task = row.get("task_id")
        taskset = task.get("taskset") if isinstance(task, dict) else None
        index = row.get("_ng_task_index", task.get("index") if isinstance(task, dict) else None)
        out.setdefault(f"{taskset or '-'}/{index}", []).append(float(value))
    return out


def score(
    name: str,
    metric: str,
    per_task: dict[str, list[float]],
    *,
    verdict: str,
    weight: float = 1.0,
    run: str = "",
) -> BenchmarkScore:
    """The headline over tasks, its standard error and bootstrap interval (pure, seeded)."""
    means = [sum(v) / len(v) for _, v in sorted(per_task.items()) if v]
    rows = sum(len(v) for v in per_task.values())
    if not means:
        return BenchmarkScore(
            name=name, metric=metric, value=None, stderr=None, ci95=None, tasks=0, rows=rows,
            verdict=verdict, weight=weight, run=run,
        )  # fmt: skip
    n, value = len(means), sum(means) / len(means)
    stderr = math.sqrt(sum((m - value) ** 2 for m in means) / (n - 1) / n) if n > 1 else 0.0
    return BenchmarkScore(
        name=name,
        metric=metric,
        value=value,
        stderr=stderr,
        ci95=bootstrap_interval(means),
        tasks=n,
        rows=rows,
        verdict=verdict,
        weight=weight,
        run=run,
    )


def bootstrap_interval(means: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES) -> list[float]:
    """The 2.5th and 97.5th percentiles of the mean over tasks resampled with replacement (seeded)."""
    draw = random.Random(BOOTSTRAP_SEED)
    n = len(means)
    stats = sorted(sum(means[draw.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return [stats[int(0.025 * (resamples - 1))], stats[int(0.975 * (resamples - 1))]]


def weighted_mean(scores: Sequence[BenchmarkScore]) -> float | None:
    """The headlines' mean weighted by each benchmark's weight (those without one left out)."""
    scored = [s for s in scores if s.value is not None]
    total = sum(s.weight for s in scored)
    return sum(s.weight * (s.value or 0.0) for s in scored) / total if total else None


def suite_metrics_path(run_root: Path) -> Path:
    """``suite_metrics.json`` of a suite run."""
    return run_root / "suite_metrics.json"


def read_task_values(merged: Path, metric: str) -> dict[str, list[float]]:
    """Each task's values from a benchmark's merged output (empty when it has none)."""
    if not merged.exists():
        return {}
    with merged.open("rb") as rows:
        return task_values(rows, metric)


def write_suite_metrics(run_root: Path, suite: str, scores: list[BenchmarkScore]) -> SuiteMetrics:
    """Publish ``suite_metrics.json`` (replaced whole, atomically)."""
    document = SuiteMetrics(
        format_version=version_of("suite_metrics"),
        suite=suite,
        benchmarks=scores,
        weighted_mean=weighted_mean(scores),
    )
    publish_json(suite_metrics_path(run_root), document.model_dump(mode="json"))
    return document


def read_suite_metrics(run_root: Path) -> SuiteMetrics | None:
    """``suite_metrics.json``, version-checked first; None when the suite has none yet."""
    path = suite_metrics_path(run_root)
    data = read_json_object(path, "the suite metrics", _REMEDY, "suite_metrics")
    if data is None:
        return None
    try:
        return SuiteMetrics.model_validate(data)
    except ValidationError as error:
        raise ManifestError(
            f"the suite metrics {path} are malformed ({validation_problems(error)}); {_REMEDY}"
        ) from None
