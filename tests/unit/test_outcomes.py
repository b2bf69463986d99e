"""run_outcomes(): structured outcomes for direct callers, against httpx.MockTransport."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from gymslurm.errors import ConfigError, InvalidRolloutIdError, ProtocolError
from gymslurm.outcomes import OutcomeStream, RowOutcome, new_run_id, run_outcomes
from gymslurm.records import EpisodeId, RolloutFailureRecord

URL = "http://env.test:8000"
OLD_RUN = "run-" + "a" * 32


def row(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "_ng_rollout_id": f"arith-{n}",
        "task_id": {"taskset": "arith", "task_id": str(n)},
        "task_input": {"question": f"{n}+1", "nested": {"kept": [n]}},
    } | extra


def answer_by_task(outcomes: dict[str, dict]) -> Callable[[httpx.Request], httpx.Response]:
    """A handler answering each task with ``outcomes[task_id]`` (a result by default)."""

    def handler(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        payload = outcomes.get(sent["task"]["task_id"]["task_id"], {"result": {"reward": 1.0}})
        if "status" in payload:
            return httpx.Response(payload["status"], content=b"unavailable")
        reply = {"episode_id": sent["episode_id"], "task_id": sent["task"]["task_id"]} | payload
        return httpx.Response(200, content=orjson.dumps(reply))

    return handler


def collect(
    rows: list[dict], handler: Callable[[httpx.Request], httpx.Response], **options: Any
) -> list[RowOutcome]:
    """Run every row and await every outcome."""

    async def go() -> list[RowOutcome]:
        stream = run_outcomes(rows, server_url=URL, transport=httpx.MockTransport(handler), **options)
        return [await future for future in stream]

    return asyncio.run(go())


def by_rollout(results: list[RowOutcome]) -> dict[str, RowOutcome]:
    return {row["_ng_rollout_id"]: (row, outcome) for row, outcome in results}


def test_each_row_gives_its_outcome() -> None:
    """Completed dicts, failure records and omissions come back beside their own row."""
    handler = answer_by_task(
        {
            "1": {"failure": {"failure_reason": "sandbox died", "terminal": False, "stage": "seed"}},
            "2": {"result": {"_ng_no_persist": True}},
        }
    )
    results = by_rollout(collect([row(0), row(1), row(2)], handler))
    assert results["arith-0"][1]["reward"] == 1.0
    failure = results["arith-1"][1]
    assert isinstance(failure, RolloutFailureRecord)
    assert failure.episode_id == EpisodeId(rollout_id="arith-1", attempt=0)
    assert (failure.source, failure.delivery, failure.failure.stage) == ("environment", "delivered", "seed")
    assert results["arith-2"][1]["_ng_omitted"] is True
    assert "reward" not in results["arith-2"][1]


def test_completed_result_carries_the_row_stamps() -> None:
    """A completed dict is the environment's result plus the row's identity stamps."""
    ((returned_row, outcome),) = collect([row(0, _ng_task_index=0, _ng_rollout_index=0)], answer_by_task({}))
    assert outcome == {
        "reward": 1.0,
        "_ng_run_id": returned_row["_ng_run_id"],
        "_ng_rollout_id": "arith-0",
        "_ng_attempt": 0,
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "task_id": {"taskset": "arith", "task_id": "0"},
    }


def test_caller_rows_are_never_modified() -> None:
    """Returned rows are deep copies; the caller's rows stay exactly as they were."""
    rows = [row(0), row(1, _ng_run_id=OLD_RUN)]
    before = copy.deepcopy(rows)
    results = collect(rows, answer_by_task({}), run_id="run-" + "b" * 32)
    assert rows == before
    for returned_row, _ in results:
        assert all(returned_row is not original for original in rows)
        returned_row["task_input"]["nested"]["kept"].append("changed")
    assert rows == before


def test_run_id_overrides_row_stamps() -> None:
    """An explicit run_id replaces the copies' stamps and is the failure records' run id."""
    override = "run-" + "c" * 32
    handler = answer_by_task({"1": {"failure": {"failure_reason": "x", "terminal": True}}})
    results = by_rollout(
        collect([row(0, _ng_run_id=OLD_RUN), row(1, _ng_run_id=OLD_RUN)], handler, run_id=override)
    )
    assert results["arith-0"][0]["_ng_run_id"] == override
    assert results["arith-0"][1]["_ng_run_id"] == override
    failure = results["arith-1"][1]
    assert isinstance(failure, RolloutFailureRecord)
    assert failure.run_id == override


def test_without_run_id_stamped_rows_keep_theirs_and_others_share_a_new_one() -> None:
    """Pre-stamped rows keep their run id; unstamped rows share one new id for this invocation."""
    handler = answer_by_task({"2": {"failure": {"failure_reason": "x", "terminal": False}}})
    results = by_rollout(collect([row(0, _ng_run_id=OLD_RUN), row(1), row(2)], handler))
    assert results["arith-0"][0]["_ng_run_id"] == OLD_RUN
    new = results["arith-1"][0]["_ng_run_id"]
    assert re.fullmatch(r"run-[0-9a-f]{32}", new) and new != OLD_RUN
    failure = results["arith-2"][1]
    assert isinstance(failure, RolloutFailureRecord)
    assert failure.run_id == results["arith-2"][0]["_ng_run_id"] == new


def test_new_run_ids_differ_between_invocations() -> None:
    """Two invocations never share a generated run id."""
    assert new_run_id() != new_run_id()


def test_attempt_is_taken_from_the_row() -> None:
    """A row's _ng_attempt is the attempt sent and recorded."""
    sent: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(503)

    ((_, outcome),) = collect([row(0, _ng_attempt=4)], handler)
    assert sent[0]["episode_id"] == {"rollout_id": "arith-0", "attempt": 4}
    assert isinstance(outcome, RolloutFailureRecord)
    assert outcome.episode_id.capture_key == "arith-0-a4"
    assert outcome.delivery == "possibly_delivered"


@pytest.mark.parametrize(
    ("handler", "kind"),
    [
        pytest.param(answer_by_task({"0": {"status": 502}}), "transport_peer_drop", id="HTTP error"),
        pytest.param(
            lambda request: httpx.Response(200, content=b"{not json"),
            "environment_protocol_violation",
            id="JSON error",
        ),
        pytest.param(
            answer_by_task({"0": {"result": {"reward": 1, "_ng_attempt": 9}}}),
            "environment_protocol_violation",
            id="result validation error",
        ),
        pytest.param(
            answer_by_task({"0": {"result": {"reward": 1, "response": "the answer"}}}),
            "environment_protocol_violation",
            id="a response that is not an object (invalid_response)",
        ),
    ],
)
def test_expected_errors_become_failure_records(handler: Callable, kind: str) -> None:
    """Expected HTTP, JSON and result-validation errors are failure records, never a reward-zero sample."""
    ((_, outcome),) = collect([row(0)], handler)
    assert isinstance(outcome, RolloutFailureRecord)
    assert outcome.failure.failure_kind == kind


def test_transport_errors_become_failure_records() -> None:
    """A connection error is a not_sent failure record."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    ((_, outcome),) = collect([row(0)], handler)
    assert isinstance(outcome, RolloutFailureRecord)
    assert outcome.delivery == "not_sent"


def test_programming_errors_propagate_from_their_awaitable() -> None:
    """A programming error is raised by the awaitable of its row, and the other rows still finish."""

    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["task"]["task_id"]["task_id"] == "1":
            raise KeyError("bug in the transport")
        return answer_by_task({})(request)

    async def go() -> tuple[int, int]:
        stream = run_outcomes(
            [row(0), row(1), row(2)], server_url=URL, transport=httpx.MockTransport(handler)
        )
        ok = errors = 0
        for future in stream:
            try:
                await future
                ok += 1
            except KeyError:
                errors += 1
        return ok, errors

    assert asyncio.run(go()) == (2, 1)


def test_protocol_violation_without_routing_raises() -> None:
    """With route_failures=False a malformed reply raises ProtocolError from its awaitable."""
    with pytest.raises(ProtocolError):
        collect([row(0)], lambda request: httpx.Response(200, content=b"[]"), route_failures=False)


@pytest.mark.parametrize(
    ("bad_row", "error"),
    [
        pytest.param(row(0, _ng_rollout_id="bad id"), InvalidRolloutIdError, id="invalid rollout id"),
        pytest.param(row(0, _ng_rollout_id="arith-0-a3"), InvalidRolloutIdError, id="reserved -a<N> suffix"),
        pytest.param(
            {k: v for k, v in row(0).items() if k != "_ng_rollout_id"},
            InvalidRolloutIdError,
            id="no rollout id",
        ),
        pytest.param(row(0, task_id={"taskset": "arith"}), ConfigError, id="incomplete task_id"),
        pytest.param(row(0, task_input="6*7"), ConfigError, id="task_input not an object"),
        pytest.param(row(0, _ng_attempt=-1), ConfigError, id="negative attempt"),
    ],
)
def test_bad_rows_are_refused_before_anything_is_sent(bad_row: dict, error: type[Exception]) -> None:
    """A row that cannot be sent is a configuration error raised by run_outcomes itself."""
    sent: list[httpx.Request] = []

    async def go() -> None:
        run_outcomes([row(1), bad_row], server_url=URL, transport=httpx.MockTransport(sent.append))  # type: ignore[arg-type]

    with pytest.raises(error, match="row 1"):
        asyncio.run(go())
    assert sent == []


def test_server_mapping_routes_by_taskset() -> None:
    """A taskset-to-server mapping sends each row to its taskset's server."""
    hosts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        return answer_by_task({})(request)

    rows = [row(0), row(1) | {"task_id": {"taskset": "code", "task_id": "1"}}]

    async def go() -> None:
        servers = {"arith": "http://a.test:1", "code": "http://c.test:2"}
        stream = run_outcomes(rows, server_url=servers, transport=httpx.MockTransport(handler))
        for future in stream:
            await future

    asyncio.run(go())
    assert sorted(hosts) == ["a.test", "c.test"]


def test_unmapped_taskset_is_refused() -> None:
    """A taskset with no server in the mapping is a configuration error naming it."""

    async def go() -> None:
        run_outcomes([row(0)], server_url={"code": URL}, transport=httpx.MockTransport(answer_by_task({})))

    with pytest.raises(ConfigError, match="'arith'"):
        asyncio.run(go())


def gated_stream(rows: list[dict], finish: set[str]) -> tuple[OutcomeStream, list[str], asyncio.Event]:
    """A stream whose rows in ``finish`` answer at once and whose others wait until cancelled."""
    cancelled: list[str] = []
    never = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        task = json.loads(request.content)["task"]["task_id"]["task_id"]
        if task not in finish:
            try:
                await never.wait()
            except asyncio.CancelledError:
                cancelled.append(task)
                raise
        return answer_by_task({})(request)

    stream = run_outcomes(rows, server_url=URL, transport=httpx.MockTransport(handler), concurrency=8)
    return stream, cancelled, never


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


def test_aclose_cancels_unfinished_requests() -> None:
    """aclose() cancels in-flight client requests and their awaitables."""

    async def go() -> tuple[list[str], bool]:
        stream, cancelled, _ = gated_stream([row(0), row(1), row(2)], finish={"0"})
        await settle()
        await stream.aclose()
        futures = list(stream)
        with pytest.raises(asyncio.CancelledError):
            await futures[-1]
        return sorted(cancelled), futures[0].done()

    cancelled, first_done = asyncio.run(go())
    assert cancelled == ["1", "2"]
    assert first_done


def test_aclose_and_drain_returns_finished_unconsumed_outcomes() -> None:
    """aclose_and_drain() also returns finished outcomes the caller had not awaited yet."""

    async def go() -> tuple[list[str], list[str]]:
        stream, cancelled, _ = gated_stream([row(n) for n in range(4)], finish={"0", "1", "2"})
        await settle()
        first = await next(iter(stream))
        drained = await stream.aclose_and_drain()
        consumed = [first[0]["_ng_rollout_id"]]
        return consumed + sorted(r["_ng_rollout_id"] for r, _ in drained), cancelled

    rollouts, cancelled = asyncio.run(go())
    assert sorted(rollouts) == ["arith-0", "arith-1", "arith-2"]
    assert len(set(rollouts)) == 3
    assert cancelled == ["3"]


def test_async_iteration_and_context_manager() -> None:
    """The stream is async-iterable and closes itself as an async context manager."""

    async def go() -> list[str]:
        async with run_outcomes(
            [row(0), row(1)], server_url=URL, transport=httpx.MockTransport(answer_by_task({}))
        ) as stream:
            return sorted([(await future)[0]["_ng_rollout_id"] async for future in stream])

    assert asyncio.run(go()) == ["arith-0", "arith-1"]


def test_public_api_is_pinned() -> None:
    """outcomes' public names are exactly these."""
    import gymslurm.outcomes

    assert sorted(gymslurm.outcomes.__all__) == [
        "OutcomeFuture",
        "OutcomeStream",
        "RowOutcome",
        "new_run_id",
        "run_outcomes",
    ]


def test_needs_a_running_event_loop() -> None:
    """Called outside async code, run_outcomes says so."""
    with pytest.raises(RuntimeError, match="running event loop"):
        run_outcomes([row(0)], server_url=URL, transport=httpx.MockTransport(answer_by_task({})))
