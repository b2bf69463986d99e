"""Structured outcomes for direct callers: ``run_outcomes()`` (spec 000, "Structured failures ...").

A caller that runs episodes itself (a training loop, a notebook) gets every attempt back as data: each
awaitable gives ``(row, outcome)``, where ``outcome`` is the completed-result dict or a
:class:`~gymslurm.records.RolloutFailureRecord`. The same classification as the collector's applies
(:mod:`gymslurm.dispatch`): expected HTTP, JSON and result-validation problems become failure records;
programming errors, cancellation and (with routing off) protocol violations are raised from the
awaitable of the row that caused them. Nothing is saved and nothing is retried: the caller owns both.

Choices the spec leaves open:

- An intentional omission (a bare ``_ng_no_persist`` reply) is neither a result nor a failure; it is
  returned as the sidecar's omission row, a dict with ``"_ng_omitted": True`` and the row's stamps,
  so ``outcome.get("reward")`` never finds a score in it.
- Completed results and omissions carry the row's stamps (``_ng_run_id``, ``_ng_rollout_id``,
  ``_ng_attempt``, ``task_id``, and ``_ng_task_index``/``_ng_rollout_index`` when the row has them), as
  the collector saves them (docs/formats.md).
- A :class:`~gymslurm.dispatch.Failed` outcome's diagnostics, partial response and legacy class stay
  outside the canonical record (they are sidecar envelope fields) and are not returned.
- Rows are deep-copied once, up front, so nothing the caller holds is shared with what is returned.
- Awaitables resolve in completion order (like ``asyncio.as_completed``); each carries its own row.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from gymslurm.dispatch import Completed, EnvironmentClient, Failed, Omitted, Outcome
from gymslurm.errors import ConfigError, InvalidRolloutIdError
from gymslurm.records import EpisodeId, Protocol, RolloutFailureRecord, TaskId, rollout_id_problem
from gymslurm.store.manifest import new_run_id

__all__ = ["OutcomeFuture", "OutcomeStream", "RowOutcome", "new_run_id", "run_outcomes"]

RowOutcome = tuple[dict[str, Any], dict[str, Any] | RolloutFailureRecord]
STAMPS = ("_ng_run_id", "_ng_rollout_id", "_ng_attempt", "_ng_task_index", "_ng_rollout_index", "task_id")


def run_outcomes(
    rows: Iterable[Mapping[str, Any]],
    *,
    server_url: str | Mapping[str, str],
    run_id: str | None = None,
    route_failures: bool = True,
    concurrency: int = 64,
    connect_timeout: float | None = 10.0,
    read_timeout: float | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    protocol: Protocol | Mapping[str, Protocol] = "episode",
    legacy_results: bool = False,
) -> OutcomeStream:
    """Start one episode attempt per row; return the stream of ``(row copy, outcome)`` awaitables.

    Rows are materialized rows: ``_ng_rollout_id``, ``task_id`` ``{taskset, task_id}``, ``task_input``,
    optionally ``_ng_attempt`` (default 0) and ``_ng_run_id``. ``server_url`` is one Environment Server
    or a mapping from taskset to server; ``protocol`` how it speaks (one, or one per server URL:
    ``episode``, ``legacy_agent``, ``legacy_reply``; docs/nemo-gym.md). ``run_id`` overrides the rows'
    stamps; without it stamped rows keep theirs and unstamped rows share a new id. Must be called with
    an event loop running; bad rows raise :class:`~gymslurm.errors.ConfigError` before anything is sent.
    ``legacy_results``: a legacy result tagged ``_ng_failure_class`` is given as the dict it was (NeMo
    Gym 0.7.0's ``run_examples``), not converted to a failure record.
    """
    invocation_run_id = new_run_id()
    prepared = [
        _prepare(index, row, run_id or invocation_run_id, override=run_id is not None)
        for index, row in enumerate(rows)
    ]
    for item in prepared:
        _server_for(server_url, item.task["task_id"]["taskset"])  # refuse unmapped tasksets up front
    client = EnvironmentClient(
        concurrency=concurrency,
        run_id=invocation_run_id,
        route_failures=route_failures,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        transport=transport,
        protocol=protocol,
    )
    return OutcomeStream(prepared, client, server_url, concurrency, legacy_results=legacy_results)


@dataclass(frozen=True)
class _Prepared:
    row: dict[str, Any]
    episode: EpisodeId
    task: dict[str, Any]
    run_id: str

    def stamps(self) -> dict[str, Any]:
        return {key: self.row[key] for key in STAMPS if key in self.row}

    def indices(self) -> tuple[int, int]:
        """(task index, repeat index): what a flat legacy row is stamped with (legacy_agent)."""
        task, repeat = self.row.get("_ng_task_index", 0), self.row.get("_ng_rollout_index", 0)
        return (task, repeat) if type(task) is int and type(repeat) is int else (0, 0)


def _prepare(index: int, row: Mapping[str, Any], default_run_id: str, *, override: bool) -> _Prepared:
    """Validate one caller row and stamp a deep copy of it."""
    if not isinstance(row, Mapping):
        raise ConfigError(f"row {index} is a {type(row).__name__}, not a mapping: pass materialized rows")
    rollout_id = row.get("_ng_rollout_id")
    problem = rollout_id_problem(rollout_id)
    if problem:
        raise InvalidRolloutIdError(
            f"row {index}: _ng_rollout_id {rollout_id!r} {problem}; give each row a valid explicit id "
            "or preprocess the rows first"
        )
    attempt = row.get("_ng_attempt", 0)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise ConfigError(f"row {index}: _ng_attempt must be an integer >= 0, got {attempt!r}")
    try:
        task_id = TaskId.model_validate(row.get("task_id"), strict=True).model_dump()
    except ValueError:
        raise ConfigError(
            f"row {index}: task_id must be {{'taskset': str, 'task_id': str}}, got {row.get('task_id')!r}"
        ) from None
    if not isinstance(row.get("task_input"), Mapping):
        raise ConfigError(f"row {index}: task_input must be an object, got {row.get('task_input')!r}")
    copied = copy.deepcopy(dict(row))
    if override or not copied.get("_ng_run_id"):
        copied["_ng_run_id"] = default_run_id
    copied["_ng_attempt"] = attempt
    task = {"task_id": task_id, "task_input": copied["task_input"]}
    episode = EpisodeId(rollout_id=str(rollout_id), attempt=attempt)
    return _Prepared(copied, episode, task, copied["_ng_run_id"])


def _server_for(server_url: str | Mapping[str, str], taskset: str) -> str:
    if isinstance(server_url, str):
        return server_url
    try:
        return server_url[taskset]
    except KeyError:
        raise ConfigError(
            f"no Environment Server for taskset {taskset!r}: the server mapping has {sorted(server_url)}"
        ) from None


def _as_row_outcome(item: _Prepared, outcome: Outcome, legacy_results: bool = False) -> RowOutcome:
    if isinstance(outcome, Completed):
        return item.row, outcome.result | item.stamps()
    if isinstance(outcome, Failed):
        if legacy_results and outcome.legacy_result is not None:
            return item.row, outcome.legacy_result | item.stamps()
        return item.row, outcome.record
    assert isinstance(outcome, Omitted)
    return item.row, item.stamps() | {"_ng_omitted": True}


class OutcomeFuture(Awaitable[RowOutcome]):
    """One awaitable of the stream: gives the next finished ``(row, outcome)``, or raises its error."""

    __slots__ = ("_future", "consumed")

    def __init__(self, future: asyncio.Future[RowOutcome]) -> None:
        self._future, self.consumed = future, False

    def __await__(self) -> Generator[Any, None, RowOutcome]:
        item = yield from self._future.__await__()
        self.consumed = True
        return item

    def done(self) -> bool:
        return self._future.done()


class OutcomeStream:
    """The running episodes of one :func:`run_outcomes` call; iterate (sync or async) for awaitables.

    Stop early with :meth:`aclose` (cancel unfinished requests) or :meth:`aclose_and_drain` (also get
    the finished outcomes nobody awaited). Both wait for the local client tasks only, not for any
    server-side or sandbox cleanup.
    """

    def __init__(
        self,
        prepared: list[_Prepared],
        client: EnvironmentClient,
        server_url: str | Mapping[str, str],
        concurrency: int,
        *,
        legacy_results: bool = False,
    ) -> None:
        self._legacy_results = legacy_results
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "run_outcomes() must be called from a running event loop (inside async code)"
            ) from None
        self._prepared, self._client, self._server_url = prepared, client, server_url
        self._futures = [OutcomeFuture(loop.create_future()) for _ in prepared]
        self._next_row = self._resolved = 0
        workers = min(concurrency, len(prepared))
        self._task = loop.create_task(self._run_all(workers))

    def __len__(self) -> int:
        return len(self._futures)

    def __iter__(self) -> Iterator[OutcomeFuture]:
        return iter(self._futures)

    async def __aiter__(self) -> AsyncIterator[OutcomeFuture]:
        for future in self._futures:
            yield future

    async def __aenter__(self) -> OutcomeStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel unfinished requests and wait for the local tasks; unresolved awaitables are cancelled."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        for future in self._futures:
            future._future.cancel()  # no-op for finished ones

    async def aclose_and_drain(self) -> list[RowOutcome]:
        """Like :meth:`aclose`, and return the finished outcomes that were never awaited.

        An unawaited error (a programming error, or a protocol violation with routing off) is raised.
        """
        await self.aclose()
        drained = [future for future in self._futures if future.done() and not future.consumed]
        return [await future for future in drained if not future._future.cancelled()]

    async def _run_all(self, workers: int) -> None:
        try:
            await asyncio.gather(*(self._worker() for _ in range(workers)))
        finally:
            await self._client.aclose()

    async def _worker(self) -> None:
        while self._next_row < len(self._prepared):
            item = self._prepared[self._next_row]
            self._next_row += 1
            url = _server_for(self._server_url, item.task["task_id"]["taskset"])
            try:
                outcome = await self._client.run(
                    url, item.episode, item.task, run_id=item.run_id, indices=item.indices()
                )
            except Exception as exc:  # a programming error or ProtocolError: hand it to the caller
                self._resolve_next(exception=exc)
                continue
            self._resolve_next(result=_as_row_outcome(item, outcome, self._legacy_results))

    def _resolve_next(self, *, result: RowOutcome | None = None, exception: Exception | None = None) -> None:
        future = self._futures[self._resolved]._future
        self._resolved += 1
        if exception is not None:
            future.set_exception(exception)
        else:
            assert result is not None
            future.set_result(result)
