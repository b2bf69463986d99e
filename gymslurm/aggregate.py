"""Merge shard outputs into one selected-result projection, with metrics and an aggregate coverage.

A sharded evaluation is only honest once merged with every logical rollout counted once: the
projection holds the *selected* completed result of each rollout (``latest_allocated``; an older
attempt never counts again), failures stay apart from scores, and each shard's recovery history is
left untouched — aggregation never writes a byte into an input or its companions, not even a torn
tail repair (spec 000, "Offline aggregation").

Steps: :func:`resolve_inputs` (paths or globs → one :class:`ShardSource` per *resolved* rollout
file; aliases counted once; companions beside the resolved target, or, for a legacy run only,
beside the alias) → :func:`load_shard` (manifest-backed: reservations + outcomes → per-rollout
:class:`RolloutState`; legacy: every row as observed, ``identity_verified`` false, no claimed
inventory) → :func:`check_distinct_runs` (a copy of a manifest-backed run has the same run id and is
rejected) → :func:`check_output` (refuse, before writing a byte, an output that is an input or
carries recovery companions) → write the projection (atomically, through an output symlink to its
target), ``<stem>_aggregate_metrics.json`` and ``<stem>_aggregate_coverage.json``.

Trade-offs: shards are read in worker processes (one per CPU, ``fork``), each reduced to a small
picklable :class:`ShardSummary` (inventory, partial metrics, selected line numbers), so the states of
a million rollouts never cross a pipe. The projection is then written by the main process, one shard
at a time: the shard's results file is read whole and split at newlines, and the selected lines'
bytes are copied as saved (no re-serialization) — memory peaks at about twice the largest shard.
Manifest-backed shards are validated and read by the store (``RunStore.open(writable=False)`` and
its history reader) and selected with ``select_rollout``, the collector's own rule; only the common
case (a rollout whose single outcome is the result of its newest execution) is counted inline, and a
test pins the fast path to the store's ``reconcile()``. The store's row reader is most of the cost
(bench/aggregate.py). The merged file is not a run: it has no manifest, and further
recovery needs the original shards.
"""

from __future__ import annotations

import multiprocessing
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gymslurm.coverage import Coverage, compute_coverage
from gymslurm.errors import ConfigError, CorruptRecordError, MetricsUnavailableError, StoreError
from gymslurm.formats import version_of
from gymslurm.identity import redact_text
from gymslurm.metrics import METRICS_SOURCE_OWN, MetricsAccumulator, ScoringPolicy
from gymslurm.nemogym import metrics_entry, not_the_servers_metrics, row_for_metrics
from gymslurm.selection import (
    SUCCESSFUL,
    BudgetPolicy,
    RolloutState,
    SavedOutcome,
    legacy_row_caps,
    select_rollouts,
)
from gymslurm.settings import max_rollout_attempts
from gymslurm.shard_inputs import (
    ShardSource,
    check_output,
    expand_inputs,
    resolve_inputs,
)
from gymslurm.store import RunPaths, RunStore
from gymslurm.store.adoptions import Adoptions
from gymslurm.store.atomic import publish_json, publish_stream
from gymslurm.store.existing import refuse_retired_journal
from gymslurm.store.files import write_gymslurm_metrics
from gymslurm.store.history import (
    RolloutKeys,
    history_conflict,
    read_history,
    result_outcome,
    sidecar_outcome,
)
from gymslurm.store.inputs import read_index
from gymslurm.store.jsonl import TailReport, iter_records
from gymslurm.store.lines import selected_lines
from gymslurm.store.paths import companion_path as companion

AGGREGATE_COVERAGE_VERSION = version_of("aggregate_coverage")
# --- reading a shard --------------------------------------------------------------------------------


# The HTTP seam of the merge: (url, rows, timeout_s) -> the answer of ``POST /aggregate_metrics``.
ServerMetrics = Callable[[str, Iterable[Mapping[str, Any]], float], dict[str, Any]]


@dataclass
class Shard:
    """One input read: per-rollout selected states (manifest) or observed rows (legacy)."""

    source: ShardSource
    run_id: str | None
    identity_verified: bool
    policy: BudgetPolicy | None
    states: list[RolloutState] = field(default_factory=list)
    legacy_outcomes: list[SavedOutcome] = field(default_factory=list)
    selected_result_lines: set[int] = field(default_factory=set)
    attempts: int = 0
    historical_failed_attempts: int = 0
    torn_bytes: int = 0
    legacy_capped: tuple[int, int] = (0, 0)  # legacy rollouts with a per-row limit, and those at it

    @property
    def legacy(self) -> bool:
        return self.run_id is None

    def coverage(self, written_at: str) -> Coverage | None:
        """The shard's exact inventory (manifest-backed shards only)."""
        if self.policy is None or self.run_id is None:
            return None
        return compute_coverage(
            self.states,
            run_id=self.run_id,
            attempts=self.attempts,
            policy=self.policy,
            identity_verified=self.identity_verified,
            historical_failed_attempts=self.historical_failed_attempts,
            progress_outcomes_recorded=0,
            written_at=written_at,
        )


def load_shard(source: ShardSource) -> Shard:
    """Read one input: with a manifest, select per rollout; without, observe every row (legacy)."""
    refuse_retired_journal(source.companion("_attempts.jsonl"))
    if source.has_manifest:
        return _load_manifest_shard(source)
    return _load_legacy_shard(source)


def _load_legacy_shard(source: ShardSource) -> Shard:
    shard = Shard(source, run_id=None, identity_verified=False, policy=None)
    failures_tail, results_tail = TailReport(), TailReport()
    by_rollout: dict[str, list[SavedOutcome]] = {}
    for line, row in iter_records(source.companion("_failures.jsonl"), failures_tail):
        outcome = sidecar_outcome(row, 0, line)
        shard.historical_failed_attempts += outcome.kind == "failure"
        shard.legacy_outcomes.append(outcome)
        _arrived(by_rollout, row, line, sidecar_outcome)
    for line, row in iter_records(source.results, results_tail):
        shard.legacy_outcomes.append(result_outcome(row, 0, line))
        shard.selected_result_lines.add(line)
        if by_rollout:  # only a rollout that failed before can be at its cap
            _arrived(by_rollout, row, line, result_outcome)
    shard.torn_bytes = failures_tail.torn_bytes + results_tail.torn_bytes
    policy = BudgetPolicy(max_rollout_attempts=max_rollout_attempts())
    shard.legacy_capped = legacy_row_caps(by_rollout.values(), policy)
    return shard


def _arrived(
    by_rollout: dict[str, list[SavedOutcome]], row: Mapping[str, Any], line: int, outcome: RowOutcome
) -> None:
    """A legacy row's outcome in its rollout's history, numbered by arrival (sidecar lines first, 000)."""
    rollout = row.get("_ng_rollout_id")
    if type(rollout) is str:
        history = by_rollout.setdefault(rollout, [])
        history.append(outcome(row, len(history), line))


# The store's reader of one saved row (history.result_outcome, history.sidecar_outcome): row, attempt, line.
RowOutcome = Callable[[Mapping[str, Any], int, int], SavedOutcome]


def _load_manifest_shard(source: ShardSource) -> Shard:
    """Open the run read-only through the store (validates manifest, reservations, inputs) and select."""
    paths = RunPaths.for_output(source.results)
    store = RunStore.open(paths, writable=False, adopt_attempts=max_rollout_attempts())
    try:
        rec = store.reconcile()
    finally:
        store.close()
    manifest = store.manifest
    shard = Shard(source, manifest.run_id, manifest.identity_verified, rec.policy, states=rec.states)
    shard.attempts = rec.attempts
    shard.historical_failed_attempts = rec.historical_failed_attempts
    shard.torn_bytes = rec.torn_results_bytes + rec.torn_failures_bytes
    shard.selected_result_lines = {
        state.selected.line
        for state in rec.states
        if state.disposition in SUCCESSFUL and state.selected is not None
    }
    return shard


@dataclass
class ShardSummary:
    """What aggregation keeps of a read shard: its inventory, partial metrics and selected lines.

    Small and picklable, so shards can be read in worker processes (the states stay there).
    """

    source: ShardSource
    run_id: str | None
    identity_verified: bool
    torn_bytes: int
    accumulator: MetricsAccumulator
    selected_lines: array[int]
    coverage: dict[str, Any] | None = None  # manifest-backed shards: the exact inventory
    observed: dict[str, Any] | None = None  # legacy shards: observed counts only

    @property
    def legacy(self) -> bool:
        return self.run_id is None


def summarize_shard(source: ShardSource, scoring: ScoringPolicy, written_at: str) -> ShardSummary:
    """Read one shard and reduce it to a :class:`ShardSummary` (runs in a worker process)."""
    if source.has_manifest:
        fast = _fast_manifest_summary(source, scoring, written_at)
        if fast is not None:
            return fast
    return _summary_of(load_shard(source), scoring, written_at)


def _summary_of(shard: Shard, scoring: ScoringPolicy, written_at: str) -> ShardSummary:
    limit = shard.policy.max_rollout_attempts if shard.policy else None
    accumulator = MetricsAccumulator(policy=scoring)
    accumulator.add_shard(
        max_rollout_attempts=limit, historical_failed_attempts=shard.historical_failed_attempts
    )
    for state in shard.states:
        accumulator.add_state(state)
    for outcome in shard.legacy_outcomes:
        accumulator.add_legacy_outcome(outcome)
    accumulator.add_legacy_caps(*shard.legacy_capped)
    summary = ShardSummary(
        shard.source,
        shard.run_id,
        shard.identity_verified,
        shard.torn_bytes,
        accumulator,
        array("q", sorted(shard.selected_result_lines)),
    )
    coverage = shard.coverage(written_at)
    if coverage is not None:
        summary.coverage = coverage.model_dump(exclude={"written_at"})
    else:
        observed = MetricsAccumulator()
        observed.add_shard(
            max_rollout_attempts=None, historical_failed_attempts=shard.historical_failed_attempts
        )
        for outcome in shard.legacy_outcomes:
            observed.add_legacy_outcome(outcome)
        observed.add_legacy_caps(*shard.legacy_capped)
        summary.observed = observed.metrics()
    return summary


def _fast_manifest_summary(
    source: ShardSource, scoring: ScoringPolicy, written_at: str
) -> ShardSummary | None:
    """The summary of a manifest-backed shard, same result as the store's ``reconcile`` path, faster.

    Validation is the store's (``RunStore.open`` and its history reader) and so is the selection
    (``selection.select_rollouts``, the one loop, with its fast case); what is faster is reading the
    rollout ids with the store's compact index alone (:func:`read_index`: no row is parsed, no dict
    built) and no store left open. Imported runs (legacy rows
    numbered by arrival) take the store's path (None).
    """
    paths = RunPaths.for_output(source.results)
    store = RunStore.open(paths, writable=False, adopt_attempts=max_rollout_attempts())
    try:
        manifest, counts, policy = store.manifest, store.table.counts(), store.policy()
    finally:
        store.close()
    if manifest.identity_source == "imported" or paths.adoptions.exists():
        return None  # legacy rows numbered by arrival, or adopted ones: the store's path
    count = manifest.rollout_count
    index = read_index(paths.tasks(manifest.format_version))  # digest and line count checked by open
    try:
        index.check_unique()
    except StoreError as error:
        raise StoreError(f"{error}: rollout ids are not unique; restore the run's files together") from None
    history = read_history(
        paths.results,
        paths.failures,
        run_id=manifest.run_id,
        keys=RolloutKeys(index.index_of, index.by_task, (index.blob, index.ends)),
        rollout_count=count,
        legacy=False,
        adoptions=(adoptions := Adoptions(counts=counts, imported={})),
    )
    if adoptions.pending:  # rows NeMo Gym's collector appended, not adopted yet: the store's path
        return None

    def conflict(rollout: int, problem: str) -> CorruptRecordError:
        return history_conflict(paths, index.ids[rollout], problem, remedy="leave this shard out")

    states, _ = select_rollouts(counts, history.groups, policy, conflict)  # the store's one loop
    lines = [
        state.selected.line
        for state in states
        if state.disposition in SUCCESSFUL and state.selected is not None
    ]
    accumulator = MetricsAccumulator(policy=scoring)
    accumulator.add_shard(
        max_rollout_attempts=policy.max_rollout_attempts, historical_failed_attempts=history.failure_lines
    )
    for state in states:
        accumulator.add_state(state)
    coverage = compute_coverage(
        states,
        run_id=manifest.run_id,
        attempts=sum(counts),
        policy=policy,
        identity_verified=manifest.identity_verified,
        historical_failed_attempts=history.failure_lines,
        progress_outcomes_recorded=0,
        written_at=written_at,
    )
    torn = history.results_tail.torn_bytes + history.failures_tail.torn_bytes
    lines.sort()
    return ShardSummary(
        source,
        manifest.run_id,
        manifest.identity_verified,
        torn,
        accumulator,
        array("q", lines),
        coverage=coverage.model_dump(exclude={"written_at"}),
    )


def summarize_shards(
    sources: Sequence[ShardSource], scoring: ScoringPolicy, written_at: str, workers: int | None = None
) -> list[ShardSummary]:
    """Summaries of every shard, in input order; several shards are read in parallel processes.

    ``workers``: None uses every CPU (at most one per shard); 1 reads in this process.
    """
    count = min(workers or os.cpu_count() or 1, len(sources))
    if count <= 1:
        return [summarize_shard(source, scoring, written_at) for source in sources]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
        futures = [pool.submit(summarize_shard, source, scoring, written_at) for source in sources]
        return [future.result() for future in futures]


# --- safety checks ------------------------------------------------------------------------------


def check_distinct_runs(shards: Sequence[ShardSummary]) -> None:
    """Reject two inputs holding one manifest-backed run (a copy at another path has the same run id)."""
    seen: dict[str, Path] = {}
    for shard in shards:
        if shard.run_id is None:
            continue
        first = seen.setdefault(shard.run_id, shard.source.results)
        if first != shard.source.results:
            raise ConfigError(
                f"{shard.source.results} and {first} hold the same run {shard.run_id} (one is a copy); "
                "supply each run once, at its original location"
            )


# --- combining and writing ----------------------------------------------------------------------


@dataclass
class AggregateResult:
    """What an aggregation produced, for the command to report."""

    metrics: dict[str, Any]
    coverage: dict[str, Any]
    merged_rows: int
    metrics_source: str
    warnings: list[str]


def shard_coverage_entry(shard: ShardSummary) -> dict[str, Any]:
    """One shard's entry in the aggregate coverage: where it is, whose it is, and its inventory."""
    entry: dict[str, Any] = {
        "path": str(shard.source.results),
        "spellings": [str(s) for s in shard.source.spellings],
        "run_id": shard.run_id,
        "legacy": shard.legacy,
        "identity_verified": shard.identity_verified,
        "torn_tail_bytes": shard.torn_bytes,
    }
    if shard.coverage is not None:
        entry["coverage"] = shard.coverage
    else:
        entry["observed"] = shard.observed
    return entry


_SUMMED = (
    "expected",
    "successful",
    "measured",
    "masked",
    "unscored",
    "failed",
    "intentionally_omitted",
    "not_started",
    "missing",
    "scored",
    "attempts",
    "counted_failures",
    "failure_budget_exhausted",
    "retryable",
    "historical_failed_attempts",
)


# Coverage fields that the aggregate metrics (the same selected states, the scoring policy applied)
# also count: the coverage file takes them from there, so the two files cannot disagree.
_FROM_METRICS = {
    "measured": "coverage/measured",
    "masked": "coverage/masked",
    "unscored": "coverage/unscored",
    "failed": "coverage/failed",
    "intentionally_omitted": "coverage/omitted",
    "not_started": "coverage/not_started",
    "missing": "coverage/missing",
    "expected": "coverage/expected",
    "scored": "coverage/scored",
    "failure_budget_exhausted": "retries/at_cap",
    "historical_failed_attempts": "retries/attempts",
}


def aggregate_coverage(
    shards: Sequence[ShardSummary], written_at: str, metrics: Mapping[str, Any]
) -> dict[str, Any]:
    """``<stem>_aggregate_coverage.json``: totals over the shards and one entry per shard.

    The totals agree with gymslurm's own aggregate ``metrics`` (computed from the same states): with
    ``count_failure_classes_as_zero``, ``scored`` includes the failures counted as zero (000). With any
    legacy shard the inventory is unknown: completion is not claimed (``complete`` is null), the
    inventory categories are null, and the observed measured / masked / unscored counts stay (000:
    "observed measured/masked counts remain available").
    """
    entries = [shard_coverage_entry(shard) for shard in shards]
    verified = [e["coverage"] for e in entries if "coverage" in e]
    inventory_known = len(verified) == len(entries)
    totals: dict[str, Any] = {key: sum(c[key] for c in verified) for key in _SUMMED}
    if not inventory_known:
        totals = dict.fromkeys(_SUMMED)
    totals.update({key: metrics.get(name) for key, name in _FROM_METRICS.items()})
    totals["successful"] = totals["measured"] + totals["masked"] + totals["unscored"]
    limits = {c["max_rollout_attempts"] for c in verified}
    return {
        "format_version": AGGREGATE_COVERAGE_VERSION,
        "selection_policy": "latest_allocated",
        "inventory_known": inventory_known,
        "identity_verified": all(e["identity_verified"] for e in entries),
        "complete": (totals["successful"] == totals["expected"]) if inventory_known else None,
        "reconciled": (totals["missing"] == 0) if inventory_known else None,
        "max_rollout_attempts": next(iter(limits)) if len(limits) == 1 and inventory_known else None,
        **totals,
        "shards": entries,
        "written_at": written_at,
    }


def compute_aggregate_metrics(
    shards: Sequence[ShardSummary], policy: ScoringPolicy
) -> dict[str, float | int]:
    """The flat metrics of every shard together: the shards' partial accumulators merged."""
    accumulator = MetricsAccumulator(policy=policy)
    for shard in shards:
        accumulator.merge(shard.accumulator)
    return accumulator.metrics()


def iter_selected_lines(shards: Sequence[ShardSummary]) -> Iterator[bytes]:
    """The selected completed results' raw lines, shard by shard, in file order (no re-serialization)."""
    for shard in shards:
        if len(shard.selected_lines):
            yield selected_lines(shard.source.results, shard.selected_lines)


@dataclass(frozen=True)
class AggregateOptions:
    """What ``gymslurm aggregate`` was asked to do."""

    inputs: tuple[str, ...]
    output: Path
    merge_shards: bool = True
    scoring: ScoringPolicy = field(default_factory=ScoringPolicy)
    environment_server_url: str | None = None
    timeout_s: float = 60.0
    workers: int | None = None  # processes reading shards; None: one per CPU


def aggregate(
    options: AggregateOptions, *, written_at: str, server_metrics: ServerMetrics | None = None
) -> AggregateResult:
    """Resolve, read, check and write; every refusal happens before the first byte is written.

    ``server_metrics`` (the HTTP seam; tests pass their own) answers like ``POST /aggregate_metrics``;
    None uses :func:`gymslurm.dispatch.post_aggregate_metrics`.
    """
    sources = resolve_inputs(expand_inputs(options.inputs))
    if options.merge_shards:
        check_output(options.output, sources)
    shards = summarize_shards(sources, options.scoring, written_at, options.workers)
    check_distinct_runs(shards)
    options.output.resolve().parent.mkdir(parents=True, exist_ok=True)  # every refusal is behind us
    warnings = _warnings(shards)
    metrics = compute_aggregate_metrics(shards, options.scoring)
    coverage = aggregate_coverage(shards, written_at, metrics)  # from gymslurm's own counts
    source_name = METRICS_SOURCE_OWN
    url = options.environment_server_url
    entry: dict[str, Any] | None = None
    if url:
        # Only now: a merge no server is named for never loads the HTTP client.
        from gymslurm.dispatch import post_aggregate_metrics
        from gymslurm.dispatch.calls import flat_metrics

        post = server_metrics or post_aggregate_metrics
        raw_rows = (raw for chunk in iter_selected_lines(shards) for raw in chunk.splitlines())
        rows = (row_for_metrics(orjson.loads(raw)) for raw in raw_rows)  # spooled as read: never held
        try:
            answer = post(url, rows, options.timeout_s)
            metrics.update(flat_metrics(answer))
            entry = metrics_entry(None, url, answer)
            source_name = f"environment_server ({redact_text(url)}/aggregate_metrics)"
        except MetricsUnavailableError as error:
            warnings.append(f"{error}; reward metrics are gymslurm's own computation")
    coverage["metrics_source"] = source_name
    merged = 0
    if options.merge_shards:
        merged = _write_projection(options.output, shards)
    write_gymslurm_metrics(
        companion(options.output.resolve(), "_gymslurm_metrics.json"),
        {"metrics": metrics, "metrics_source": source_name, "written_at": written_at},
    )
    nemo_gym_file = companion(options.output.resolve(), "_aggregate_metrics.json")
    if entry is not None:
        publish_json(nemo_gym_file, [entry])
    elif options.merge_shards:  # NeMo Gym's name promises servers' metrics: an older merge's is stale now
        nemo_gym_file.unlink(missing_ok=True)  # (without a merge the output may be a shard: its file stays)
    if entry is None:
        own = companion(options.output.resolve(), "_gymslurm_metrics.json")
        warnings.append(not_the_servers_metrics(nemo_gym_file.name, own))
    publish_json(companion(options.output.resolve(), "_aggregate_coverage.json"), coverage)
    return AggregateResult(metrics, coverage, merged, source_name, warnings)


def _write_projection(output: Path, shards: Sequence[ShardSummary]) -> int:
    count = 0

    def counted() -> Iterator[bytes]:
        nonlocal count
        for chunk in iter_selected_lines(shards):
            count += chunk.count(b"\n")
            yield chunk

    publish_stream(output, counted(), follow_link=True)  # the output path keeps its symlink (spec 000)
    return count


def _warnings(shards: Sequence[ShardSummary]) -> list[str]:
    out: list[str] = []
    for shard in shards:
        if shard.legacy:
            out.append(
                f"{shard.source.results} has no manifest: read line by line as a legacy shard "
                "(identity_verified false, no completion coverage claimed)"
            )
        if shard.torn_bytes:
            out.append(
                f"{shard.source.results}: an incomplete final line ({shard.torn_bytes} bytes) was ignored; "
                "the shard was not modified (its next resume repairs it)"
            )
        if len(shard.source.spellings) > 1:
            names = ", ".join(map(str, shard.source.spellings))
            out.append(f"{names} are one file ({shard.source.results}); it was counted once")
    return out
