"""Contract cases of spec 000/001 that the saved history and the live loop must agree on (issue 21).

Each case reads a saved sidecar row (``sidecar_outcome``, what reconcile, aggregation and health read)
and selects the rollout (``select_rollout``), or classifies a live reply; the store case saves through
a real run store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gymslurm.dispatch import Omitted
from gymslurm.metrics import ScoringPolicy, counts_as_zero
from gymslurm.selection import BudgetPolicy, Disposition, has_saved_generation, select_rollout
from gymslurm.store import RunPaths
from gymslurm.store.history import sidecar_outcome
from tests.unit.test_dispatch_legacy import run_once
from tests.unit.test_store_runstore import create

POLICY = BudgetPolicy(max_rollout_attempts=3)
PARTIAL = {"output": [], "id": "resp-1"}  # a partial response object, even without output (001)


def native_row(stage: str | None, response: object) -> dict[str, Any]:
    """A gymslurm sidecar row of a non-terminal native failure at ``stage`` that kept ``response``."""
    failure = {"failure_reason": "cleanup timed out", "terminal": False, "failure_kind": None, "stage": stage}
    record = {
        "schema_version": 1,
        "episode_id": {"rollout_id": "r-0", "attempt": 0},
        "run_id": "run",
        "source": "environment",
        "delivery": "delivered",
        "failure": failure,
    }
    return {
        "_ng_failure_record": record,
        "_ng_failure_class": "environment_server_failed",
        "_ng_failure_terminal": False,
        "_ng_failure_response": response,
    }


def test_a_cleanup_failure_that_kept_a_partial_response_is_never_regenerated() -> None:
    """001: the agent ran, so its partial response from a native cleanup stays a kept answer: final."""
    state = select_rollout(1, [sidecar_outcome(native_row("cleanup", PARTIAL), 0, 0)], POLICY)
    assert (state.disposition, state.pending, state.exhausted) == (Disposition.FAILED, False, False)


def test_an_agent_stage_response_is_diagnostic_and_the_episode_runs_again() -> None:
    """001: an agent-stage response the outcome policy rejected as failed is diagnostic only: retried."""
    assert select_rollout(1, [sidecar_outcome(native_row("agent", PARTIAL), 0, 0)], POLICY).pending


def test_a_legacy_sidecar_row_with_a_kept_response_is_never_regenerated() -> None:
    """A legacy row (no canonical record) that saved _ng_failure_response kept its answer: final."""
    row = {"_ng_failure_class": "agent_run_error", "_ng_failure_response": PARTIAL}
    assert not select_rollout(1, [sidecar_outcome(row, 0, 0)], POLICY).pending
    nemo_gym = {
        "_ng_failure_class": "environment_server_failed",
        "_ng_failure_stage": "cleanup",
        "_ng_failure_partial_response": PARTIAL,
    }  # NeMo Gym 0.7.0's own sidecar spelling
    assert not select_rollout(1, [sidecar_outcome(nemo_gym, 0, 0)], POLICY).pending


def test_a_string_response_is_not_a_saved_answer() -> None:
    """001: a response *object* is retained data; a string is diagnostic text: a timeout with one reruns."""
    assert not has_saved_generation("It is cold in sf.")
    row = {"_ng_failure_class": "timeout_exceeded", "_ng_failure_response": "It is cold in sf."}
    assert select_rollout(1, [sidecar_outcome(row, 0, 0)], POLICY).pending


def test_a_legacy_rows_own_attempt_limit_holds() -> None:
    """000: legacy runs keep their per-row _ng_failure_max_attempts: one counted failure of a limit-1 row
    exhausts the rollout (retries/at_cap), though the run's limit is 3."""
    row = {"_ng_failure_class": "agent_run_error", "_ng_failure_max_attempts": 1}
    state = select_rollout(1, [sidecar_outcome(row, 0, 0)], POLICY)
    assert (state.pending, state.exhausted) == (False, True)
    without = sidecar_outcome({"_ng_failure_class": "agent_run_error"}, 0, 0)
    assert select_rollout(1, [without], POLICY).pending


def test_a_skipped_reply_is_an_omission_that_keeps_its_payload() -> None:
    """A legacy ``skipped`` answer is an intentional omission (not a failure), its markers kept."""
    outcome, _ = run_once(
        "legacy_agent",
        200,
        {
            "_ng_failure_class": "skipped",
            "_ng_failure_terminal": True,
            "_ng_failure_message": "no deliverable",
        },
    )
    assert outcome == Omitted(
        {
            "_ng_failure_class": "skipped",
            "_ng_failure_terminal": True,
            "_ng_failure_message": "no deliverable",
        }
    )


def test_a_saved_skip_is_omitted_and_scored_only_when_asked(tmp_path: Path) -> None:
    """Saved by the store, a skip selects as omitted; count_failure_classes_as_zero=[skipped] scores it."""
    store = create(RunPaths.for_output(tmp_path / "out.jsonl"), count=1)
    store.reconcile()
    payload = {"_ng_failure_class": "skipped", "_ng_failure_terminal": True}
    store.append_omission(0, store.reserve(0), payload)
    (state,) = store.reconcile().states
    store.close()
    assert state.disposition is Disposition.OMITTED
    assert counts_as_zero(state, ScoringPolicy(count_failure_classes_as_zero=frozenset({"skipped"})))


@pytest.mark.parametrize("marker", [{}, {"_ng_omitted": True}])
def test_a_legacy_skipped_sidecar_row_is_an_omission(marker: dict[str, Any]) -> None:
    """A NeMo Gym sidecar row of class skipped (with or without the omission marker) selects as omitted."""
    row = {"_ng_failure_class": "skipped", "_ng_failure_terminal": True, **marker}
    assert select_rollout(1, [sidecar_outcome(row, 0, 0)], POLICY).disposition is Disposition.OMITTED
