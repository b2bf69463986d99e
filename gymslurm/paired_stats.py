"""Paired statistics over tasks for ``gymslurm compare``: bootstrap interval, McNemar, sign-flip test. Pure.

Standard library only (no numpy or scipy: gymslurm depends on neither). Every draw comes from a
``random.Random`` the caller seeds, so a comparison is reproducible byte for byte.

- :func:`bootstrap_interval`: the percentile bootstrap of the mean of per-task differences, tasks
  resampled with replacement (the tasks are the sample; repeats were averaged per task first).
- :func:`mcnemar`: McNemar's test of paired 0/1 outcomes from the discordant counts, exact
  (two-sided binomial) and mid-p; :func:`binomial_half_cdf` is the binomial tail it needs.
- :func:`sign_flip_p`: a paired permutation test (the sign of each task's difference flipped at
  random) for rewards that are not 0/1, or tasks with several rollouts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from itertools import compress


def binomial_half_cdf(k: int, n: int) -> float:
    """``P(X <= k)`` for ``X ~ Binomial(n, 1/2)``: summed from ``k`` down in floats (no big integers).

    Each term is the one above times ``i / (n - i + 1)``; for ``k <= n / 2`` the terms shrink, so the
    sum stops once they no longer change it. Exact to float precision for any ``n``."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if k > n / 2:
        return 1.0 - binomial_half_cdf(n - k - 1, n)
    log_pmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2.0)
    term = total = 1.0
    for i in range(k, 0, -1):
        term *= i / (n - i + 1)
        total += term
        if term < total * 1e-17:
            break
    return min(1.0, math.exp(log_pmf + math.log(total)))


def binomial_half_pmf(k: int, n: int) -> float:
    """``P(X = k)`` for ``X ~ Binomial(n, 1/2)``."""
    if not 0 <= k <= n:
        return 0.0
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2.0))


def mcnemar(worse: int, better: int) -> tuple[float, float]:
    """``(exact p, mid-p)`` of McNemar's two-sided test from the two discordant counts.

    Under no change each discordant task is as likely to go one way as the other, so the smaller
    count is Binomial(worse + better, 1/2). The exact p doubles its tail; the mid-p counts the observed
    value's own probability half (Fagerland et al. 2013: close to the nominal level, less conservative)."""
    n = worse + better
    if n == 0:
        return 1.0, 1.0
    k = min(worse, better)
    tail = binomial_half_cdf(k, n)
    exact = min(1.0, 2.0 * tail)
    mid = min(1.0, 2.0 * tail - binomial_half_pmf(k, n))
    return exact, mid


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, linearly interpolated (the usual "type 7")."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


def bootstrap_interval(
    differences: Sequence[float], confidence: float, resamples: int, rng: random.Random
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``differences`` (tasks resampled)."""
    n = len(differences)
    if n == 0:
        raise ValueError("no paired task to resample")
    values = list(differences)
    if min(values) == max(values):  # every resample has the same mean: no need to draw
        return values[0], values[0]
    choices = rng.choices
    means = sorted(math.fsum(choices(values, k=n)) / n for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    return quantile(means, tail), quantile(means, 1.0 - tail)


def sign_flip_p(differences: Sequence[float], resamples: int, rng: random.Random) -> float:
    """The two-sided p of a paired sign-flip permutation test of "mean difference = 0".

    Under no change a task's difference is as likely to be ``-d`` as ``d``; the p is the share of
    random sign flips whose mean is at least as far from 0 as the observed one (``(k + 1) / (N + 1)``,
    never 0). Tasks with no difference flip to themselves and are left out of the draws."""
    moving = [d for d in differences if d != 0.0]
    total = math.fsum(moving)
    if not moving or total == 0.0:
        return 1.0
    observed = abs(total)
    tolerance = 1e-9 * math.fsum(abs(d) for d in moving)
    width = len(moving)
    extreme = 0
    for _ in range(resamples):
        flags = map(int, format(rng.getrandbits(width), f"0{width}b"))
        flipped = total - 2.0 * math.fsum(compress(moving, flags))
        if abs(flipped) >= observed - tolerance:
            extreme += 1
    return (extreme + 1) / (resamples + 1)
