"""``gymslurm compare``'s rules (gymslurm/comparison.py), on sides built rollout by rollout.

The interval's coverage is checked on the demo policy itself (gymslurm/demo/arith.py): its answer to
an episode is right when the episode's seeded draw falls under its accuracy, so two demo policies
of known accuracies differ by a known amount.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from gymslurm.comparison import (
    BenchmarkRewards,
    ComparisonDocument,
    Options,
    compare_benchmark,
    compare_runs,
)
from gymslurm.demo.arith import draw
from gymslurm.errors import ConfigError
from gymslurm.gate import parse_comparison

FAST = Options(resamples=500)


def side(name: str, rewards: dict[str, Iterable[float]], **others: dict[str, int]) -> BenchmarkRewards:
    """A benchmark whose task ``t`` has the given measured rewards, and ``others[category][t]`` more."""
    made = BenchmarkRewards(name=name, source=f"{name}.jsonl")
    for task, values in rewards.items():
        for value in values:
            made.add(("arith", task), "measured", value)
    for category, counts in others.items():
        for task, count in counts.items():
            for _ in range(count):
                made.add(("arith", task), category, None)  # type: ignore[arg-type]
    return made


def demo_policy(accuracy: float, seed: int, tasks: int, repeats: int = 1) -> BenchmarkRewards:
    """The rewards the demo Environment Server's policy earns (its own draw), one task per rollout id."""
    made = BenchmarkRewards(name="demo", source=f"seed{seed}")
    for task in range(tasks):
        for repeat in range(repeats):
            rollout = f"arith-{task}" if repeats == 1 else f"arith-{task}-r{repeat}"
            made.add(
                ("arith", str(task)), "measured", 1.0 if draw(seed, rollout, 0).policy < accuracy else 0.0
            )
    return made


def test_identical_runs_compare_as_no_change() -> None:
    """The same rewards on both sides: delta 0, interval [0, 0], p 1, no flip, "no change"."""
    rewards = {str(t): [float(t % 3 == 0)] for t in range(60)}
    result = compare_benchmark(side("a", rewards), side("a", rewards), FAST)
    assert (result.delta, result.interval, result.p_value, result.change) == (
        0.0,
        (0.0, 0.0),
        1.0,
        "no change",
    )
    assert result.test == "mcnemar" and result.flips.pass_to_fail == result.flips.fail_to_pass == []
    assert result.flips.unchanged == 60 and result.tasks.coverage == 1.0


def test_masked_and_unscored_rollouts_are_never_counted_as_failures() -> None:
    """A task the candidate only masked or left unscored is not a fail: it is left out and counted."""
    base = side("a", {"1": [1.0], "2": [1.0], "3": [1.0], "4": [0.0]})
    cand = side("a", {"3": [1.0], "4": [0.0]}, masked={"1": 1}, unscored={"2": 1})
    result = compare_benchmark(base, cand, FAST)
    assert (result.delta, result.baseline_mean, result.candidate_mean) == (0.0, 0.5, 0.5)
    assert result.flips.pass_to_fail == [] and result.change == "no change"
    assert (result.tasks.paired, result.tasks.baseline_only, result.tasks.candidate_only) == (2, 2, 0)
    rollouts = result.candidate.rollouts
    assert (rollouts["masked"], rollouts["unscored"], rollouts["failed"], rollouts["measured"]) == (
        1,
        1,
        0,
        2,
    )


def test_a_masked_rollout_beside_measured_ones_leaves_the_task_measured_by_the_others() -> None:
    """Repeats of one task: a masked one is counted apart, the measured ones make the task's mean."""
    cand = side("a", {"1": [1.0, 0.0]}, masked={"1": 1})
    result = compare_benchmark(side("a", {"1": [1.0, 1.0, 1.0]}), cand, FAST)
    assert (result.tasks.paired, result.candidate_mean, result.delta) == (1, 0.5, -0.5)


def test_tasks_only_one_side_measured_are_excluded_and_counted() -> None:
    """Tasks measured on one side only (absent, or failed, on the other) are counted, never paired."""
    base = side("a", {str(t): [1.0] for t in range(10)}, failed={"20": 1})
    cand = side("a", {str(t): [0.0] for t in range(5, 15)}, omitted={"0": 1})
    result = compare_benchmark(base, cand, FAST)
    counts = result.tasks
    assert (counts.paired, counts.baseline_only, counts.candidate_only, counts.neither) == (5, 5, 5, 1)
    assert counts.coverage == pytest.approx(5 / 16)
    assert (result.baseline_mean, result.candidate_mean, result.delta) == (1.0, 0.0, -1.0)
    assert (result.baseline.mean, result.baseline.measured_tasks, result.baseline.tasks) == (1.0, 10, 11)


def test_no_task_measured_on_both_sides_is_not_comparable() -> None:
    """Disjoint tasks: no delta, no interval, no test, "not comparable"."""
    result = compare_benchmark(side("a", {"1": [1.0]}), side("a", {"2": [1.0]}), FAST)
    assert (result.delta, result.interval, result.test, result.change) == (
        None,
        None,
        "none",
        "not comparable",
    )


def test_repeats_are_averaged_per_task_before_the_tasks_are_compared() -> None:
    """Four repeats of 1, 1, 1, 0 are one task of mean 0.75; the test is the sign-flip one, not McNemar."""
    base = side("a", {"1": [1.0, 1.0, 1.0, 0.0], "2": [0.0, 0.0, 0.0, 0.0]})
    cand = side("a", {"1": [1.0, 0.0, 0.0, 0.0], "2": [1.0]})
    result = compare_benchmark(base, cand, FAST)
    assert (result.baseline_mean, result.candidate_mean) == (0.375, 0.625)
    assert result.delta == pytest.approx(0.25) and result.test == "sign_flip" and result.p_exact is None
    assert [f.task_id for f in result.flips.pass_to_fail] == ["1"]
    assert [f.task_id for f in result.flips.fail_to_pass] == ["2"]


def test_a_task_mean_of_exactly_one_half_is_a_tie_not_a_flip() -> None:
    """NeMo Gym's rule: above 0.5 passes, exactly 0.5 on either side is tied."""
    base = side("a", {"1": [1.0, 0.0], "2": [1.0]})
    cand = side("a", {"1": [0.0], "2": [1.0, 0.0]})
    flips = compare_benchmark(base, cand, FAST).flips
    assert (flips.mode, flips.tied, flips.pass_to_fail, flips.fail_to_pass) == ("binary", 2, [], [])


def test_continuous_rewards_list_the_tasks_that_changed() -> None:
    """Rewards that are not 0/1: no pass/fail, every task whose mean moved is listed, largest first."""
    base = side("a", {"1": [0.2], "2": [0.5], "3": [0.9]})
    cand = side("a", {"1": [0.3], "2": [0.5], "3": [0.4]})
    result = compare_benchmark(base, cand, FAST)
    assert result.binary is False and result.flips.mode == "continuous" and result.test == "sign_flip"
    assert [f.task_id for f in result.flips.changed] == ["3", "1"] and result.flips.unchanged == 1


def test_flips_are_listed_regressions_first_in_task_order() -> None:
    """With 0/1 rewards every flip moves by 1, so numeric task ids come in numeric order."""
    base = side("a", {str(t): [1.0] for t in (2, 10, 1)} | {"5": [0.0]})
    cand = side("a", {str(t): [0.0] for t in (2, 10, 1)} | {"5": [1.0]})
    flips = compare_benchmark(base, cand, FAST).flips
    assert [f.task_id for f in flips.pass_to_fail] == ["1", "2", "10"]
    assert [f.task_id for f in flips.fail_to_pass] == ["5"]


def test_the_comparison_is_reproducible_from_its_seed() -> None:
    """The same seed, the same document; another seed moves only the resampled interval."""
    base, cand = demo_policy(0.8, 1, 80), demo_policy(0.7, 2, 80)
    first = compare_benchmark(base, cand, Options(seed=3, resamples=300))
    assert first == compare_benchmark(base, cand, Options(seed=3, resamples=300))
    other = compare_benchmark(base, cand, Options(seed=4, resamples=300))
    assert other.delta == first.delta and other.p_value == first.p_value and other.interval != first.interval


def test_the_interval_covers_the_true_difference_of_two_demo_policies_in_90_of_100_trials() -> None:
    """Two demo policies of accuracy 0.8 and 0.65 on 200 tasks, 100 seeded trials: the 95% interval
    holds the true difference (-0.15) in at least 90 of them, and excludes 0 in most."""
    covered = excluded_zero = 0
    for trial in range(100):
        result = compare_benchmark(
            demo_policy(0.8, 2 * trial, 200),
            demo_policy(0.65, 2 * trial + 1, 200),
            Options(seed=trial, resamples=1000),
        )
        assert result.interval is not None
        covered += result.interval[0] <= -0.15 <= result.interval[1]
        excluded_zero += result.change == "regressed"
    assert covered >= 90, covered
    assert excluded_zero >= 80, excluded_zero


def test_the_interval_covers_the_true_difference_with_repeats_in_90_of_100_trials() -> None:
    """The same with four repeats per task (per-task means, the sign-flip test): coverage >= 90/100."""
    covered = 0
    for trial in range(100):
        result = compare_benchmark(
            demo_policy(0.7, 2 * trial, 60, repeats=4),
            demo_policy(0.6, 2 * trial + 1, 60, repeats=4),
            Options(seed=trial, resamples=500),
        )
        assert result.interval is not None and result.test == "sign_flip"
        covered += result.interval[0] <= -0.1 <= result.interval[1]
    assert covered >= 90, covered


def test_two_equal_demo_policies_are_rarely_called_different() -> None:
    """Equal accuracies (0.7 and 0.7, independent draws): McNemar's mid-p is below 0.05 in at most 10
    of 100 trials (its nominal rate is 5), and the interval says "no change" in at least 90."""
    significant = no_change = 0
    for trial in range(100):
        result = compare_benchmark(
            demo_policy(0.7, 2 * trial, 200),
            demo_policy(0.7, 2 * trial + 1, 200),
            Options(seed=trial, resamples=500),
        )
        assert result.p_value is not None and result.test == "mcnemar"
        significant += result.p_value < 0.05
        no_change += result.change == "no change"
    assert significant <= 10 and no_change >= 90, (significant, no_change)


def test_suites_pair_benchmarks_by_name_and_list_the_unpaired() -> None:
    """Several benchmarks a side: paired by name in the baseline's order; one side's extras listed."""
    make = lambda name: side(name, {"1": [1.0]})  # noqa: E731
    doc = compare_runs([make("a"), make("b"), make("c")], [make("c"), make("a"), make("d")], FAST, ("A", "B"))
    assert [entry.benchmark for entry in doc.benchmarks] == ["a", "c"]
    assert [(u.benchmark, u.side) for u in doc.unpaired] == [("b", "baseline"), ("d", "candidate")]


def test_two_single_runs_pair_whatever_their_names() -> None:
    """A run of one benchmark against a file of another name: compared, under the candidate's name."""
    doc = compare_runs([side("rollouts", {"1": [1.0]})], [side("arith", {"1": [0.0]})], FAST, ("A", "B"))
    assert [entry.benchmark for entry in doc.benchmarks] == ["arith"] and doc.unpaired == []


def test_the_document_reads_back_as_saved_and_refuses_another_version() -> None:
    """``--json`` output parses back equal; a future version or a broken document is a ConfigError."""
    doc = compare_runs([demo_policy(0.8, 1, 30)], [demo_policy(0.6, 2, 30)], FAST, ("A", "B"))
    raw = doc.model_dump_json().encode()
    assert parse_comparison(raw, "saved.json") == doc and isinstance(doc, ComparisonDocument)
    with pytest.raises(ConfigError, match=r"saved\.json: the comparison document is version 2"):
        parse_comparison(raw.replace(b'"format_version":1', b'"format_version":2'), "saved.json")
    with pytest.raises(ConfigError, match="not a valid comparison document"):
        parse_comparison(b'{"format_version": 1, "benchmarks": 3}', "saved.json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        parse_comparison(b"{", "saved.json")
