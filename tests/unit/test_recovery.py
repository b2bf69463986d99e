"""The specification's recovery API with NeMo Gym's signatures (gymslurm.recovery; spec 000, 001)."""

from __future__ import annotations

import asyncio
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import gymslurm
from gymslurm.coverage import compute_coverage
from gymslurm.errors import ConfigError, IncompleteRunError, RunLockedError
from gymslurm.exitcodes import ExitCode
from gymslurm.recovery import (
    EpisodeFailedError,
    RolloutStore,
    check_completion,
    preprocess_examples,
    run_examples,
)
from gymslurm.selection import BudgetPolicy, Disposition, RolloutState
from gymslurm.settings import load_settings
from gymslurm.store import RunLock, RunPaths, RunStore
from tests.unit.test_store_runstore import create

POLICY = BudgetPolicy(max_rollout_attempts=3)


def test_preprocess_examples_materializes_copies_as_a_collection_does() -> None:
    """Rows get rollout ids, task ids and repeat indices (num_repeats); the caller's rows are untouched."""
    examples = [{"question": "1+1"}, {"question": "2+2", "task_id": "b"}]
    rows = preprocess_examples(examples, num_repeats=2, taskset="arith")
    assert [row["_ng_rollout_id"] for row in rows] == ["arith-0-r0", "arith-0-r1", "arith-b-r0", "arith-b-r1"]
    assert rows[2]["task_id"] == {"taskset": "arith", "task_id": "b"}
    assert [(row["_ng_task_index"], row["_ng_rollout_index"]) for row in rows][:2] == [(0, 0), (0, 1)]
    assert examples == [{"question": "1+1"}, {"question": "2+2", "task_id": "b"}]


def test_preprocess_examples_refuses_nemo_gyms_agent_routing_by_name() -> None:
    """agent_map / fan_out have no meaning without NeMo Gym's agents: refused naming them."""
    with pytest.raises(ConfigError, match="agent_map"):
        preprocess_examples([{}], agent_map={"a": "b"})


def _server(request: httpx.Request) -> httpx.Response:
    body = orjson.loads(request.content)
    if request.url.host == "relay":  # a legacy relay: the flat row in, the flat verify response out
        return httpx.Response(200, json={**body, "reward": 1.0})
    episode, task = body["episode_id"], body["task"]
    if task["task_input"].get("judge_failed"):  # a legacy agent whose judge did not answer
        result = {"reward": 0.0, "response": {"output_text": "4"}, **LEGACY_JUDGE_FAILED}
        return httpx.Response(200, json={"episode_id": episode, "task_id": task["task_id"], "result": result})
    if task["task_input"].get("fail"):
        failure = {"failure_reason": "sandbox lost", "terminal": False, "failure_kind": "session_lost"}
        return httpx.Response(
            200, json={"episode_id": episode, "task_id": task["task_id"], "failure": failure}
        )
    return httpx.Response(
        200, json={"episode_id": episode, "task_id": task["task_id"], "result": {"reward": 0.5}}
    )


LEGACY_JUDGE_FAILED = {"_ng_failure_class": "judge_failed", "_ng_failure_message": "the judge timed out"}


def _run(rows: list[dict[str, Any]], **options: Any) -> list[Any]:
    async def go() -> list[Any]:
        futures = run_examples(rows, transport=httpx.MockTransport(_server), **options)
        out = []
        for future in futures:
            try:
                out.append(await future)
            except EpisodeFailedError as error:
                out.append(error)
        return out

    return asyncio.run(go())


def test_run_examples_gives_result_dicts_and_raises_a_failure() -> None:
    """NeMo Gym's behaviour: (row, result dict); a failed attempt raises from its awaitable."""
    rows = preprocess_examples([{"q": 1}, {"fail": True}])
    ok, failed = _run(rows, server_url="http://typed:1")
    assert ok[1]["reward"] == 0.5 and ok[0]["_ng_rollout_id"] == "examples-0"
    assert isinstance(failed, EpisodeFailedError) and failed.record.failure.failure_kind == "session_lost"


def test_run_examples_gives_a_legacy_judge_failed_result_as_nemo_gym_does() -> None:
    """NeMo Gym 0.7.0's run_examples gives a legacy judge_failed result as its dict (a driver reads
    ``_ng_failure_class`` from it): no exception that would kill the driver at the first judge failure."""
    rows = preprocess_examples([{"judge_failed": True}])
    ((row, result),) = _run(rows, server_url="http://typed:1")
    assert result["_ng_failure_class"] == "judge_failed"
    assert result["_ng_failure_message"] == "the judge timed out"
    assert result["response"] == {"output_text": "4"} and result["_ng_rollout_id"] == row["_ng_rollout_id"]


def test_run_examples_routed_to_the_sidecar_gives_the_failure_row() -> None:
    """route_failures_to_sidecar=True: the failure comes back as the sidecar's _ng_failure_* row."""
    ((_, row),) = _run(
        preprocess_examples([{"fail": True}]), server_url="http://typed:1", route_failures_to_sidecar=True
    )
    assert (row["_ng_failure_class"], row["_ng_failure_terminal"]) == ("session_lost", False)
    assert row["_ng_failure_record"]["source"] == "environment"


def test_run_examples_speaks_the_legacy_protocol() -> None:
    """protocol=legacy_agent: the flat row goes out with NeMo Gym's stamps, the flat answer is the result."""
    ((_, result),) = _run(
        preprocess_examples([{"q": 7}]), server_url="http://relay:1", protocol="legacy_agent"
    )
    assert result["reward"] == 1.0 and result["q"] == 7


def test_run_examples_refuses_knobs_it_does_not_implement() -> None:
    """dispatch_budget_s (and drain_margin_s, latency_tracker) are refused by name, not ignored."""
    with pytest.raises(ConfigError, match="dispatch_budget_s"):
        run_examples([], server_url="http://x:1", dispatch_budget_s=10)


def states(*dispositions: Disposition, pending: bool = False) -> list[RolloutState]:
    return [RolloutState(d, None, 0, pending and d is Disposition.FAILED, False) for d in dispositions]


def coverage(*dispositions: Disposition, pending: bool = False) -> Any:
    return compute_coverage(
        states(*dispositions, pending=pending),
        run_id="r",
        attempts=2,
        policy=POLICY,
        identity_verified=True,
        historical_failed_attempts=0,
        progress_outcomes_recorded=1,
        written_at="2026-12-01T00:00:00Z",
    )


@pytest.mark.parametrize(
    ("retryable", "made_progress", "status"),
    [(True, True, ExitCode.CONTINUE), (True, False, ExitCode.RETRY), (False, True, ExitCode.STOP)],
)
def test_check_completion_raises_the_runtime_error_with_the_status(
    retryable: bool, made_progress: bool, status: int
) -> None:
    """001: an incomplete run raises a RuntimeError carrying 75 / 1 / 76 from the two explicit facts."""
    with pytest.raises(IncompleteRunError) as raised:
        check_completion(
            coverage(Disposition.MEASURED, Disposition.FAILED),
            retryable=retryable,
            made_progress=made_progress,
        )
    assert isinstance(raised.value, RuntimeError) and raised.value.status == status


def test_check_completion_passes_a_complete_run_and_a_partial_one_not_required() -> None:
    """Complete: DONE; incomplete without require_complete: DONE (partial results accepted)."""
    assert check_completion(coverage(Disposition.MEASURED), retryable=False, made_progress=False).code == 0
    partial = coverage(Disposition.MEASURED, Disposition.FAILED)
    assert check_completion(partial, retryable=True, made_progress=True, require_complete=False).code == 0


def test_allocate_attempt_reserves_durably_under_the_run_lock(tmp_path: Path) -> None:
    """Each call reserves the next execution before anything is sent, under the lock; a reopen sees it."""
    paths = RunPaths.for_output(tmp_path / "out.jsonl")
    store = create(paths, count=2)
    rollout = store.rollout_ids()[1]
    store.close()
    with RolloutStore(paths.output) as run:
        first, second = (
            run.allocate_attempt({"_ng_rollout_id": rollout}),
            run.allocate_attempt({"_ng_rollout_id": rollout}),
        )
        with pytest.raises(RunLockedError):
            RunLock(paths.lock).acquire()
        with pytest.raises(ConfigError, match="no rollout"):
            run.allocate_attempt({"_ng_rollout_id": "nope"})
    assert (first.attempt, second.attempt) == (0, 1)
    reopened = RunStore.open(paths)
    assert list(reopened.table.counts()) == [0, 2]
    reopened.close()


def test_collect_raises_the_runtime_error_under_require_complete(tmp_path: Path) -> None:
    """001: collect(settings, raw) with require_complete raises IncompleteRunError(status) instead of 75/1."""
    dataset = tmp_path / "in.jsonl"
    dataset.write_text('{"q": 1}\n')
    settings, raw = load_settings(
        [
            f"+input_jsonl_fpath={dataset}",
            f"+output_jsonl_fpath={tmp_path}/out.jsonl",
            "+environment_server_url=http://127.0.0.1:9",
            "+environment_config={m: 1}",
            "+require_complete=true",
            "+dispatch_breaker_failures=0",
            "+progress=none",
            "+summary=false",
        ]
    )
    with pytest.raises(IncompleteRunError) as raised:
        gymslurm.collect(settings, raw, stderr=StringIO(), stdout=sys.stdout)
    assert raised.value.status == ExitCode.RETRY
