"""The paired statistics of ``gymslurm compare`` (gymslurm/paired_stats.py): exact where they can be."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from gymslurm.paired_stats import (
    binomial_draw,
    binomial_half_cdf,
    binomial_half_pmf,
    bootstrap_interval,
    mcnemar,
    quantile,
    sign_flip_p,
)


def _exact_cdf(k: int, n: int) -> Fraction:
    return Fraction(sum(math.comb(n, i) for i in range(k + 1)), 2**n)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 17, 40, 61])
def test_the_binomial_tail_equals_the_exact_sum_of_binomial_coefficients(n: int) -> None:
    """``P(X <= k)`` for Binomial(n, 1/2) agrees with the exact fraction for every k, both halves."""
    for k in range(-1, n + 1):
        expected = float(_exact_cdf(k, n)) if k >= 0 else 0.0
        assert binomial_half_cdf(k, n) == pytest.approx(expected, rel=1e-12, abs=1e-300), (k, n)
        if 0 <= k <= n:
            assert binomial_half_pmf(k, n) == pytest.approx(math.comb(n, k) / 2**n, rel=1e-12)


def test_the_binomial_tail_stays_exact_for_a_large_number_of_discordant_tasks() -> None:
    """n = 200,000: the median tail is just above one half and a far tail underflows to 0, not NaN."""
    n = 200_000
    assert binomial_half_cdf(n // 2, n) == pytest.approx(0.5 + binomial_half_pmf(n // 2, n) / 2, rel=1e-9)
    assert binomial_half_cdf(1000, n) == 0.0
    assert binomial_half_cdf(n - 1000, n) == 1.0


@pytest.mark.parametrize(
    ("worse", "better", "exact", "mid"),
    [
        (0, 0, 1.0, 1.0),  # nothing discordant: no evidence of a change
        (5, 5, 1.0, 1.0),  # balanced
        (2, 10, 2 * 79 / 4096, 2 * 79 / 4096 - 66 / 4096),  # P(X<=2 | n=12) = (1+12+66)/4096
        (10, 2, 2 * 79 / 4096, 2 * 79 / 4096 - 66 / 4096),  # symmetric in the two directions
        (0, 6, 2 / 64, 1 / 64),  # the smallest exact p of six discordant tasks
        (1, 1, 1.0, 1.0),
    ],
)
def test_mcnemar_exact_and_mid_p(worse: int, better: int, exact: float, mid: float) -> None:
    """McNemar's two-sided exact p and mid-p from the discordant counts (values worked by hand)."""
    found = mcnemar(worse, better)
    assert found == pytest.approx((exact, mid), rel=1e-12)


def test_the_quantile_interpolates_between_order_statistics() -> None:
    """Type-7 quantiles: the ends are the extremes, the middle of two values is their mean."""
    values = [0.0, 1.0, 2.0, 3.0]
    assert (quantile(values, 0.0), quantile(values, 1.0), quantile(values, 0.5)) == (0.0, 3.0, 1.5)


def test_the_bootstrap_interval_is_reproducible_from_its_seed_and_degenerate_without_spread() -> None:
    """The same seed gives the same interval; equal differences give [d, d] without drawing."""
    draws = random.Random(1)
    diffs = [draws.gauss(0.1, 1.0) for _ in range(50)]
    first = bootstrap_interval(diffs, 0.95, 500, random.Random("7/bootstrap"))
    again = bootstrap_interval(diffs, 0.95, 500, random.Random("7/bootstrap"))
    assert first == again and first[0] < sum(diffs) / 50 < first[1]
    assert bootstrap_interval([0.0] * 30, 0.95, 500, random.Random(0)) == (0.0, 0.0)


def test_the_sign_flip_test_sees_no_change_in_zero_differences_and_a_shift_in_consistent_ones() -> None:
    """No difference anywhere: p = 1. Forty tasks all 0.25 better: p at its floor 1/(N+1)."""
    assert sign_flip_p([0.0] * 40, 999, random.Random(0)) == 1.0
    assert sign_flip_p([0.25] * 40, 999, random.Random(0)) == pytest.approx(1 / 1000)
    balanced = [0.5, -0.5] * 20
    assert sign_flip_p(balanced, 999, random.Random(0)) == 1.0


@pytest.mark.parametrize(("n", "p"), [(10, 0.5), (200, 0.1), (5000, 0.93), (1, 0.3)])
def test_binomial_draws_have_the_binomial_mean_and_variance(n: int, p: float) -> None:
    """20,000 draws of Binomial(n, p): their mean and variance within 5 standard errors of n p, n p q."""
    rng = random.Random(11)
    draws = [binomial_draw(n, p, rng) for _ in range(20_000)]
    mean = sum(draws) / len(draws)
    variance = sum((d - mean) ** 2 for d in draws) / (len(draws) - 1)
    assert all(0 <= d <= n for d in draws)
    assert abs(mean - n * p) < 5 * math.sqrt(n * p * (1 - p) / len(draws))
    assert variance == pytest.approx(n * p * (1 - p), rel=0.06)


def test_resampling_by_counts_gives_the_interval_resampling_task_by_task_gives() -> None:
    """0/1 differences (few values, resampled by counts) and the same differences nudged apart
    (every value distinct, resampled task by task): the two intervals agree to a few thousandths."""
    draws = random.Random(5)
    few = [draws.choice((-1.0, 0.0, 0.0, 1.0, 1.0)) for _ in range(400)]
    many = [d + i * 1e-12 for i, d in enumerate(few)]
    by_counts = bootstrap_interval(few, 0.9, 4000, random.Random(1))
    by_tasks = bootstrap_interval(many, 0.9, 4000, random.Random(1))
    assert by_counts == pytest.approx(by_tasks, abs=0.012)


def test_the_sign_flip_test_by_sizes_agrees_with_flipping_each_task() -> None:
    """A few sizes of difference (drawn per size) and all-distinct ones (flipped per task) give the
    same p within the resampling error."""
    draws = random.Random(8)
    few = [draws.choice((-0.5, 0.25, 0.25, 0.5, 0.75)) for _ in range(60)]
    many = [d + i * 1e-12 for i, d in enumerate(few)]
    assert sign_flip_p(few, 20_000, random.Random(2)) == pytest.approx(
        sign_flip_p(many, 20_000, random.Random(2)), abs=0.01
    )
