"""The suite's pure rules: shards to link chains, the link's combined decision, resubmits (docs/suites.md)."""

from __future__ import annotations

import pytest

from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.suite_rules import (
    MIN_SHARE,
    Work,
    chains_for,
    combine,
    combined_verdict,
    eta_s,
    gpu_hours_split,
    in_chain,
    load_shares,
    needs_resubmit_copy,
)

D = Decision


def test_a_suite_runs_as_many_chains_as_its_largest_benchmark_has_shards() -> None:
    """Shards 4, 2 and 1 make four chains."""
    assert chains_for([4, 2, 1]) == 4


@pytest.mark.parametrize(
    ("chain", "expected"),
    [(0, ["a", "b", "c"]), (1, ["a", "b"]), (2, ["a"]), (3, ["a"]), (4, [])],
)
def test_chain_k_runs_shard_k_of_every_benchmark_that_has_one(chain: int, expected: list[str]) -> None:
    """A benchmark with fewer shards has no work in the higher chains; the suite's order is kept."""
    assert in_chain({"a": 4, "b": 2, "c": 1}, chain) == expected


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        ({}, D.DONE),  # no benchmark had work: nothing is left
        ({"a": D.DONE, "b": D.DONE}, D.DONE),  # all 0 -> done
        ({"a": D.DONE, "b": D.CONTINUE}, D.CONTINUE),  # any 75 -> continue
        ({"a": D.STOP_FAILED, "b": D.CONTINUE}, D.CONTINUE),  # a 76 stops only its benchmark
        ({"a": D.STOP_FAILED, "b": D.DONE}, D.STOP_FAILED),  # ... and the chain once the others are done
        ({"a": D.RETRY, "b": D.DONE}, D.RETRY),  # 1 -> the usual retry
        ({"a": D.RETRY, "b": D.CONTINUE}, D.CONTINUE),  # a retry beside progress is not the chain's retry
        ({"a": D.STOP_EXHAUSTED, "b": D.DONE}, D.STOP_EXHAUSTED),  # a crash loop ends only its benchmark
        ({"a": D.STOP_EXHAUSTED, "b": D.STOP_FAILED}, D.STOP_FAILED),  # a fix is needed first
        ({"a": D.PAUSED, "b": D.DONE}, D.PAUSED),  # a pause pauses the chain
        ({"a": D.STOP_BUDGET, "b": D.STOP_WALLTIME}, D.STOP_WALLTIME),
    ],
)
def test_the_links_decision_combines_each_benchmarks(
    decisions: dict[str, Decision], expected: Decision
) -> None:
    """One row per sentence of the rule in suite_rules' docstring."""
    assert combine(decisions) == expected


def test_the_chain_spends_a_retry_only_when_every_benchmark_going_on_retries() -> None:
    """The suite chain's budgets: a job, its walltime, a retry for a RETRY, a link without progress."""
    before = Budgets(jobs=2, walltime_s=10.0, infra_retries_used=1, links_without_progress=1)
    retry = combined_verdict({"a": D.RETRY, "b": D.DONE}, before, 5.0, progressed=False)
    assert retry.decision == D.RETRY
    assert retry.budgets_after == Budgets(
        jobs=3, walltime_s=15.0, infra_retries_used=2, links_without_progress=2
    )
    going = combined_verdict({"a": D.RETRY, "b": D.CONTINUE}, before, 5.0, progressed=True)
    assert going.budgets_after.infra_retries_used == 1
    assert going.budgets_after.links_without_progress == 0
    assert going.reason == "suite link: a RETRY, b CONTINUE"


@pytest.mark.parametrize(
    ("member_epochs", "suite_epochs", "done", "decided", "expected"),
    [
        (1, 2, False, True, True),  # stopped (EXHAUSTED, FAILED, PAUSED): restarted with the suite chain
        (1, 2, True, True, False),  # DONE: skipped
        (2, 2, False, True, False),  # already took it
        (1, 2, False, False, False),  # never ran (a benchmark added later): nothing to restart
    ],
)
def test_a_resubmit_restarts_every_benchmark_of_the_chain_not_done(
    member_epochs: int, suite_epochs: int, done: bool, decided: bool, expected: bool
) -> None:
    """Resubmitting a suite skips finished benchmarks."""
    assert needs_resubmit_copy(member_epochs, suite_epochs, done, decided) is expected


@pytest.mark.parametrize(
    ("weights", "sequential", "expected"),
    [
        ({"a": 1.0, "b": 1.0}, False, {"a": 0.5, "b": 0.5}),
        ({"a": 3.0, "b": 1.0}, False, {"a": 0.75, "b": 0.25}),
        ({"a": 1.0}, False, {"a": 1.0}),
        ({"a": 3.0, "b": 1.0}, True, {"a": 1.0, "b": 1.0}),
        ({"a": 0.0, "b": 0.0}, False, {"a": 0.5, "b": 0.5}),
    ],
)
def test_with_no_work_known_concurrent_collectors_share_the_model_server_by_weight(
    weights: dict[str, float], sequential: bool, expected: dict[str, float]
) -> None:
    """Before any record: the split is by weight; in order, or alone, each has it all."""
    assert load_shares(weights, sequential) == pytest.approx(expected)


FAST, SLOW = Work(40, 0.5), Work(40, 5.0)


@pytest.mark.parametrize(
    ("weights", "work", "expected"),
    [
        # bench/suite.py: four fast benchmarks beside one whose rollouts ask the model 10 times
        (
            dict.fromkeys("abcds", 1.0),
            {"a": FAST, "b": FAST, "c": FAST, "d": FAST, "s": SLOW},
            {**dict.fromkeys("abcd", 10 / 41), "s": 1 / 41},
        ),
        ({"a": 1.0, "b": 1.0}, {"a": Work(10, 1.0), "b": Work(20, 1.0)}, {"a": 2 / 3, "b": 1 / 3}),
        ({"a": 1.0, "b": 1.0}, {"a": Work(10, 2.0), "b": Work(10, 1.0)}, {"a": 1 / 3, "b": 2 / 3}),
        ({"a": 1.0, "b": 1.0}, {"a": Work(10, 1.0), "b": Work(10, 1.0)}, {"a": 0.5, "b": 0.5}),
    ],
)
def test_the_benchmark_with_the_least_model_work_left_gets_the_most_of_the_server(
    weights: dict[str, float], work: dict[str, Work], expected: dict[str, float]
) -> None:
    """Shares go as 1 / (rollouts left x seconds a rollout holds the server): short ones end first."""
    assert load_shares(weights, False, work) == pytest.approx(expected)


def test_a_weight_still_scales_a_benchmarks_share() -> None:
    """Weight 10 on the slow one brings it back to the fast ones' share (10 / 41 each)."""
    work = {"a": FAST, "b": FAST, "c": FAST, "d": FAST, "s": SLOW}
    shares = load_shares({**dict.fromkeys("abcd", 1.0), "s": 10.0}, False, work)
    assert shares == pytest.approx(dict.fromkeys("abcds", 0.2))


@pytest.mark.parametrize(
    ("work", "expected"),
    [
        ({"a": Work(0, 1.0), "b": Work(10, 1.0), "c": Work(30, 1.0)}, {"a": 1.0, "b": 0.75, "c": 0.25}),
        ({"a": Work(0, 1.0), "b": Work(0, 1.0), "c": Work(30, 1.0)}, {"a": 1.0, "b": 1.0, "c": 1.0}),
    ],
)
def test_a_collector_with_nothing_left_leaves_the_split_to_the_others(
    work: dict[str, Work], expected: dict[str, float]
) -> None:
    """Nothing left: it is out of the split (its share caps nothing); one left alone has it all."""
    assert load_shares(dict.fromkeys("abc", 1.0), False, work) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("work", "expected"),
    [
        # b not measured yet: its rollouts count as a's (1 s), its count is its own
        ({"a": Work(10, 1.0), "b": Work(30, None)}, {"a": 0.75, "b": 0.25}),
        # c has no record yet: the mean of the others' counts (20) at their mean time (1 s)
        ({"a": Work(10, 1.0), "b": Work(30, 1.0)}, {"a": 6 / 11, "b": 2 / 11, "c": 3 / 11}),
        ({"a": Work(10, 1.0)}, {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}),  # b, c: as a (10 x 1 s)
    ],
)
def test_what_is_not_measured_yet_counts_as_the_others_mean(
    work: dict[str, Work], expected: dict[str, float]
) -> None:
    """A collector not measured yet is neither favoured nor held back: it counts as a typical one."""
    weights = {"a": 1.0, "b": 1.0, "c": 1.0} if len(expected) == 3 else {"a": 1.0, "b": 1.0}
    assert load_shares(weights, False, work) == pytest.approx(expected)


def test_a_share_is_never_zero() -> None:
    """A collector with far more work than another still keeps a share (one request at the server)."""
    shares = load_shares({"a": 1.0, "b": 1.0}, False, {"a": Work(1, 0.1), "b": Work(10**6, 100.0)})
    assert shares["b"] == MIN_SHARE
    assert shares["a"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("remaining", "in_flight_s", "requests", "expected"),
    [
        (30, 10.0, 4, Work(30, 2.5)),
        (30, 0.0, 0, Work(30, None)),  # nothing sent yet: not measured
        (30, 0.0, 2, Work(30, None)),  # sent this instant: no time counted yet
        (-1, 1.0, 1, Work(0, 1.0)),
    ],
)
def test_a_rollouts_time_at_the_server_is_the_mean_time_in_flight_of_the_requests_sent(
    remaining: int, in_flight_s: float, requests: int, expected: Work
) -> None:
    """Each request sent counts its time in flight (one still out: so far), over the requests sent."""
    assert Work.measured(remaining, in_flight_s, requests) == expected


@pytest.mark.parametrize(
    ("busy", "gpu_hours", "expected"),
    [
        ({"a": 30.0, "b": 10.0}, 8.0, {"a": 6.0, "b": 2.0}),
        ({"a": 30.0, "b": 0.0}, 8.0, {"a": 8.0, "b": 0.0}),
        ({"a": 0.0, "b": 0.0}, 8.0, {"a": None, "b": None}),
        ({"a": 30.0, "b": 10.0}, None, {"a": None, "b": None}),
    ],
)
def test_gpu_hours_are_split_by_each_benchmarks_share_of_the_servers_busy_time(
    busy: dict[str, float], gpu_hours: float | None, expected: dict[str, float | None]
) -> None:
    """A benchmark's GPU-hours are the suite's times its share of the busy time; none when unknown."""
    assert gpu_hours_split(busy, gpu_hours) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("remaining", "rate", "running", "expected"),
    [(0, 0.0, False, 0.0), (100, 4.0, True, 25.0), (100, 0.0, True, None), (100, 4.0, False, None)],
)
def test_a_benchmarks_eta_is_what_is_left_at_its_running_rate(
    remaining: int, rate: float, running: bool, expected: float | None
) -> None:
    """ETA: nothing left is 0; rollouts left at the running collectors' rate; else unknown."""
    assert eta_s(remaining, rate, running) == expected
