"""The suite's pure rules: shards to link chains, the link's combined decision, resubmits (docs/suites.md)."""

from __future__ import annotations

import pytest

from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.suite_rules import (
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
        ({"a": 0.0, "b": 0.0}, False, {"a": 1.0, "b": 1.0}),
    ],
)
def test_concurrent_collectors_share_the_model_server_by_weight(
    weights: dict[str, float], sequential: bool, expected: dict[str, float]
) -> None:
    """Concurrent collectors split the server by weight; in order, or alone, each has it all."""
    assert load_shares(weights, sequential) == pytest.approx(expected)


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
