"""store/ is the only reader: one saved-row reader, one versioned-JSON reader, one definition per rule."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gymslurm.aggregate import load_shard, resolve_inputs
from gymslurm.errors import ManifestError
from gymslurm.store import RunPaths, RunStore, live
from gymslurm.store.files import read_coverage, read_gymslurm_metrics
from gymslurm.store.history import RolloutKeys, read_history, result_outcome
from gymslurm.store.manifest import read_manifest
from tests.unit.test_aggregate_fixtures import ShardBuilder, write_legacy

PACKAGE = Path(__file__).resolve().parents[2] / "gymslurm"


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text()) for p in PACKAGE.rglob("*.py")}


def test_only_the_store_and_selection_build_saved_outcomes() -> None:
    """A saved row becomes a SavedOutcome in store/ alone (selection.py defines the type)."""
    builders = sorted(
        name
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "SavedOutcome"
        and not name.startswith("store/")
        and name != "selection.py"
    )
    assert builders == []


def test_the_legacy_judge_markers_are_defined_once() -> None:
    """The `_ng_*` keys a result may carry are one constant, shared by dispatch and the store."""
    homes = sorted(
        name
        for name, tree in _modules().items()
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "LEGACY_JUDGE_MARKERS" for t in node.targets)
    )
    assert homes == ["records.py"]


def test_a_legacy_failure_row_reads_alike_in_aggregation_and_in_an_imported_run(tmp_path: Path) -> None:
    """A legacy sidecar row (no canonical record) means the same to aggregation as to the store's import."""
    failure = {
        "_ng_rollout_id": "arith-0",
        "_ng_failure_class": "transport_timeout",
        "_ng_failure_terminal": False,
        "_ng_failure_message": "timed out",
    }
    result = {"_ng_rollout_id": "arith-1", "reward": 1.0}
    output = write_legacy(tmp_path / "legacy.jsonl", [result], [failure])
    (aggregated, _) = load_shard(resolve_inputs([output])[0]).legacy_outcomes
    paths = RunPaths.for_output(output)
    history = read_history(
        paths.results,
        paths.failures,
        run_id="run-" + "0" * 32,
        rollout_count=2,
        legacy=True,
        keys=RolloutKeys({"arith-0": 0, "arith-1": 1}, dict),
    )
    (imported,) = history.outcomes(0)
    assert aggregated == imported
    assert (imported.failure_kind, imported.delivery) == ("transport_timeout", "possibly_delivered")


ROWS: list[dict[str, Any]] = [
    {"reward": 1.0},
    {"reward": 2},
    {"reward": True},
    {"reward": float("inf")},
    {"reward": None},
    {"reward": 0.5, "mask_sample": True, "failure_kind": "judge_failed"},
    {"mask_sample": True, "failure_kind": 3},
    {"reward": 0.0, "mask_sample": False},
]


def test_the_hot_results_reader_reads_every_row_as_result_outcome(tmp_path: Path) -> None:
    """The reconcile loop inlines result_outcome's common case; both read every saved result alike."""
    builder = ShardBuilder(tmp_path / "run.jsonl", len(ROWS))
    for index, row in enumerate(ROWS):
        builder.store.append_result(index, builder.reserve(builder.ids[index]), row)
    store = RunStore.open(RunPaths.for_output(builder.output), writable=False)
    groups = store.read_history().groups
    expected = [result_outcome(row, 0, line) for line, row in enumerate(ROWS)]
    assert groups == expected


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _identity(paths: RunPaths) -> Any:
    return RunStore(paths, None, None).saved_identity()  # type: ignore[arg-type]


READERS: list[tuple[str, Callable[[RunPaths], Any], Callable[[RunPaths], Path]]] = [
    ("manifest", lambda p: read_manifest(p.manifest), lambda p: p.manifest),
    ("saved identity", _identity, lambda p: p.identity),
    ("coverage", read_coverage, lambda p: p.coverage),
    ("gymslurm metrics", lambda p: read_gymslurm_metrics(p.gymslurm_metrics), lambda p: p.gymslurm_metrics),
    ("live progress", lambda p: live.read_progress(p.progress), lambda p: p.progress),
    (
        "heartbeat",
        lambda p: live.read_heartbeat(p.output.parent / "heartbeat.json"),
        lambda p: p.output.parent / "heartbeat.json",
    ),
]


BAD = [(b"{not json", "is not valid JSON"), (b"[1]", "is a JSON list, not an object: ")]


@pytest.mark.parametrize("bad", BAD, ids=["not-json", "not-an-object"])
@pytest.mark.parametrize("reader", READERS, ids=[r[0] for r in READERS])
def test_every_json_companion_is_read_by_the_one_reader(
    tmp_path: Path,
    reader: tuple[str, Callable[[RunPaths], Any], Callable[[RunPaths], Path]],
    bad: tuple[bytes, str],
) -> None:
    """Manifest, identity, coverage, metrics and live files refuse a bad file alike (named, with a remedy)."""
    (_, read, where), (content, says) = reader, bad
    paths = RunPaths.for_output(tmp_path / "run.jsonl")
    path = _write(where(paths), content)
    with pytest.raises(ManifestError) as raised:
        read(paths)
    assert str(path) in str(raised.value) and says in str(raised.value)


BLOB = (b"t0t1t2", [0, 2, 4, 6])  # three ids, as the store's RolloutIndex holds them


@pytest.mark.parametrize(
    ("rollout_id", "guesses", "found"),
    [
        ("t1", (1,), 1),  # a right guess
        ("t1", (0, 2, 1), 1),  # wrong guesses cost a comparison each
        ("t1", (5, -1, None, True, "1"), 11),  # out of range, not an int (a bool is not): looked up
        ("t2", (), 12),  # no guess: looked up
        ("nope", (0, 1, 2), None),  # no guess is ever taken on trust
        (3, (0,), None),  # not a string
    ],
)
def test_a_rollout_guess_is_confirmed_by_its_ids_bytes(
    rollout_id: object, guesses: tuple[object, ...], found: int | None
) -> None:
    """The readers guess a row's rollout (its task index, the one after the row before) and check the guess
    against the id's bytes; anything else is looked up (here a lookup answers 10 + the index)."""
    keys = RolloutKeys({"t0": 10, "t1": 11, "t2": 12}, dict, BLOB)
    assert keys.find(rollout_id, *guesses) == found
