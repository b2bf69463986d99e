"""The specification's recovery API for Python callers, with NeMo Gym's signatures (spec 000, 001).

For code that drives episodes itself (a trainer, a custom collection driver) rather than through
``gymslurm collect``. The names and shapes follow NeMo Gym's ``RolloutCollectionHelper`` and
``rollout_recovery``, so such code moves over with its calls unchanged:

- :func:`preprocess_examples` — caller-held rows → materialized rows (rollout ids, task ids, repeats),
  copies, the caller's rows untouched (tasks.py's rules, as a collection materializes them);
- :func:`run_examples` — one attempt per row, each awaitable giving ``(row, result dict)`` with NeMo
  Gym's dictionary/exception behaviour: a failure raises :class:`EpisodeFailedError`, or with
  ``route_failures_to_sidecar=True`` gives the sidecar's failure row (``_ng_failure_*`` fields);
  Environment Servers addressed by URL or by NeMo Gym name, each in its declared protocol
  (collector/routing.py);
- :func:`check_completion` — a custom driver's completion rule: ``retryable`` and ``made_progress`` are
  required (000); an incomplete run under ``require_complete`` raises :class:`IncompleteRunError`, the
  ``RuntimeError`` of 001 carrying the status (75 resume, 1 retry, 76 stop);
- :class:`RolloutStore` with :meth:`RolloutStore.allocate_attempt` — a run opened under its run lock;
  the durable reservation of an execution number *before* a restore or a fresh request (000,
  "Checkpoint-controller integration").

Trade-off: ``run_examples`` is built on :func:`gymslurm.outcomes.run_outcomes` (the same classification,
nothing saved or retried); NeMo Gym's scheduling knobs with no meaning here (``dispatch_budget_s``,
``drain_margin_s``, ``latency_tracker``) are refused by name rather than ignored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from gymslurm.collector.routing import named_server, protocol_of
from gymslurm.coverage import Completion, Coverage, completion_exit_code
from gymslurm.dispatch import fetch_environment_config
from gymslurm.errors import ConfigError, EpisodeFailedError, IncompleteRunError
from gymslurm.exitcodes import ExitCode
from gymslurm.outcomes import STAMPS, OutcomeFuture, run_outcomes
from gymslurm.records import EpisodeId, Protocol, RolloutFailureRecord
from gymslurm.store import RunLock, RunPaths, RunStore
from gymslurm.tasks import MaterializeOptions, materialize

__all__ = [
    "EpisodeFailedError",
    "IncompleteRunError",
    "RolloutStore",
    "check_completion",
    "preprocess_examples",
    "run_examples",
]


def preprocess_examples(
    examples: list[dict[str, Any]],
    *,
    agent_map: Mapping[str, str] | None = None,
    fan_out: Mapping[str, list[str]] | None = None,
    num_repeats: int = 1,
    num_repeats_add_seed: bool = False,
    global_config_dict: Mapping[str, Any] | None = None,
    taskset: str = "examples",
) -> list[dict[str, Any]]:
    """Caller-held rows as the rows :func:`run_examples` takes: copies, the inputs not mutated.

    Each row becomes ``num_repeats`` rollouts with a rollout id, a ``task_id`` ``{taskset, task_id}``
    (``taskset`` names plain rows), its ``task_input`` and ``_ng_task_index``/``_ng_rollout_index``,
    exactly as a collection materializes a dataset (docs/formats.md, "Rollout identity"). NeMo Gym's
    agent re-routing (``agent_map``, ``fan_out``) and seeding have no meaning here and are refused;
    ``global_config_dict`` is accepted for NeMo Gym's signature (servers are resolved at dispatch).
    """
    refused = [name for name, value in (("agent_map", agent_map), ("fan_out", fan_out)) if value]
    if num_repeats_add_seed:
        refused.append("num_repeats_add_seed")
    if refused:
        raise ConfigError(
            f"preprocess_examples: {', '.join(refused)} (NeMo Gym's agent routing and seeding) are not "
            "supported; route by Environment Server (run_examples' server_url / environment_server_name)"
        )
    del global_config_dict  # NeMo Gym resolves task sources with it; gymslurm routes at dispatch
    return materialize([dict(row) for row in examples], MaterializeOptions(taskset, num_repeats=num_repeats))


def run_examples(
    examples: list[dict[str, Any]],
    head_server_config: Any = None,
    semaphore: Any = None,
    route_failures_to_sidecar: bool = False,
    environment_server_name: str | None = None,
    *,
    server_url: str | Mapping[str, str] | None = None,
    protocol: Protocol | None = None,
    max_resident_tasks: int | None = None,
    dispatch_budget_s: float | None = None,
    drain_margin_s: float | None = None,
    latency_tracker: Any = None,
    run_id: str | None = None,
    transport: Any = None,
) -> Iterator[Awaitable[tuple[dict[str, Any], dict[str, Any]]]]:
    """One episode attempt per row; each awaitable gives ``(row, result)`` (NeMo Gym's behaviour).

    The server: ``server_url`` (one URL, or ``{taskset: URL}``), or ``environment_server_name`` found
    in the configuration of the head server ``head_server_config`` (``{host, port}``, or an object with
    those attributes; NeMo Gym's default 127.0.0.1:11000), whose declared type gives the protocol
    (``protocol`` overrides it). Concurrency: ``max_resident_tasks``, else the semaphore's value, else 64.
    A failure raises :class:`EpisodeFailedError` from its awaitable (a legacy result tagged
    ``_ng_failure_class``, such as a ``judge_failed`` one, is given as its dict, as NeMo Gym 0.7.0 gives
    it: a driver reads the class from it), or with
    ``route_failures_to_sidecar`` gives the failure row (``_ng_failure_class``, ``_ng_failure_terminal``,
    ``_ng_failure_message``, ``_ng_failure_record`` and the row's stamps). Call it inside a running loop.
    """
    knobs = {
        "dispatch_budget_s": dispatch_budget_s,
        "drain_margin_s": drain_margin_s,
        "latency_tracker": latency_tracker,
    }
    unsupported = [name for name, value in knobs.items() if value is not None]
    if unsupported:
        raise ConfigError(
            f"run_examples: {', '.join(unsupported)} are not supported by gymslurm's direct API"
        )
    url, chosen = _server(server_url, environment_server_name, head_server_config, protocol)
    concurrency = max_resident_tasks or int(getattr(semaphore, "_value", 0) or 0) or 64
    stream = run_outcomes(
        examples,
        server_url=url,
        run_id=run_id,
        route_failures=True,
        concurrency=concurrency,
        protocol=chosen,
        transport=transport,
        legacy_results=not route_failures_to_sidecar,  # NeMo Gym 0.7.0 gives a legacy result's dict
    )
    return (_as_result(future, route_failures_to_sidecar) for future in stream)


async def _as_result(future: OutcomeFuture, routed: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    row, outcome = await future
    if not isinstance(outcome, RolloutFailureRecord):
        return row, outcome
    if not routed:
        raise EpisodeFailedError(outcome)
    stamps: dict[str, Any] = {key: row[key] for key in STAMPS if key in row}
    failure = outcome.failure
    return row, {
        **stamps,
        "_ng_attempt": outcome.episode_id.attempt,
        "_ng_failure_class": outcome.routing_class,
        "_ng_failure_terminal": failure.terminal,
        "_ng_failure_message": failure.failure_reason,
        "_ng_failure_record": outcome.model_dump(mode="json"),
    }


def _server(
    server_url: str | Mapping[str, str] | None, name: str | None, head: Any, protocol: Protocol | None
) -> tuple[str | Mapping[str, str], Protocol | Mapping[str, Protocol]]:
    if server_url is not None:
        return server_url, protocol or "episode"
    if name is None:
        raise ConfigError(
            "run_examples needs server_url=URL (or {taskset: URL}) or environment_server_name=NAME"
        )
    host, port = _host_port(head)
    config = fetch_environment_config(f"http://{host}:{port}")
    origin, url = named_server(config, name, "environment_server_name", host)
    return url, protocol or protocol_of(origin, url)


def _host_port(head: Any) -> tuple[str, int]:
    if head is None:
        return "127.0.0.1", 11000  # NeMo Gym's default head server
    if isinstance(head, Mapping):
        return str(head.get("host") or "127.0.0.1"), int(head["port"])
    return str(getattr(head, "host", None) or "127.0.0.1"), int(head.port)


def check_completion(
    coverage: Coverage | Mapping[str, Any],
    *,
    retryable: bool,
    made_progress: bool,
    require_complete: bool = True,
) -> Completion:
    """A custom driver's completion (000): the run's coverage and the two facts only the driver knows.

    ``retryable``: whether another attempt can help; ``made_progress``: whether this invocation saved
    outcomes that establish progress (cached outcomes alone do not). Both are required. Returns the
    completion when the run may end with 0 (complete, only omissions missing, or partial without
    ``require_complete``); else raises :class:`IncompleteRunError` with ``status`` 75, 1 or 76.
    """
    inventory = coverage if isinstance(coverage, Coverage) else Coverage.model_validate(dict(coverage))
    completion = completion_exit_code(
        inventory, retryable=retryable, made_progress=made_progress, require_complete=require_complete
    )
    if completion.code != ExitCode.DONE:
        raise IncompleteRunError(completion.code, completion.reason)
    return completion


class RolloutStore:
    """A manifest-backed run opened under its run lock, for a custom driver (``with RolloutStore(out):``).

    One lock acquisition covers validation, restore, collection and reporting (000): do not take the
    run lock again inside. :meth:`allocate_attempt` reserves an execution durably before anything is
    sent or restored; what the driver then saves goes through the same store as the collector's.
    """

    def __init__(self, output: str | Path) -> None:
        self.paths = RunPaths.for_output(Path(output))
        self._lock = RunLock(self.paths.lock)
        self._store: RunStore | None = None

    def __enter__(self) -> RolloutStore:
        self._lock.acquire()
        try:
            self._store = RunStore.open(self.paths)
            self._store.reconcile()
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._store is not None:
            self._store.close()
        self._lock.release()

    @property
    def store(self) -> RunStore:
        if self._store is None:
            raise RuntimeError("RolloutStore is used outside its `with` block")
        return self._store

    def allocate_attempt(self, row: Mapping[str, Any]) -> EpisodeId:
        """Reserve the next execution of ``row``'s rollout (by ``_ng_rollout_id``), durably, and return it.

        The reservation is on disk when this returns: a crash after it leaves the rollout missing
        (unfinished), never reuses the number. A failed restore reserves again before starting fresh.
        """
        rollout_id = row.get("_ng_rollout_id")
        index = self.store.rollout_index.index_of.get(rollout_id) if isinstance(rollout_id, str) else None
        if index is None:
            raise ConfigError(
                f"allocate_attempt: the run at {self.paths.output} has no rollout {rollout_id!r}"
            )
        return EpisodeId(rollout_id=str(rollout_id), attempt=self.store.reserve(index))
