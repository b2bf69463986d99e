"""Compare two runs per benchmark: the difference of the headline metric over paired tasks. Pure.

``gymslurm compare A B`` (docs/compare.md). Each side is one :class:`BenchmarkRewards` per benchmark
(the store reads a run into it: ``store/task_rewards.py``), a suite run being a list of them; the
comparison pairs the benchmarks and, in each, the tasks:

- a task is *measured* on a side when at least one of its rollouts has a numeric value of the metric
  and is not masked; its value is the mean over its measured rollouts (repeats averaged per task
  first, so a task counts once whatever its repeats);
- masked, unscored, failed, omitted and unfinished rollouts are counted, never scored, never a
  failure of the model (a zero is never invented);
- tasks measured on both sides are *paired*; a task measured on one side only is counted
  (``baseline_only`` / ``candidate_only``) and left out, as is a task measured on neither;
- ``delta`` is the candidate's mean minus the baseline's over the paired tasks, with a percentile
  bootstrap interval over those tasks; the test is McNemar's (mid-p) when every paired task has one
  0/1 value per side, else a paired sign-flip permutation test;
- pass↔fail flips follow NeMo Gym's ``gym eval compare`` (0.7.0): with 0/1 rewards a task passes when
  its mean is above 0.5, a mean of exactly 0.5 on either side is a tie.

``change`` reads the interval: ``improved`` (it lies above 0), ``regressed`` (below 0), else ``no
change``; the metric is taken as higher-is-better. The document (:class:`ComparisonDocument`) is the
``comparison`` format of ``formats.py``; the gate (``gate.py``) reads it back.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gymslurm.formats import version_of
from gymslurm.paired_stats import bootstrap_interval, mcnemar, sign_flip_p

TaskKey = tuple[str, str]  # (taskset, task_id): the task identity sent to the Environment Server
CATEGORIES = ("measured", "masked", "unscored", "failed", "omitted", "unfinished")
PASS_THRESHOLD = 0.5  # NeMo Gym's: a task passes when the mean of its rewards is above it
DEFAULT_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95
Category = Literal["measured", "masked", "unscored", "failed", "omitted", "unfinished"]
Change = Literal["improved", "regressed", "no change", "not comparable"]


# --- what a side measured ---------------------------------------------------------------------------


@dataclass(slots=True)
class TaskTally:
    """One task's rollouts on one side: the metric's values of the measured ones, the others counted."""

    values: list[float] = field(default_factory=list)
    masked: int = 0
    unscored: int = 0
    failed: int = 0
    omitted: int = 0
    unfinished: int = 0

    @property
    def measured(self) -> bool:
        return bool(self.values)

    def mean(self) -> float:
        return math.fsum(self.values) / len(self.values)


@dataclass
class BenchmarkRewards:
    """One benchmark of one run: every task it knows, with what each of its rollouts became."""

    name: str
    source: str
    metric: str = "reward"
    tasks: dict[TaskKey, TaskTally] = field(default_factory=dict)

    def add(self, task: TaskKey, category: Category, value: float | None = None) -> None:
        """Count one rollout of ``task``; ``value`` is the metric of a measured one."""
        tally = self.tasks.get(task)
        if tally is None:
            tally = self.tasks[task] = TaskTally()
        if category == "measured":
            assert value is not None
            tally.values.append(value)
        else:
            setattr(tally, category, getattr(tally, category) + 1)

    def rollouts(self) -> dict[str, int]:
        """Rollouts per category, every task included."""
        counts = dict.fromkeys(CATEGORIES, 0)
        for tally in self.tasks.values():
            counts["measured"] += len(tally.values)
            for name in CATEGORIES[1:]:
                counts[name] += getattr(tally, name)
        return counts


# --- the document -------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Side(_Strict):
    """One side of a benchmark's comparison, all its tasks considered."""

    name: str
    source: str
    tasks: int  # every task the side knows (measured or not)
    measured_tasks: int
    mean: float | None  # over its own measured tasks (paired or not)
    rollouts: dict[str, int]  # per category: measured, masked, unscored, failed, omitted, unfinished


class TaskCounts(_Strict):
    """How the tasks of the two sides pair up; ``coverage`` is paired over every task either side knows."""

    paired: int
    baseline_only: int
    candidate_only: int
    neither: int
    coverage: float | None


class Flip(_Strict):
    """A task that moved across the pass threshold (or, with continuous values, changed)."""

    taskset: str
    task_id: str
    baseline: float
    candidate: float


class Flips(_Strict):
    """Per-task movement over the paired tasks (NeMo Gym's rule, docs/compare.md)."""

    mode: Literal["binary", "continuous", "unavailable"]
    pass_to_fail: list[Flip] = Field(default_factory=list)
    fail_to_pass: list[Flip] = Field(default_factory=list)
    changed: list[Flip] = Field(default_factory=list)  # continuous values: every task whose mean moved
    tied: int = 0
    unchanged: int = 0


class BenchmarkComparison(_Strict):
    """One benchmark: the paired difference, its interval and test, the flips, and the counts."""

    benchmark: str
    baseline: Side
    candidate: Side
    tasks: TaskCounts
    baseline_mean: float | None  # over the paired tasks
    candidate_mean: float | None
    delta: float | None  # candidate_mean - baseline_mean
    interval: tuple[float, float] | None
    binary: bool  # every paired value on both sides is 0 or 1
    test: Literal["mcnemar", "sign_flip", "none"]
    p_value: float | None  # McNemar's mid-p, or the sign-flip test's p
    p_exact: float | None  # McNemar's exact p (None for the sign-flip test)
    flips: Flips
    change: Change


class UnpairedBenchmark(_Strict):
    """A benchmark one side of a suite comparison has and the other has not."""

    benchmark: str
    side: Literal["baseline", "candidate"]


class ComparisonDocument(_Strict):
    """``gymslurm compare --json``: the ``comparison`` format (``formats.py``), version first."""

    format_version: int
    metric: str
    confidence: float
    seed: int
    resamples: int
    baseline: str
    candidate: str
    benchmarks: list[BenchmarkComparison]
    unpaired: list[UnpairedBenchmark] = Field(default_factory=list)


@dataclass(frozen=True)
class Options:
    """How to compare: the interval's confidence, the seed and number of resamples."""

    confidence: float = DEFAULT_CONFIDENCE
    seed: int = 0
    resamples: int = DEFAULT_RESAMPLES


# --- comparing ------------------------------------------------------------------------------------------


def compare_runs(
    baseline: Sequence[BenchmarkRewards],
    candidate: Sequence[BenchmarkRewards],
    options: Options,
    labels: tuple[str, str],
) -> ComparisonDocument:
    """Every benchmark pair of two runs (a run is one benchmark; a suite run several).

    Two single runs pair whatever their benchmarks are named (a checkpoint against a baseline of the
    same benchmark, or two output files); suites pair by name, and a name one side lacks is listed."""
    pairs, unpaired = pair_benchmarks(baseline, candidate)
    metrics = {side.metric for side in (*baseline, *candidate)}
    return ComparisonDocument(
        format_version=version_of("comparison"),
        metric=", ".join(sorted(metrics)),
        confidence=options.confidence,
        seed=options.seed,
        resamples=options.resamples,
        baseline=labels[0],
        candidate=labels[1],
        benchmarks=[compare_benchmark(a, b, options) for a, b in pairs],
        unpaired=unpaired,
    )


def pair_benchmarks(
    baseline: Sequence[BenchmarkRewards], candidate: Sequence[BenchmarkRewards]
) -> tuple[list[tuple[BenchmarkRewards, BenchmarkRewards]], list[UnpairedBenchmark]]:
    """Benchmark pairs in the baseline's order, and the benchmarks of one side only."""
    if len(baseline) == 1 and len(candidate) == 1:
        return [(baseline[0], candidate[0])], []
    theirs = {side.name: side for side in candidate}
    pairs = [(side, theirs[side.name]) for side in baseline if side.name in theirs]
    ours = {side.name for side in baseline}
    unpaired = [
        UnpairedBenchmark(benchmark=s.name, side="baseline") for s in baseline if s.name not in theirs
    ]
    unpaired += [
        UnpairedBenchmark(benchmark=s.name, side="candidate") for s in candidate if s.name not in ours
    ]
    return pairs, unpaired


def compare_benchmark(
    baseline: BenchmarkRewards, candidate: BenchmarkRewards, options: Options
) -> BenchmarkComparison:
    """One benchmark's comparison (the module docstring gives every rule)."""
    a, b = baseline.tasks, candidate.tasks
    paired = sorted(
        (key for key, tally in a.items() if tally.measured and key in b and b[key].measured), key=task_order
    )
    a_only = sum(1 for key, tally in a.items() if tally.measured and not (key in b and b[key].measured))
    b_only = sum(1 for key, tally in b.items() if tally.measured and not (key in a and a[key].measured))
    known = len(a.keys() | b.keys())
    counts = TaskCounts(
        paired=len(paired),
        baseline_only=a_only,
        candidate_only=b_only,
        neither=known - len(paired) - a_only - b_only,
        coverage=len(paired) / known if known else None,
    )
    means = [(a[key].mean(), b[key].mean()) for key in paired]
    binary = all(v in (0.0, 1.0) for key in paired for v in (*a[key].values, *b[key].values))
    flips = task_flips(paired, means, binary)
    single = all(len(a[key].values) == 1 and len(b[key].values) == 1 for key in paired)
    figures = paired_figures(means, flips, binary and single, options)
    return BenchmarkComparison(
        benchmark=candidate.name,
        baseline=side_summary(baseline),
        candidate=side_summary(candidate),
        tasks=counts,
        binary=binary,
        flips=flips,
        baseline_mean=figures.baseline_mean,
        candidate_mean=figures.candidate_mean,
        delta=figures.delta,
        interval=figures.interval,
        test=figures.test,
        p_value=figures.p_value,
        p_exact=figures.p_exact,
        change=change_of(figures.interval),
    )


@dataclass(frozen=True)
class Figures:
    """The paired figures of a benchmark (all None, test "none", when no task is paired)."""

    baseline_mean: float | None = None
    candidate_mean: float | None = None
    delta: float | None = None
    interval: tuple[float, float] | None = None
    test: Literal["mcnemar", "sign_flip", "none"] = "none"
    p_value: float | None = None
    p_exact: float | None = None


def paired_figures(
    means: Sequence[tuple[float, float]], flips: Flips, one_binary_value: bool, options: Options
) -> Figures:
    """The means, delta, interval and test over the paired tasks' ``(baseline, candidate)`` means.

    ``one_binary_value``: every paired task has one 0/1 value a side, so McNemar's test applies."""
    if not means:
        return Figures()
    differences = [cand - base for base, cand in means]
    rng = random.Random(f"{options.seed}/bootstrap")
    interval = bootstrap_interval(differences, options.confidence, options.resamples, rng)
    if one_binary_value:
        p_exact, p_value = mcnemar(len(flips.pass_to_fail), len(flips.fail_to_pass))
        test: Literal["mcnemar", "sign_flip"] = "mcnemar"
    else:
        p_exact = None
        p_value = sign_flip_p(differences, options.resamples, random.Random(f"{options.seed}/sign-flip"))
        test = "sign_flip"
    return Figures(
        baseline_mean=math.fsum(base for base, _ in means) / len(means),
        candidate_mean=math.fsum(cand for _, cand in means) / len(means),
        delta=math.fsum(differences) / len(differences),
        interval=interval,
        test=test,
        p_value=p_value,
        p_exact=p_exact,
    )


def change_of(interval: tuple[float, float] | None) -> Change:
    """What the interval says: above 0 improved, below 0 regressed, else no change."""
    if interval is None:
        return "not comparable"
    low, high = interval
    if low > 0.0:
        return "improved"
    if high < 0.0:
        return "regressed"
    return "no change"


def side_summary(side: BenchmarkRewards) -> Side:
    """A side's own figures: its tasks, its mean over every task it measured, its rollouts."""
    measured = [tally.mean() for tally in side.tasks.values() if tally.measured]
    return Side(
        name=side.name,
        source=side.source,
        tasks=len(side.tasks),
        measured_tasks=len(measured),
        mean=math.fsum(measured) / len(measured) if measured else None,
        rollouts=side.rollouts(),
    )


def task_flips(paired: Sequence[TaskKey], means: Sequence[tuple[float, float]], binary: bool) -> Flips:
    """Per-task movement, regressions first then by how far the task moved (NeMo Gym's order)."""
    if not paired:
        return Flips(mode="unavailable")
    moved = sorted(
        ((key, base, cand) for key, (base, cand) in zip(paired, means, strict=True)),
        key=lambda item: (-abs(item[2] - item[1]), task_order(item[0])),
    )
    if not binary:
        changed = [_flip(key, base, cand) for key, base, cand in moved if cand != base]
        return Flips(mode="continuous", changed=changed, unchanged=len(paired) - len(changed))
    down: list[Flip] = []
    up: list[Flip] = []
    tied = unchanged = 0
    for key, base, cand in moved:
        if PASS_THRESHOLD in (base, cand):
            tied += 1
        elif (base > PASS_THRESHOLD) == (cand > PASS_THRESHOLD):
            unchanged += 1
        else:
            (down if base > PASS_THRESHOLD else up).append(_flip(key, base, cand))
    return Flips(mode="binary", pass_to_fail=down, fail_to_pass=up, tied=tied, unchanged=unchanged)


def task_order(key: TaskKey) -> tuple[str, bool, int, str]:
    """Tasks in a reader's order: by taskset, then numeric ids by number (``2`` before ``10``)."""
    taskset, task_id = key
    numeric = task_id.isdigit()
    return (taskset, not numeric, int(task_id) if numeric else 0, task_id)


def _flip(key: TaskKey, base: float, cand: float) -> Flip:
    return Flip(taskset=key[0], task_id=key[1], baseline=base, candidate=cand)
