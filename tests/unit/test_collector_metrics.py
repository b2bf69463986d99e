"""The collector's metrics files: gymslurm's own, and NeMo Gym's list from each server's /aggregate_metrics.

A real run store on disk; the HTTP seam (``post``) is the function that would call
``POST /aggregate_metrics`` (its real calls run in tests/e2e and tests/compat).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from gymslurm.collector.collect import LoopResult, RunView, build_coverage
from gymslurm.collector.end import export_metrics
from gymslurm.collector.routing import Route, Routing
from gymslurm.collector.view import OriginStamps
from gymslurm.dispatch import MetricsRows
from gymslurm.errors import MetricsUnavailableError
from gymslurm.nemogym import ServerOrigin
from gymslurm.settings import load_settings
from gymslurm.store import RunPaths, RunStore
from tests.unit.test_store_runstore import create
from tests.unit.test_store_runstore import failure as failure_of

URL = "http://127.0.0.1:18314"
ORIGIN = ServerOrigin("weather_legacy_env", "legacy_agent", "weather_agent")
ROUTING = Routing(Route(URL, "legacy_agent", ORIGIN))


def finished_run(tmp_path: Path) -> tuple[Any, RunStore, RunView]:
    settings, _ = load_settings(
        [
            f"+input_jsonl_fpath={tmp_path}/in.jsonl",
            f"+output_jsonl_fpath={tmp_path}/out.jsonl",
            f"+environment_server_url={URL}",
        ]
    )
    store = create(RunPaths.for_output(tmp_path / "out.jsonl"), count=2)
    store.reconcile()
    for index in (0, 1):
        store.append_result(index, store.reserve(index), {"reward": 1.0, "response": {"output": ["x"]}})
    store.close()
    store = RunStore.open(store.paths)
    rec = store.reconcile()
    view = RunView(
        tasks=[],
        reserved=list(store.table.counts()),
        states=list(rec.states),
        policy=rec.policy,
        run_id=store.run_id,
        identity_verified=True,
        historical_failed_attempts=0,
    )
    return settings, store, view


def test_each_server_is_asked_for_its_selected_results(tmp_path: Path) -> None:
    """POST /aggregate_metrics gets the server's selected results (heavy fields out); its answer is used."""
    settings, store, view = finished_run(tmp_path)
    asked: list[tuple[str, list[dict[str, Any]]]] = []

    def post(url: str, rows: Iterable[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        asked.append((url, list(rows)))  # the rows are a stream, read during the call
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


def test_a_server_that_does_not_answer_gets_no_entry_under_nemo_gyms_name(tmp_path: Path) -> None:
    """No answer: NeMo Gym's file is not written (a stale one removed); gymslurm's own names the server."""
    settings, store, view = finished_run(tmp_path)
    store.paths.aggregate_metrics.write_text('[{"_ng_environment_server": "weather_legacy_env"}]')  # older

    def down(url: str, rows: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        raise MetricsUnavailableError(f"the Environment Server at {url} did not answer /aggregate_metrics")

    stderr = io.StringIO()
    export_metrics(settings, store, view, build_coverage(view, LoopResult()), ROUTING, stderr, down)
    assert not store.paths.aggregate_metrics.exists()
    own = orjson.loads(store.paths.gymslurm_metrics.read_bytes())
    assert own["servers_without_metrics"] == ["weather_legacy_env"] and "export_basis" not in own
    assert own["metrics"]["coverage/measured"] == 2
    assert "warning:" in stderr.getvalue() and "_gymslurm_metrics.json" in stderr.getvalue()


def test_only_the_servers_that_answer_have_entries(tmp_path: Path) -> None:
    """Two servers, one silent: NeMo Gym's file holds the answering one's entry only, never gymslurm's."""
    settings, store, view = finished_run(tmp_path)
    other = "http://127.0.0.1:18315"
    routing = Routing(Route(URL, "legacy_agent", ORIGIN), {"b": Route(other, "episode", None)})
    rows = [orjson.loads(line) for line in store.paths.results.read_bytes().splitlines()]
    rows[1]["task_id"] = {**rows[1]["task_id"], "taskset": "b"}
    store.paths.results.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))

    def post(url: str, rows: Iterable[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        if url == other:
            raise MetricsUnavailableError(f"the server at {url} did not answer /aggregate_metrics")
        return {"agent_metrics": {"mean/reward": 1.0}}

    export_metrics(settings, store, view, build_coverage(view, LoopResult()), routing, io.StringIO(), post)
    (entry,) = orjson.loads(store.paths.aggregate_metrics.read_bytes())
    assert entry["_ng_environment_server"] == "weather_legacy_env" and "gymslurm_note" not in entry
    assert orjson.loads(store.paths.gymslurm_metrics.read_bytes())["servers_without_metrics"] == [other]


def test_imported_rows_without_a_task_id_are_routed_by_their_rollouts_task(tmp_path: Path) -> None:
    """A result row NeMo Gym wrote (imported, no task_id) goes to the server of its rollout's taskset."""
    settings, store, view = finished_run(tmp_path)
    rows = [orjson.loads(line) for line in store.paths.results.read_bytes().splitlines()]
    store.paths.results.write_bytes(
        b"".join(orjson.dumps({k: v for k, v in row.items() if k != "task_id"}) + b"\n" for row in rows)
    )
    asked: list[str] = []

    def post(url: str, rows: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        asked.append(url)
        return {"agent_metrics": {"mean/reward": 1.0}}

    export_metrics(settings, store, view, build_coverage(view, LoopResult()), ROUTING, io.StringIO(), post)
    assert asked == [URL]


def _counting(asked: list[str]) -> Any:
    def post(url: str, rows: Iterable[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        asked.append(url)
        return {"agent_metrics": {"mean/reward": 1.0}}

    return post


def test_an_export_is_not_made_again_when_nothing_changed(tmp_path: Path) -> None:
    """A resume of a finished run does not re-post: the same outcomes, policy and servers, no new ask."""
    settings, store, view = finished_run(tmp_path)
    asked: list[str] = []
    coverage = build_coverage(view, LoopResult())
    export_metrics(settings, store, view, coverage, ROUTING, io.StringIO(), _counting(asked))
    stderr = io.StringIO()
    export_metrics(settings, store, view, coverage, ROUTING, stderr, _counting(asked))
    assert asked == [URL]
    assert "not asked" in stderr.getvalue()
    (entry,) = orjson.loads(store.paths.aggregate_metrics.read_bytes())
    assert entry["agent_metrics"] == {"mean/reward": 1.0}


def test_a_new_outcome_or_an_unanswered_export_is_asked_again(tmp_path: Path) -> None:
    """The export is skipped only over the same saved outcomes, and only after every server answered."""
    settings, store, view = finished_run(tmp_path)
    coverage = build_coverage(view, LoopResult())

    def down(url: str, rows: Iterable[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        raise MetricsUnavailableError("down")

    asked: list[str] = []
    export_metrics(settings, store, view, coverage, ROUTING, io.StringIO(), down)
    export_metrics(settings, store, view, coverage, ROUTING, io.StringIO(), _counting(asked))
    assert asked == [URL]
    store.append_failure(0, store.reserve(0), failure_of(store, 0, 1))
    export_metrics(settings, store, view, coverage, ROUTING, io.StringIO(), _counting(asked))
    assert asked == [URL, URL]


def test_the_rows_reach_the_server_as_a_spooled_body_not_a_list(tmp_path: Path) -> None:
    """The selected rows are spooled to a file as NeMo Gym's request body; no list of rows is held."""
    settings, store, view = finished_run(tmp_path)
    bodies: list[Any] = []

    def post(url: str, rows: Iterable[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        assert isinstance(rows, MetricsRows)
        bodies.append(orjson.loads(rows.body().read()))
        return {"agent_metrics": {}}

    coverage = build_coverage(view, LoopResult())
    export_metrics(settings, store, view, coverage, ROUTING, io.StringIO(), post)
    (body,) = bodies
    assert [row["reward"] for row in body["verify_responses"]] == [1.0, 1.0]


def test_a_spooled_body_is_the_json_list_nemo_gym_takes() -> None:
    """MetricsRows writes {"verify_responses": [...]} row by row; iterating gives the rows back."""
    rows = [{"reward": 1.0, "text": "a,\nb"}, {"reward": 0.0}]
    with MetricsRows() as spool:
        for row in rows:
            spool.add(row)
        assert orjson.loads(spool.body().read()) == {"verify_responses": rows}
        assert list(spool) == rows == list(spool)
    with MetricsRows() as empty:
        assert orjson.loads(empty.body().read()) == {"verify_responses": []}


def test_a_collections_view_reads_tasks_from_the_store_and_keeps_none_once_saved(tmp_path: Path) -> None:
    """A collection keeps a compact index per rollout: a task is read when dispatched, dropped when saved."""
    store = create(RunPaths.for_output(tmp_path / "out.jsonl"), count=3)
    rec = store.reconcile()
    index = store.rollout_index
    view = RunView(
        tasks=index,
        ids=index.ids,
        reserved=list(store.table.counts()),
        states=list(rec.states),
        policy=rec.policy,
        run_id=store.run_id,
        identity_verified=True,
        historical_failed_attempts=0,
    )
    inputs = store.inputs()
    assert view.wire_task(1) == {"task_id": inputs[1]["task_id"], "task_input": inputs[1]["task_input"]}
    view.mark_reserved(1, store.reserve(1))
    view.advance(1, store.append_result(1, 0, {"reward": 1.0}))
    assert view.ids == [task["_ng_rollout_id"] for task in inputs] and view._open == {}


def test_origin_stamps_are_found_per_taskset_as_records_are_saved(tmp_path: Path) -> None:
    """The tasksets are not listed up front: each record's taskset finds its server's origin when saved."""
    store = create(RunPaths.for_output(tmp_path / "out.jsonl"), count=1)
    store.reconcile()
    taskset = store.inputs()[0]["task_id"]["taskset"]
    store.stamp_origins(OriginStamps({taskset: URL}.__getitem__, {URL: ORIGIN}))
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    (row,) = [orjson.loads(line) for line in store.paths.results.read_bytes().splitlines()]
    assert row["_ng_environment_server"] == "weather_legacy_env" and row["_ng_task_id"] == row["task_id"]
