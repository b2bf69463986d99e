"""Paired statistics over tasks for ``gymslurm compare``: bootstrap interval, McNemar, sign-flip test. Pure.

Standard library only (no numpy or scipy: gymslurm depends on neither). Every draw comes from a
``random.Random`` the caller seeds, so a comparison is reproducible byte for byte.

- :func:`bootstrap_interval`: the percentile bootstrap of the mean of per-task differences, tasks
  resampled with replacement (the tasks are the sample; repeats were averaged per task first);
  differences of a few values (0/1 rewards) are resampled by their counts (:func:`binomial_draw`).
- :func:`mcnemar`: McNemar's test of paired 0/1 outcomes from the discordant counts, exact
  (two-sided binomial) and mid-p; :func:`binomial_half_cdf` is the binomial tail it needs.
- :func:`sign_flip_p`: a paired permutation test (the sign of each task's difference flipped at
  random) for rewards that are not 0/1, or tasks with several rollouts.
"""

from __future__ import annotations

import functools
import math
import random
from collections import Counter
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


FEW_VALUES = 32  # differences taking at most this many values are resampled by their counts


def bootstrap_interval(
    differences: Sequence[float], confidence: float, resamples: int, rng: random.Random
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``differences`` (tasks resampled).

    Differences of 0/1 rewards take a few values (-1, 0, 1; with repeats a few fractions): a
    resample is then the counts of each value, a multinomial draw made of a few binomial ones
    (:func:`binomial_draw`), in time independent of the number of tasks; other differences are
    resampled task by task. Both draw from the same distribution."""
    n = len(differences)
    if n == 0:
        raise ValueError("no paired task to resample")
    values = list(differences)
    if min(values) == max(values):  # every resample has the same mean: no need to draw
        return values[0], values[0]
    counts = Counter(values)
    if len(counts) <= FEW_VALUES:
        means = sorted(_resampled_by_counts(counts, n, rng) for _ in range(resamples))
    else:
        choices = rng.choices
        means = sorted(math.fsum(choices(values, k=n)) / n for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    return quantile(means, tail), quantile(means, 1.0 - tail)


def _resampled_by_counts(counts: Counter[float], n: int, rng: random.Random) -> float:
    """One resample's mean: how many of the n draws take each value, as successive binomials."""
    remaining, share_left, total = n, 1.0, 0.0
    items = sorted(counts.items())
    for value, count in items[:-1]:
        share = count / n
        drawn = binomial_draw(remaining, min(1.0, share / share_left), rng) if remaining else 0
        total += value * drawn
        remaining -= drawn
        share_left -= share
    total += items[-1][0] * remaining
    return total / n


@functools.lru_cache(maxsize=4096)
def _mode_of(n: int, p: float) -> tuple[int, float]:
    """Binomial(n, p)'s mode and its probability (a resample's first draw always asks the same)."""
    mode = min(n, math.floor((n + 1) * p))
    log_pmf = (
        math.lgamma(n + 1)
        - math.lgamma(mode + 1)
        - math.lgamma(n - mode + 1)
        + mode * math.log(p)
        + (n - mode) * math.log1p(-p)
    )
    return mode, math.exp(log_pmf)


def binomial_draw(n: int, p: float, rng: random.Random) -> int:
    """A draw of Binomial(n, p) by inversion, the outcomes taken outward from the mode.

    Exact (inversion is exact in any fixed order of the outcomes); about the distribution's spread
    in steps (``sqrt(n p (1 - p))``), so tens of steps for thousands of tasks."""
    if p <= 0.0 or n == 0:
        return 0
    if p >= 1.0:
        return n
    q = 1.0 - p
    mode, at_mode = _mode_of(n, p)
    u = rng.random() - at_mode
    if u <= 0.0:
        return mode
    low = high = mode
    p_low = p_high = at_mode
    odds = p / q
    while low > 0 or high < n:
        if high < n:
            p_high *= (n - high) / (high + 1) * odds
            high += 1
            u -= p_high
            if u <= 0.0:
                return high
        if low > 0:
            p_low *= low / (n - low + 1) / odds
            low -= 1
            u -= p_low
            if u <= 0.0:
                return low
    return mode  # the probabilities summed to 1 less a rounding error: the most likely outcome


def sign_flip_p(differences: Sequence[float], resamples: int, rng: random.Random) -> float:
    """The two-sided p of a paired sign-flip permutation test of "mean difference = 0".

    Under no change a task's difference is as likely to be ``-d`` as ``d``; the p is the share of
    random sign flips whose mean is at least as far from 0 as the observed one (``(k + 1) / (N + 1)``,
    never 0). Tasks with no difference flip to themselves and are left out of the draws. When the
    differences take a few sizes (0/1 rewards with repeats), how many tasks of each size keep their
    sign is one binomial draw per size, in time independent of the number of tasks."""
    moving = [d for d in differences if d != 0.0]
    total = math.fsum(moving)
    if not moving or total == 0.0:
        return 1.0
    observed = abs(total)
    tolerance = 1e-9 * math.fsum(abs(d) for d in moving)
    sizes = Counter(abs(d) for d in moving)
    if len(sizes) <= FEW_VALUES:
        pairs = sorted(sizes.items())

        def flipped() -> float:  # each size a: a * (positives - negatives) of its m tasks
            return math.fsum(a * (2 * binomial_draw(m, 0.5, rng) - m) for a, m in pairs)
    else:
        width = len(moving)

        def flipped() -> float:
            flags = map(int, format(rng.getrandbits(width), f"0{width}b"))
            return total - 2.0 * math.fsum(compress(moving, flags))

    extreme = sum(1 for _ in range(resamples) if abs(flipped()) >= observed - tolerance)
    return (extreme + 1) / (resamples + 1)
