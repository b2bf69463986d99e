"""Rows NeMo Gym's collector appends to a run gymslurm started or imported are adopted (issue 34).

NeMo Gym resumes a gymslurm run with ``+resume_from_cache=true``: it reads NeMo Gym's
``<stem>_materialized_inputs.jsonl`` (kept in NeMo Gym's shape; the run's own tasks are in
``<stem>_gymslurm_inputs.jsonl``) and appends unstamped rows to the shared outcome files. gymslurm's
next turn adopts each such row as the next execution of its rollout, journalled so that the numbers
never move, however many turns each tool takes (store/adoptions.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gymslurm.collector.routing import Route, Routing, nemo_gym_rows
from gymslurm.errors import CorruptRecordError
from gymslurm.nemogym import ServerOrigin, materialized_row
from gymslurm.selection import Disposition
from gymslurm.store import RunPaths, RunSpec, RunStore
from gymslurm.store.manifest import read_manifest, write_manifest
from tests.unit.test_store_runstore import DIGEST, append_raw, create, make_inputs, rows

RELAY = ServerOrigin("weather_legacy_env", "legacy_agent", "weather_agent")
TYPED = ServerOrigin("weather_env", "single_agent_turn", "weather_agent")


@pytest.fixture
def paths(tmp_path: Path) -> RunPaths:
    return RunPaths.for_output(tmp_path / "out.jsonl")


def nemo_gym_result(task: int, reward: float = 1.0) -> dict[str, Any]:
    """A row NeMo Gym's collector appends: no _ng_run_id, no _ng_attempt, keyed by its indices."""
    return {"reward": reward, "_ng_task_index": task, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}}


def reopened(paths: RunPaths) -> tuple[RunStore, list[Any]]:
    """The run opened and reconciled as a resume does it (adoption is the first write)."""
    store = RunStore.open(paths)
    states = store.reconcile().states
    store.adopt()
    return store, states


def test_a_fresh_run_keeps_its_tasks_in_its_own_file(paths: RunPaths) -> None:
    """Manifest v3: the tasks in <stem>_gymslurm_inputs.jsonl; NeMo Gym's name is NeMo Gym's shape."""
    spec_row = nemo_gym_rows(Routing(Route("http://h:1", "legacy_agent", RELAY)))
    create(paths, nemo_gym_row=spec_row).close()
    manifest = read_manifest(paths.manifest)
    assert manifest is not None and manifest.format_version == 3
    assert [row["_ng_rollout_id"] for row in rows(paths.gymslurm_inputs)] == ["demo-t0", "demo-t1", "demo-t2"]
    nemo = paths.materialized_inputs.read_bytes().splitlines()[0]
    assert nemo == (
        b'{"question":"q0","_ng_task_index":0,"_ng_environment_server":"weather_legacy_env",'
        b'"_ng_rollout_index":0,"agent_ref":{"name":"weather_agent"}}'
    )


@pytest.mark.parametrize(
    ("origin", "episode", "expected"),
    [
        (  # the relay: the flat row, the server's name and its bound agent, as NeMo Gym stamps them
            RELAY,
            False,
            {"q": 1, "_ng_task_index": 3, "_ng_environment_server": "weather_legacy_env",
             "_ng_rollout_index": 1, "agent_ref": {"name": "weather_agent"}},
        ),
        (  # a typed server: the materialized envelope, no agent_ref (NeMo Gym stamps none on it)
            TYPED,
            True,
            {"task_id": {"taskset": "w", "task_id": "0"}, "task_input": {"q": 1}, "_ng_task_index": 3,
             "_ng_environment_server": "weather_env", "_ng_rollout_index": 1},
        ),
        (  # a server no configuration names: no server stamp (NeMo Gym's resume needs its flags)
            None,
            False,
            {"q": 1, "_ng_task_index": 3, "_ng_rollout_index": 1},
        ),
    ],
)  # fmt: skip
def test_a_task_as_nemo_gyms_materialized_row(
    origin: ServerOrigin | None, episode: bool, expected: dict[str, Any]
) -> None:
    """What NeMo Gym 0.7.0 writes and reads back on +resume_from_cache=true, keys in its order."""
    task = {"_ng_rollout_id": "w-0-r1", "_ng_task_index": 3, "_ng_rollout_index": 1,
            "task_id": {"taskset": "w", "task_id": "0"}, "task_input": {"q": 1}}  # fmt: skip
    row = materialized_row(task, origin, episode)
    assert list(row.items()) == list(expected.items())


def test_rows_nemo_gym_appended_are_adopted_as_the_next_executions(paths: RunPaths) -> None:
    """A NeMo Gym row after gymslurm's turn: the newest execution of its rollout, reserved, journalled."""
    store = create(paths)
    store.reconcile()
    store.append_result(0, store.reserve(0), {"reward": 1.0})
    store.reserve(1)  # in flight when gymslurm was killed: no outcome
    store.close()
    append_raw(paths.results, nemo_gym_result(1))
    append_raw(paths.results, nemo_gym_result(2, 0.0))
    store, states = reopened(paths)
    store.close()
    assert [state.disposition for state in states] == [Disposition.MEASURED] * 3
    assert list(store.table.counts()) == [1, 2, 1]
    assert [(r["file"], r["line"], r["rollout"], r["execution"]) for r in rows(paths.adoptions)] == [
        ("results", 1, 1, 1),
        ("results", 2, 2, 0),
    ]
    again, states_again = reopened(paths)  # the numbers come from the journal now: nothing adopted twice
    again.close()
    assert states_again == states and list(again.table.counts()) == [1, 2, 1]
    assert len(rows(paths.adoptions)) == 2


def test_turns_of_both_tools_in_any_order_never_collide(paths: RunPaths) -> None:
    """NeMo Gym, gymslurm, NeMo Gym again on one rollout: each outcome its own execution, newest selected."""
    store = create(paths, count=1)
    store.close()
    append_raw(paths.failures, {"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_failure_class": "x"})
    store, _ = reopened(paths)
    store.append_result(0, store.reserve(0), {"reward": 0.0, "mask_sample": False})
    store.close()
    append_raw(paths.results, nemo_gym_result(0, 0.5))
    store, states = reopened(paths)
    store.close()
    assert list(store.table.counts()) == [3]
    assert states[0].selected is not None and (states[0].selected.attempt, states[0].selected.reward) == (
        2,
        0.5,
    )


def test_an_imported_run_adopts_what_nemo_gym_appends_after_the_import(paths: RunPaths) -> None:
    """Rows before the import are numbered by arrival (000); NeMo Gym's later rows are adopted above
    gymslurm's own executions instead of colliding with them."""
    append_raw(paths.results, nemo_gym_result(0))
    spec = RunSpec(source_path="d", source_digest=DIGEST, inputs=make_inputs(2), identity={},
                   config_digest=DIGEST, max_rollout_attempts=3)  # fmt: skip
    store = RunStore.import_legacy(paths, spec)
    store.reconcile()
    store.append_result(1, store.reserve(1), {"reward": 0.0})
    store.close()
    append_raw(paths.results, nemo_gym_result(1))
    store, states = reopened(paths)
    store.close()
    assert list(store.table.counts()) == [1, 2]
    assert states[1].selected is not None and states[1].selected.attempt == 1


def test_an_adoption_beyond_the_reservations_is_refused(paths: RunPaths) -> None:
    """A journal line naming an execution the table never reserved: the files were mixed."""
    create(paths).close()
    paths.adoptions.write_bytes(
        orjson.dumps({"format_version": 1, "file": "results", "line": 0, "rollout": 0, "execution": 4})
        + b"\n"
    )
    with pytest.raises(CorruptRecordError, match="not an adoption this run's reservations cover"):
        RunStore.open(paths).reconcile()


def test_a_version_2_run_still_reads_its_tasks_under_nemo_gyms_name(paths: RunPaths) -> None:
    """A run an earlier gymslurm wrote (manifest v2, its tasks in <stem>_materialized_inputs.jsonl)."""
    store = create(paths)
    store.close()
    paths.gymslurm_inputs.replace(paths.materialized_inputs)
    manifest = read_manifest(paths.manifest)
    assert manifest is not None
    write_manifest(paths.manifest, manifest.model_copy(update={"format_version": 2}))
    again = RunStore.open(paths)
    assert again.rollout_ids() == ["demo-t0", "demo-t1", "demo-t2"]
    again.close()
