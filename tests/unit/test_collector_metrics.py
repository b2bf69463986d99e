"""The collector's metrics files: gymslurm's own, and NeMo Gym's list from each server's /aggregate_metrics.

A real run store on disk; the HTTP seam (``post``) is the function that would call
``POST /aggregate_metrics`` (its real calls run in tests/e2e and tests/compat).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson

from gymslurm.collector import LoopResult, RunView, build_coverage
from gymslurm.collector_end import export_metrics
from gymslurm.errors import MetricsUnavailableError
from gymslurm.nemogym import ServerOrigin
from gymslurm.routing import Route, Routing
from gymslurm.settings import load_settings
from gymslurm.store import RunPaths, RunStore
from tests.unit.test_store_runstore import create

URL = "http://127.0.0.1:18314"
ORIGIN = ServerOrigin("weather_legacy_env", "legacy_agent", "weather_agent")
ROUTING = Routing(Route(URL, "legacy_agent", ORIGIN))


def finished_run(tmp_path: Path) -> tuple[Any, RunStore, RunView]:
    settings, _ = load_settings([f"+input_jsonl_fpath={tmp_path}/in.jsonl",
                                 f"+output_jsonl_fpath={tmp_path}/out.jsonl",
                                 f"+environment_server_url={URL}"])  # fmt: skip
    store = create(RunPaths.for_output(tmp_path / "out.jsonl"), count=2)
    store.reconcile()
    for index in (0, 1):
        store.append_result(index, store.reserve(index), {"reward": 1.0, "response": {"output": ["x"]}})
    store.close()
    store = RunStore.open(store.paths)
    rec = store.reconcile()
    view = RunView(tasks=[], reserved=list(store.table.counts()), states=list(rec.states),
                   policy=rec.policy, run_id=store.run_id, identity_verified=True,
                   historical_failed_attempts=0)  # fmt: skip
    return settings, store, view


def test_each_server_is_asked_for_its_selected_results(tmp_path: Path) -> None:
    """POST /aggregate_metrics gets the server's selected results (heavy fields out); its answer is used."""
    settings, store, view = finished_run(tmp_path)
    asked: list[tuple[str, list[dict[str, Any]]]] = []

    def post(url: str, rows: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        asked.append((url, rows))
        return {"agent_metrics": {"mean/reward": 1.0}, "key_metrics": {"mean/reward": 1.0}}

    coverage = build_coverage(view, LoopResult())
    export_metrics(settings, store, view, coverage, ROUTING, io.StringIO(), post)
    ((url, sent),) = asked
    assert url == URL and [row["reward"] for row in sent] == [1.0, 1.0]
    assert not any("response" in row for row in sent)  # no usage to keep: the response goes
    (entry,) = orjson.loads(store.paths.aggregate_metrics.read_bytes())
    assert entry["_ng_environment_server"] == "weather_legacy_env"
    assert entry["agent_metrics"] == {"mean/reward": 1.0}
    own = orjson.loads(store.paths.gymslurm_metrics.read_bytes())
    assert own["metrics"]["coverage/measured"] == 2


def test_a_server_that_does_not_answer_leaves_gymslurms_metrics_with_a_note(tmp_path: Path) -> None:
    """Fallback: the entry holds gymslurm's own metrics and a gymslurm_note; a warning names the file."""
    settings, store, view = finished_run(tmp_path)

    def down(url: str, rows: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        raise MetricsUnavailableError(f"the Environment Server at {url} did not answer /aggregate_metrics")

    stderr = io.StringIO()
    export_metrics(settings, store, view, build_coverage(view, LoopResult()), ROUTING, stderr, down)
    (entry,) = orjson.loads(store.paths.aggregate_metrics.read_bytes())
    assert "did not answer /aggregate_metrics" in entry["gymslurm_note"]
    assert entry["agent_metrics"]["coverage/measured"] == 2
    assert entry["_ng_environment_server"] == "weather_legacy_env"
    assert "warning:" in stderr.getvalue() and "_gymslurm_metrics.json" in stderr.getvalue()


def test_imported_rows_without_a_task_id_are_routed_by_their_rollouts_task(tmp_path: Path) -> None:
    """A result row NeMo Gym wrote (imported, no task_id) goes to the server of its rollout's taskset."""
    settings, store, view = finished_run(tmp_path)
    rows = [orjson.loads(line) for line in store.paths.results.read_bytes().splitlines()]
    store.paths.results.write_bytes(b"".join(orjson.dumps({k: v for k, v in row.items() if k != "task_id"})
                                             + b"\n" for row in rows))  # fmt: skip
    asked: list[str] = []

    def post(url: str, rows: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        asked.append(url)
        return {"agent_metrics": {"mean/reward": 1.0}}

    export_metrics(settings, store, view, build_coverage(view, LoopResult()), ROUTING, io.StringIO(), post)
    assert asked == [URL]
