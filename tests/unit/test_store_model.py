"""Property: whatever sequence of reservations and appends, a reopened store reads back exactly it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gymslurm.records import EpisodeFailure, EpisodeId, RolloutFailureRecord
from gymslurm.selection import select_rollout
from gymslurm.store import RunPaths, RunSpec, RunStore

DIGEST = "sha256:" + "4" * 64
ROLLOUTS = 4
OPS = st.lists(
    st.tuples(
        st.integers(0, ROLLOUTS - 1), st.sampled_from(["result", "masked", "failure", "omission", "none"])
    ),
    max_size=25,
)


def save(store: RunStore, index: int, kind: str) -> None:
    attempt = store.reserve(index)
    if kind == "result":
        store.append_result(index, attempt, {"reward": 0.5})
    elif kind == "masked":
        store.append_result(index, attempt, {"mask_sample": True, "failure_kind": "session_lost"})
    elif kind == "failure":
        record = RolloutFailureRecord(
            episode_id=EpisodeId(rollout_id=store.rollout_ids()[index], attempt=attempt),
            run_id=store.run_id,
            source="environment",
            delivery="delivered",
            failure=EpisodeFailure(
                failure_reason="x", terminal=attempt % 2 == 1, failure_kind="session_lost"
            ),
        )
        store.append_failure(index, attempt, record)
    elif kind == "omission":
        store.append_omission(index, attempt)


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_reopened_store_agrees_with_what_was_saved(ops: list[tuple[int, str]]) -> None:
    """Reservations, outcomes (as returned by the appends) and selected states survive a reopen."""
    with tempfile.TemporaryDirectory() as folder:
        paths = RunPaths.for_output(Path(folder) / "m.jsonl")
        rows = [
            {"_ng_rollout_id": f"m-{i}", "task_id": {"taskset": "m", "task_id": str(i)}}
            for i in range(ROLLOUTS)
        ]
        store = RunStore.create_fresh(
            paths,
            RunSpec(
                source_path="d",
                source_digest=DIGEST,
                inputs=rows,
                identity={},
                config_digest=DIGEST,
                max_rollout_attempts=2,
            ),
        )
        store.reconcile()
        for index, kind in ops:
            save(store, index, kind)
        expected_counts = [sum(1 for i, _ in ops if i == index) for index in range(ROLLOUTS)]
        store.close()
        reopened = RunStore.open(paths)
        history = reopened.read_history()
        recon = reopened.reconcile()
        assert list(reopened.table.counts()) == expected_counts
        assert recon.attempts == len(ops)
        for index in range(ROLLOUTS):
            outcomes = history.outcomes(index)
            kinds = [kind for i, kind in ops if i == index]
            saved = {attempt: kind for attempt, kind in enumerate(kinds) if kind != "none"}
            names = {"masked": "result"}
            assert {o.attempt: o.kind for o in outcomes} == {a: names.get(k, k) for a, k in saved.items()}
            assert recon.states[index] == select_rollout(expected_counts[index], outcomes, recon.policy)
        reopened.close()


def test_an_environment_failure_that_was_possibly_delivered_is_refused() -> None:
    """PROTOCOL.md: a failure the environment reported implies delivered; possibly_delivered is refused."""
    with pytest.raises(ValidationError, match="source: environment"):
        RolloutFailureRecord(
            episode_id=EpisodeId(rollout_id="m-0", attempt=0),
            run_id="r",
            source="environment",
            delivery="possibly_delivered",
            failure=EpisodeFailure(failure_reason="x", terminal=False),
        )
