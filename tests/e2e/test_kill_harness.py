"""The kill harness in CI: 30 local-backend runs whose links, successors, batch shells and
aggregations are SIGKILLed at random instants (a third in a job's first 100 ms); every run
finishes with the right merged output and ``submit --wait`` exit 0, with no human command."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.kill_harness import EARLY_S, Kill, Plan, random_plan, run_trial

TRIALS, AT_ONCE = 30, 15

pytestmark = pytest.mark.e2e


def test_the_plans_cover_every_kind_of_kill() -> None:
    """The 30 seeds kill links, successors and aggregations, shells and steps, early and late."""
    import random

    kills = [k for seed in range(TRIALS) for k in random_plan(random.Random(seed)).kills]
    early = [k for k in kills if k.delay_s < EARLY_S]
    assert len(early) >= 8 and len(kills) - len(early) >= 8
    assert {k.target for k in kills} == {"link", "aggregation"}
    assert {k.what for k in kills} == {"shell", "step"}
    assert any(k.nth == 1 for k in kills[1:])


def test_thirty_runs_killed_at_random_finish_by_themselves(tmp_path: Path) -> None:
    """Every trial: submit --wait exits 0 saying done, and each row's answer is merged exactly once."""
    with ThreadPoolExecutor(AT_ONCE) as pool:
        trials = list(pool.map(lambda seed: run_trial(tmp_path / f"t{seed}", seed), range(TRIALS)))
    failed = [t for t in trials if not t.passed]
    summary = "\n".join(f"seed {t.seed}: {t.killed} {t.seconds:.0f}s {t.last_line}" for t in trials)
    problems = "\n\n".join(f"seed {t.seed} {t.plan} {t.killed}: {t.problem}" for t in failed)
    assert not failed, f"{problems}\n{summary}"
    assert all(t.last_line.startswith("run ") and ": done:" in t.last_line for t in trials)
    assert sum(len(t.killed) for t in trials) >= TRIALS


def test_two_consecutive_jobs_killed_before_their_first_act_with_the_default_lookahead(
    tmp_path: Path,
) -> None:
    """A chain survives any two consecutive jobs killed before their first act: the first link's batch
    shell and then its successor's, each SIGKILLed as it starts, with the default ``slurm.lookahead``:
    the spare behind them carries the chain on; submit --wait exits 0 and every row is merged once."""
    from gymslurm.launcher.settings import SlurmSettings

    default = SlurmSettings.model_fields["lookahead"].default
    early = [Kill("link", "shell", 0.0), Kill("link", "shell", 0.0)]
    trial = run_trial(tmp_path, 0, plan=Plan(early, lookahead=default, bounded=False))
    assert trial.passed, f"{trial.killed}: {trial.problem}"
    assert len(trial.killed) == 2 and all("before its first act" in k for k in trial.killed), trial.killed
