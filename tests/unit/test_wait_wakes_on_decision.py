"""``submit --wait``'s back-off sleep ends when a link or the aggregation decides (docs/launcher.md).

The clock and the sleep are scripted (no real time passes): what is checked is how many sleeps of
:data:`DECIDED_EVERY_S` the wait took, never how long anything lasted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gymslurm.commands import wait as wait_mod
from gymslurm.commands.wait import DECIDED_EVERY_S, sleep_until_decided
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.rundir import RunDir
from tests.unit.test_cancel_keeps_final import _decided, _run


def _scripted_clock(monkeypatch: pytest.MonkeyPatch, on_sleep: Callable[[int], None]) -> list[float]:
    """time.monotonic / time.sleep on a fake clock; ``on_sleep(n)`` runs after the n-th sleep."""
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds
        on_sleep(len(sleeps))

    monkeypatch.setattr(wait_mod.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(wait_mod.time, "sleep", sleep)
    return sleeps


def _after(n: int, act: Callable[[], object]) -> Callable[[int], None]:
    return lambda count: act() if count == n else None


@pytest.mark.parametrize(
    ("decide", "at", "woken_after"),
    [
        (None, 3, None),  # nothing decided: the whole 10 s back-off, in looks of 0.2 s
        (lambda run: run.tally.spent(0, 0.0), 7, 7),  # a link decided (its tally line): the next look
        (lambda run: run.tally.chain_finished(1), 7, 7),  # a chain finished
        (lambda run: [run.aggregate_ledger.append(r) for r in _decided("300", Decision.DONE)], 7, 7),
        (lambda run: run.ledger(0).append(_decided("200", Decision.DONE)[0]), 7, None),  # a start: no wake
        (lambda run: run.tally.spent(0, 0.0), 2, 5),  # decided 0.4 s in: asked again 1 s in, not sooner
    ],
)
def test_a_decision_ends_the_back_off_sleep(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    decide: Callable[[RunDir], object] | None,
    at: int,
    woken_after: int | None,
) -> None:
    """The sleep of a 10 s back-off ends at the first look after the run's tally or the aggregation's
    ledger changed (``at`` the at-th look), but not before 1 s; nothing else wakes it."""
    run = _run(tmp_path)
    taken = _scripted_clock(monkeypatch, _after(at, lambda: decide(run)) if decide else lambda n: None)
    sleep_until_decided(run, 10.0)
    assert all(s <= DECIDED_EVERY_S for s in taken), taken
    if woken_after is not None:
        assert len(taken) == woken_after, taken
    else:
        assert sum(taken) == pytest.approx(10.0), taken
