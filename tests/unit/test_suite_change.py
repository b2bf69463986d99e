"""An edited suite file against a suite run (commands/suite_change.py): what is kept, added, dropped."""

from __future__ import annotations

import pytest

from gymslurm.commands.suite_change import plan_change
from gymslurm.errors import ConfigError
from gymslurm.launcher.suite_run import SuiteEntry, SuiteRecord

RECORD = SuiteRecord(suite="s", benchmarks=[SuiteEntry(name="a", shards=2), SuiteEntry(name="b", shards=1)])


def test_a_new_benchmark_is_added_and_reopens_the_chains_of_its_shards() -> None:
    """``c`` of one shard is added: chain 0 runs again; ``a`` and ``b`` are kept, nothing dropped."""
    change = plan_change(RECORD, {"a": 2, "b": 1, "c": 1}, {"a", "b"}, chains=2)
    assert (change.added, change.kept, change.dropped, change.reopened) == (["c"], ["a", "b"], [], [0])


def test_a_benchmark_left_out_is_dropped_and_reopens_nothing() -> None:
    """``b`` left out of the file is dropped (its files stay): no chain runs again."""
    change = plan_change(RECORD, {"a": 2}, {"a", "b"}, chains=2)
    assert (change.added, change.dropped, change.reopened) == ([], ["b"], [])


def test_a_dropped_benchmark_listed_again_is_kept_as_it_was() -> None:
    """A benchmark whose folder the run has (dropped earlier) is kept, not added again."""
    record = RECORD.model_copy(update={"benchmarks": RECORD.benchmarks[:1], "dropped": ["b"]})
    change = plan_change(record, {"a": 2, "b": 1}, {"a", "b"}, chains=2)
    assert (change.added, change.kept, change.reopened) == ([], ["a", "b"], [])


def test_an_added_benchmark_with_more_shards_than_the_run_has_chains_is_refused() -> None:
    """The run's chains are fixed: 3 shards in a run of 2 chains is an error naming it."""
    with pytest.raises(ConfigError, match=r"c \(3 shards\).*2 chain"):
        plan_change(RECORD, {"a": 2, "c": 3}, {"a", "b"}, chains=2)
