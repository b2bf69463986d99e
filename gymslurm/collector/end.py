"""What follows the dispatch loop: the end-of-collection reports and the exit code.

Run inside the run lock once the loop has ended, in order: the coverage snapshot, the metrics
files (gymslurm's own and NeMo Gym's ``<stem>_aggregate_metrics.json`` from each server's
``POST /aggregate_metrics``), the automatic health report; then the messages that say why the
collection stopped and the exit code the chain acts on (spec 000's completion rule).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import orjson

from gymslurm.collector.live import STALL
from gymslurm.collector.routing import Routing
from gymslurm.collector.seal import Transcript
from gymslurm.collector.view import LoopResult, RunView
from gymslurm.coverage import Completion, Coverage, completion_exit_code, omissions_warning
from gymslurm.dispatch import MetricsRows, post_aggregate_metrics
from gymslurm.errors import DiskFullError, MetricsUnavailableError, StoreError
from gymslurm.exitcodes import ExitCode
from gymslurm.health import SelectedRun, after_collection
from gymslurm.metrics import METRICS_SOURCE_OWN, ScoringPolicy, compute_metrics
from gymslurm.nemogym import ServerOrigin, metrics_entry, row_for_metrics
from gymslurm.progress import say, summary_table
from gymslurm.redaction import redact_text
from gymslurm.settings import CollectSettings
from gymslurm.store import RunPaths, RunStore
from gymslurm.store.atomic import write_error
from gymslurm.store.files import read_gymslurm_metrics
from gymslurm.store.paths import outcome_sizes


def decide_exit(coverage: Coverage, require_complete: bool, made_progress: bool) -> Completion:
    """The completion: ``completion_exit_code`` with retryability read from coverage.

    Without ``require_complete`` a partial run exits 0; the only-omissions warning is still given.
    """
    completion = completion_exit_code(
        coverage,
        retryable=coverage.retryable > 0,
        made_progress=made_progress,
        require_complete=require_complete,
    )
    warning = omissions_warning(coverage)
    if completion.warning is None and warning is not None:
        return Completion(completion.code, completion.reason, warning)
    return completion


def budget_message(budget_s: float | None, drained: int, made_progress: bool) -> str:
    """What to say when ``dispatch_budget_s`` left rollouts undispatched (they spent no attempt).

    With progress, the next job goes on; without any, the budget itself stopped the work, and a
    resume alone would stop the same way (000: "Increase the dispatch budget or reduce the drain
    margin if they prevented all work").
    """
    said = f"dispatch_budget_s={budget_s} ran out: {drained} rollout(s) were not dispatched (no attempt used)"
    if made_progress:
        return f"{said}; resume to run them"
    return (
        f"{said}, and nothing was saved this invocation: the budget prevented all work. Increase the "
        "dispatch budget (+dispatch_budget_s) or reduce the drain margin (the time kept back before the "
        "job's end), then resume"
    )


def exhausted_message(coverage: Coverage, failures_path: Path) -> str | None:
    """What to say when rollouts ran out of failure budget: how many, and where their failures are."""
    if not coverage.failure_budget_exhausted:
        return None
    return (
        f"{coverage.failure_budget_exhausted} rollout(s) used up their failure budget "
        f"(max_rollout_attempts={coverage.max_rollout_attempts}); their failures are in {failures_path}. "
        "Fix the cause, then `gymslurm resubmit` gives them a fresh budget"
    )


def publish_reports(steps: list[Callable[[], None]], result: LoopResult, stderr: IO[str]) -> bool:
    """Publish the end-of-collection reports (coverage snapshot, metrics, health), in order.

    On a full disk the reports are snapshots that a resume or an aggregation rebuilds (000), so a
    report that cannot be written does not hide what matters: after a failed append, that first
    error stays the one reported; when this invocation dispatched nothing (a resume of a finished
    run) nothing new needs saving and the exit code stands, with a warning. Otherwise the disk-full
    error names the report file and stops (exit 1, resumable). Returns whether every report was written.
    """
    written = True
    for step in steps:
        try:
            step()
        except DiskFullError as error:
            if result.error is None and result.dispatched:
                raise
            say(stderr, f"warning: {error}")
            written = False
    return written


METRICS_TIMEOUT_S = 60.0  # one POST /aggregate_metrics per server at the end of a collection


MetricsPost = Callable[[str, Iterable[Mapping[str, Any]], float], dict[str, Any]]


def not_asked_after_a_stall(url: str, rows: Iterable[Mapping[str, Any]], timeout_s: float) -> dict[str, Any]:
    """A collection stopped by its stall window does not wait on the server that stalled it."""
    raise MetricsUnavailableError(
        f"POST {url}/aggregate_metrics not asked: the collection stalled (stall_window_s), so the server "
        "may hang again; the next link asks it"
    )


def export_metrics(  # noqa: PLR0917
    settings: CollectSettings,
    store: RunStore,
    view: RunView,
    coverage: Coverage,
    routing: Routing,
    stderr: IO[str],
    post: MetricsPost | None = None,
) -> None:
    """The metrics files, inside the lock, from the states the collection ends with.

    ``<stem>_gymslurm_metrics.json``: gymslurm's own metrics, the same ``gymslurm aggregate`` computes
    (with the same ``count_failure_classes_as_zero`` scoring policy; 000: "live and offline
    count_failure_classes_as_zero selection" match either name and count the row once).
    ``<stem>_aggregate_metrics.json``: NeMo Gym's list, one entry per Environment Server from its
    ``POST /aggregate_metrics`` over the selected results it ran (``post``, the HTTP seam). That file
    name promises the servers' own answers, so it holds nothing else: a server that does not answer
    gets no entry (a warning names it, and ``servers_without_metrics`` in gymslurm's file), and when no
    server answers the NeMo Gym file is removed (an older export's would be stale).

    Memory stays flat: the selected rows are read back one at a time and spooled per server as the
    request body (:class:`~gymslurm.dispatch.MetricsRows`), never held. Nothing is asked again when
    nothing changed since an export every server answered (:func:`export_basis`, recorded in the
    metrics file): a resume of a finished run does not re-post.
    """
    basis = export_basis(settings, store, view, routing)
    if _exported(store, basis):
        say(stderr, unchanged_metrics_message(store.paths))
        return
    metrics = compute_metrics(
        view.states,
        max_rollout_attempts=view.policy.max_rollout_attempts,
        historical_failed_attempts=coverage.historical_failed_attempts,
        policy=ScoringPolicy(count_failure_classes_as_zero=frozenset(settings.count_failure_classes_as_zero)),
    )
    body: dict[str, Any] = {
        "metrics": metrics,
        "metrics_source": METRICS_SOURCE_OWN,
        "written_at": coverage.written_at,
    }
    store.write_gymslurm_metrics(body)
    if settings.disable_aggregation:
        return
    spools: dict[str, MetricsRows] = {}
    try:
        for index, row in store.selected_results(view.states):
            task_id = row.get("task_id")  # a row NeMo Gym wrote (imported) has none: the run's task has it
            task_id = task_id if isinstance(task_id, dict) else store.rollout_index.row(index)["task_id"]
            url = routing.url_for(task_id["taskset"])
            spool = spools.get(url) or spools.setdefault(url, MetricsRows(store.paths.output.parent))
            spool.add(row_for_metrics(row))
        origins = routing.origins()
        asked = {
            url: _entry_of(url, rows, origins.get(url), store, stderr, post)
            for url, rows in sorted(spools.items())
        }
    except OSError as error:  # the request spool beside the output: a full disk is the store's error
        raise _spool_error(error, store) from error
    finally:
        try:
            for spool in spools.values():
                spool.close()
        except OSError as error:  # closing flushes the spool's buffer: the same full disk
            raise _spool_error(error, store) from error
    entries = [entry for entry in asked.values() if entry is not None]
    silent = [_server_name(url, origins.get(url)) for url, entry in asked.items() if entry is None]
    if entries or not silent:
        store.write_aggregate_metrics(entries)
    else:
        store.remove_aggregate_metrics()
    if silent:  # the file NeMo Gym's name promises holds only answers; gymslurm's own say which are not
        store.write_gymslurm_metrics({**body, "servers_without_metrics": silent})
    else:  # a basis stands only for answers
        store.write_gymslurm_metrics({**body, "export_basis": basis})


def unchanged_metrics_message(paths: RunPaths) -> str:
    return f"metrics unchanged since the last export ({paths.aggregate_metrics}): not asked"


def _entry_of(  # noqa: PLR0917
    url: str,
    rows: MetricsRows,
    origin: ServerOrigin | None,
    store: RunStore,
    stderr: IO[str],
    post: MetricsPost | None,
) -> dict[str, Any] | None:
    """A server's aggregate-metrics entry (its answer); None, with a warning, when it does not answer."""
    try:
        return metrics_entry(origin, url, (post or post_aggregate_metrics)(url, rows, METRICS_TIMEOUT_S))
    except MetricsUnavailableError as error:
        say(
            stderr,
            f"warning: {error}; {store.paths.aggregate_metrics.name} has no entry for "
            f"{_server_name(url, origin)}: gymslurm's own metrics of the run are in "
            f"{store.paths.gymslurm_metrics}",
        )
        return None


def _server_name(url: str, origin: ServerOrigin | None) -> str:
    """A server as the metrics files name it: its name in NeMo Gym's config, else its redacted URL."""
    return origin.name if origin else redact_text(url)


def export_basis(settings: CollectSettings, store: RunStore, view: RunView, routing: Routing) -> str:
    """What an export is computed from: the saved outcomes (their files' sizes only grow), the selection
    policy, the scoring policy and the servers asked. Equal bases give equal metrics files."""
    parts = [
        store.run_id,
        *outcome_sizes(store.paths),
        repr(view.policy),
        sorted(settings.count_failure_classes_as_zero),
        routing.default.url if routing.default else None,
        sorted((taskset, route.url) for taskset, route in routing.by_taskset.items()),
    ]
    return "sha256:" + hashlib.sha256(orjson.dumps(parts)).hexdigest()


def _spool_error(error: OSError, store: RunStore) -> StoreError:
    """The metrics request spooled beside the output could not be written: the store's translation."""
    target = store.paths.aggregate_metrics
    return write_error(error, f"could not write {target}", target.parent)


def _exported(store: RunStore, basis: str) -> bool:
    """Whether the metrics files on disk were exported from ``basis`` (an unreadable file: no)."""
    try:
        previous = read_gymslurm_metrics(store.paths.gymslurm_metrics)
    except StoreError:
        return False
    if previous is None or previous.get("export_basis") != basis:
        return False
    exported = store.paths.aggregate_metrics  # a link planted there is replaced, never kept or read
    return exported.exists() and not exported.is_symlink()


def run_health_hook(paths: RunPaths, view: RunView, stderr: IO[str]) -> None:
    """The automatic health report, inside the lock, from the states the collection ends with.

    ``view.states`` is the reconciliation advanced by every saved outcome with the same selection
    rules, i.e. what reconciling the run again would give; health does not re-read the run for it.
    """
    after_collection(paths, stderr=stderr, selected=SelectedRun(view.states, view.run_id))


def resume_answer(  # noqa: PLR0917
    settings: CollectSettings,
    store: RunStore,
    view: RunView,
    coverage: Coverage,
    routing: Routing,
    health_said: Iterable[str],
) -> Callable[[Transcript], int] | None:
    """How a resume of this finished run would end, printed into a transcript, for its seal.

    The same steps as here with nothing dispatched: the metrics export finds its basis unchanged
    and says so, health says what it said now (the same states), and the exit follows from the same
    coverage without this invocation's progress. None when that resume would do more than speak: a
    server left without metrics is asked again.
    """
    exported = _exported(store, export_basis(settings, store, view, routing))
    if not exported and not settings.disable_aggregation:
        return None
    repeat = coverage.model_copy(update={"progress_outcomes_recorded": 0})
    said = list(health_said)

    def answer(transcript: Transcript) -> int:
        if exported:
            say(transcript.stderr, unchanged_metrics_message(store.paths))
        for text in said:
            transcript.stderr.write(text)
        return final_exit(settings, repeat, LoopResult(), store.paths, transcript.stderr, transcript.stdout)

    return answer


def final_exit(  # noqa: PLR0917
    settings: CollectSettings,
    coverage: Coverage,
    result: LoopResult,
    paths: RunPaths,
    stderr: IO[str],
    stdout: IO[str],
) -> ExitCode:
    if result.stopped_by and result.stopped_by != "error":
        say(
            stderr,
            f"stopped by {result.stopped_by}: requests in flight were cancelled; their rollouts "
            "stay unfinished (missing) and run again on resume",
        )
    if result.interruptions:
        say(
            stderr,
            f"{result.interruptions} attempt(s) in flight were interrupted by a supervised server's death "
            f"or the job's stop: recorded in {paths.failures} as kill_shaped with the evidence, no failure "
            "budget spent",
        )
    if result.budget_drained:
        made_progress = result.progress_outcomes > 0
        say(stderr, budget_message(settings.dispatch_budget_s, result.budget_drained, made_progress))
    exhausted = exhausted_message(coverage, paths.failures)
    if exhausted:
        say(stderr, exhausted)
    if settings.summary:
        summary_table(coverage.model_dump(), str(paths.coverage), stdout)
    if result.error is not None:
        raise result.error
    if result.stopped_by == STALL:
        say(stderr, f"exit 1: stalled (stall_window_s={settings.stall_window_s:g})")
        return ExitCode.RETRY
    if result.server_dead is not None:
        say(
            stderr,
            f"exit 1: {result.server_dead} stopped answering (circuit breaker, dispatch_breaker_wait_s="
            f"{settings.dispatch_breaker_wait_s:g}); no rollout was charged for it. Bring the server back "
            "and run again with +resume_from_cache=true",
        )
        return ExitCode.RETRY
    completion = decide_exit(coverage, settings.require_complete, result.progress_outcomes > 0)
    if completion.warning:
        say(stderr, f"warning: {completion.warning}")
    say(stderr, f"exit {completion.code}: {completion.reason}")
    return completion.code
