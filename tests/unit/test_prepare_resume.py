"""Preparing a resume (spec 000, "Resume saved results", "Legacy artifacts and explicit overrides").

Each test prepares real runs on disk in-process (``prepare`` with the store, no dispatch): the
environment configuration is given explicitly, so nothing is fetched.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymslurm.collector.prepare import Prepared, prepare
from gymslurm.errors import IdentityMismatchError, ManifestError
from gymslurm.process_env import MAX_ATTEMPTS_ENV
from gymslurm.settings import load_settings
from gymslurm.store import RunPaths
from tests.e2e.helpers import read_jsonl, write_tasks


def no_fetch(url: str) -> dict[str, Any]:
    raise AssertionError(f"nothing should be fetched ({url})")


def prepared(dataset: Path, output: Path, *overrides: str, stderr: io.StringIO | None = None) -> Prepared:
    """``prepare`` as the collector calls it, with the model configuration given explicitly."""
    output.parent.mkdir(parents=True, exist_ok=True)
    base = [f"+input_jsonl_fpath={dataset}", f"+output_jsonl_fpath={output}", "+environment_config={m: 1}"]
    settings, raw = load_settings([*base, *overrides])
    return prepare(settings, raw, RunPaths.for_output(output), stderr or io.StringIO(), no_fetch)


def run_once(dataset: Path, output: Path, *overrides: str, results: int = 0) -> Prepared:
    """Prepare a run and save a completed result for its first ``results`` rollouts; the store is closed."""
    run = prepared(dataset, output, *overrides)
    for index in range(results):
        run.store.append_result(index, run.store.reserve(index), {"reward": 1.0})
    run.store.close()
    return run


URL = "+environment_server_url=http://127.0.0.1:9"


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_tasks(tmp_path / "d.jsonl", [{}, {}, {}, {}])


def files(folder: Path) -> dict[str, bytes]:
    """Every run file's bytes, the lock aside (each opener rewrites its holder line)."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and "lock" not in p.name}


def manifest_of(output: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(output.with_name(output.stem + "_manifest.json").read_text())
    return data


# --- identity ----------------------------------------------------------------------------------


def test_moving_one_of_several_servers_resumes_as_drift(dataset: Path, tmp_path: Path) -> None:
    """000: endpoint addresses are operational, one server of environment_server_urls too."""
    output = tmp_path / "out.jsonl"
    urls = "+environment_server_urls={arith: 'http://127.0.0.1:1', other: 'http://127.0.0.1:2'}"
    run_once(dataset, output, urls)
    moved = "+environment_server_urls={arith: 'http://127.0.0.1:1', other: 'http://127.0.0.1:3'}"
    stderr = io.StringIO()
    prepared(dataset, output, moved, "+resume_from_cache=true", stderr=stderr).store.close()
    assert "operational settings changed" in stderr.getvalue()
    assert "environment_server_urls.other" in stderr.getvalue()


def test_identical_experiments_at_two_outputs_share_a_config_digest(dataset: Path, tmp_path: Path) -> None:
    """config_digest is taken over the semantic identity only: output path and port are left out."""
    run_once(dataset, tmp_path / "a" / "out.jsonl", URL)
    run_once(dataset, tmp_path / "b" / "other.jsonl", "+environment_server_url=http://127.0.0.1:7")
    a, b = manifest_of(tmp_path / "a" / "out.jsonl"), manifest_of(tmp_path / "b" / "other.jsonl")
    assert a["config_digest"] == b["config_digest"] and a["run_id"] != b["run_id"]


# --- legacy import -------------------------------------------------------------------------------


def make_legacy(dataset: Path, output: Path, results: int) -> None:
    """A run of an older collector: outcomes and materialized inputs, no manifest or reservations."""
    run_once(dataset, output, URL, results=results)
    own = output.with_name(output.stem + "_gymslurm_inputs.jsonl")  # an older collector's tasks file
    own.replace(output.with_name(output.stem + "_materialized_inputs.jsonl"))
    for suffix in ("_manifest.json", "_reservations.bin", "_identity.json", "_coverage.json"):
        output.with_name(output.stem + suffix).unlink(missing_ok=True)
    rows = [{k: v for k, v in row.items() if k != "_ng_run_id"} for row in read_jsonl(output)]
    output.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))


def test_unsafe_import_reuses_the_saved_materialized_tasks(dataset: Path, tmp_path: Path) -> None:
    """000: the import "reuses the saved materialized tasks", not the dataset as it is now."""
    output = tmp_path / "out.jsonl"
    make_legacy(dataset, output, results=3)
    saved_inputs = output.with_name("out_materialized_inputs.jsonl").read_bytes()
    changed = write_tasks(tmp_path / "d.jsonl", [{}, {}, {}, {"b": 7}, {}])  # one changed, one added
    assert changed == dataset
    run = prepared(dataset, output, URL, "+resume_from_cache=true", "+allow_unsafe_resume=true")
    try:
        assert run.store.manifest.rollout_count == 4
        assert [state.pending for state in run.reconciliation.states] == [False, False, False, True]
        assert run.load_tasks()[3]["task_input"]["b"] == 1  # the saved input, not the changed one
    finally:
        run.store.close()
    assert output.with_name("out_materialized_inputs.jsonl").read_bytes() == saved_inputs


def test_resume_after_an_unsafe_import_still_needs_the_override(dataset: Path, tmp_path: Path) -> None:
    """000: after an import "future resumes continue to require the override"; with it they go on."""
    output = tmp_path / "out.jsonl"
    make_legacy(dataset, output, results=2)
    run_once(dataset, output, URL, "+resume_from_cache=true", "+allow_unsafe_resume=true")
    before = files(tmp_path)
    with pytest.raises(IdentityMismatchError, match=r"\+allow_unsafe_resume=true") as refused:
        prepared(dataset, output, URL, "+resume_from_cache=true")
    assert "identity_verified=false" in str(refused.value)
    assert files(tmp_path) == before
    run_once(dataset, output, URL, "+resume_from_cache=true", "+allow_unsafe_resume=true")


def test_resume_after_an_identity_override_still_needs_the_override(dataset: Path, tmp_path: Path) -> None:
    """An overridden identity is never verified again: a later plain resume is refused too."""
    output = tmp_path / "out.jsonl"
    run_once(dataset, output, URL, results=1)
    run_once(dataset, output, URL, "+limit=3", "+resume_from_cache=true", "+allow_unsafe_resume=true")
    assert manifest_of(output)["identity_source"] == "overridden"
    with pytest.raises(IdentityMismatchError, match=r"\+allow_unsafe_resume=true"):
        prepared(dataset, output, URL, "+limit=3", "+resume_from_cache=true")


# --- the retired draft attempt journal ---------------------------------------------------------


JournalSetup = Callable[[Path, Path], None]


def with_manifest(dataset: Path, output: Path) -> None:
    run_once(dataset, output, URL, results=1)


def journal_only(dataset: Path, output: Path) -> None:
    output.write_bytes(b"")


@pytest.mark.parametrize(
    "setup", [with_manifest, journal_only, make_legacy], ids=["manifest", "only", "legacy"]
)
@pytest.mark.parametrize("unsafe", [False, True])
def test_retired_attempt_journal_refuses_every_resume(
    dataset: Path, tmp_path: Path, setup: Any, unsafe: bool
) -> None:
    """000: a run with the retired <stem>_attempts.jsonl reports the format mismatch, even unsafe,
    and changes no byte (it is not dropped, nor taken for a partial initial cache)."""
    output = tmp_path / "out.jsonl"
    if setup is make_legacy:
        make_legacy(dataset, output, results=1)
    else:
        setup(dataset, output)
    journal = tmp_path / "out_attempts.jsonl"
    journal.write_bytes(b'{"rollout": 0, "attempt": 0}\n')
    before = files(tmp_path)
    unsafe_flag = ["+allow_unsafe_resume=true"] if unsafe else []
    with pytest.raises(ManifestError, match=r"out_attempts\.jsonl is the attempt journal of an earlier"):
        prepared(dataset, output, URL, "+resume_from_cache=true", *unsafe_flag)
    assert files(tmp_path) == before


def test_fresh_collection_replaces_a_retired_attempt_journal(dataset: Path, tmp_path: Path) -> None:
    """000: a non-resume collection replaces "any retired draft attempt journal", and says so."""
    output = tmp_path / "out.jsonl"
    journal = tmp_path / "out_attempts.jsonl"
    journal.write_bytes(b'{"rollout": 0, "attempt": 0}\n')
    stderr = io.StringIO()
    prepared(dataset, output, URL, stderr=stderr).store.close()
    assert not journal.exists() and "replacing the existing run" in stderr.getvalue()
    assert str(journal) in stderr.getvalue()


# --- a manifest without max_rollout_attempts -----------------------------------------------------


def test_manifest_without_attempt_limit_adopts_the_current_setting(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """000: an older draft manifest without max_rollout_attempts uses the current setting and records
    it on its first validated resume."""
    output = tmp_path / "out.jsonl"
    run_once(dataset, output, URL, results=1)
    manifest_path = output.with_name("out_manifest.json")
    data = manifest_of(output)
    del data["max_rollout_attempts"]
    manifest_path.write_text(json.dumps(data))
    monkeypatch.setenv(MAX_ATTEMPTS_ENV, "5")
    run = prepared(dataset, output, URL, "+resume_from_cache=true")
    run.store.close()
    assert run.reconciliation.policy.max_rollout_attempts == 5
    assert manifest_of(output)["max_rollout_attempts"] == 5


def test_refused_resume_does_not_record_the_adopted_limit(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit is recorded on a *validated* resume only: a refused one leaves the manifest as it was."""
    output = tmp_path / "out.jsonl"
    run_once(dataset, output, URL, results=1)
    manifest_path = output.with_name("out_manifest.json")
    data = manifest_of(output)
    del data["max_rollout_attempts"]
    manifest_path.write_text(json.dumps(data))
    before = manifest_path.read_bytes()
    with pytest.raises(IdentityMismatchError):
        prepared(dataset, output, URL, "+limit=2", "+resume_from_cache=true")
    assert manifest_path.read_bytes() == before


# --- an interrupted fallback fresh start --------------------------------------------------------


def test_interrupted_fallback_fresh_start_is_finished_by_the_next_resume(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """000: the partial-initial-cache fallback covers interruption during initial preparation: a resume
    that started fresh from nothing saved and was interrupted leaves no 'replacing' mark, so the next
    resume (a Slurm chain always resumes) starts fresh again and finishes."""
    output = tmp_path / "out.jsonl"
    output.with_name("out_materialized_inputs.jsonl").write_bytes(b"")  # part of an initial cache

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr("gymslurm.store.run_files.write_inputs", interrupted)
        with pytest.raises(KeyboardInterrupt):
            prepared(dataset, output, URL, "+resume_from_cache=true")
    assert not output.with_name("out_manifest.json").exists()
    stderr = io.StringIO()
    run = prepared(dataset, output, URL, "+resume_from_cache=true", stderr=stderr)
    run.store.close()
    assert "Skipping resume_from_cache" in stderr.getvalue()
    assert manifest_of(output)["state"] == "ready" and run.store.manifest.rollout_count == 4


def test_run_saved_with_a_whole_identity_digest_still_resumes(dataset: Path, tmp_path: Path) -> None:
    """A run saved before config_digest covered only the semantic identity (its digest is of the whole
    identity) still resumes: the saved identity is checked against either form."""
    from gymslurm.identity import identity_digest

    output = tmp_path / "out.jsonl"
    first = run_once(dataset, output, URL, results=1)
    saved = json.loads(output.with_name("out_identity.json").read_text())
    data = manifest_of(output)
    data["config_digest"] = identity_digest(saved)
    output.with_name("out_manifest.json").write_text(json.dumps(data))
    run = prepared(dataset, output, URL, "+resume_from_cache=true")
    run.store.close()
    assert run.store.manifest.run_id == first.store.manifest.run_id  # the same run, not a fresh one
    assert [state.pending for state in run.reconciliation.states] == [False, True, True, True]
    assert len(read_jsonl(output)) == 1  # the saved result is kept


# --- runs NeMo Gym 0.7.0 wrote (no manifest; its own materialized rows and unstamped results) -------


def nemo_gym_run(output: Path, rows: list[dict[str, Any]], done: list[tuple[int, int]]) -> None:
    """What NeMo Gym's collector leaves for ``num_repeats=2``: flat materialized rows, flat results."""
    materialized = [
        {**row, "_ng_task_index": t, "_ng_rollout_index": r} for t, row in enumerate(rows) for r in range(2)
    ]
    output.with_name(output.stem + "_materialized_inputs.jsonl").write_bytes(
        b"".join(orjson.dumps(row) + b"\n" for row in materialized)
    )
    results = [{**rows[t], "_ng_task_index": t, "_ng_rollout_index": r, "reward": 1.0} for t, r in done]
    output.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in results))


def test_a_nemo_gym_run_is_imported_with_nemo_gyms_rollouts(dataset: Path, tmp_path: Path) -> None:
    """NeMo Gym's materialized rows are one rollout each (ids <task>-<rollout>); results map by index."""
    output = tmp_path / "out.jsonl"
    nemo_gym_run(output, [{"q": "a"}, {"q": "b"}], done=[(0, 0), (1, 1)])
    unsafe = ("+resume_from_cache=true", "+allow_unsafe_resume=true")
    run = prepared(dataset, output, URL, "+num_repeats=2", *unsafe)
    try:
        assert run.store.rollout_ids() == ["0-0", "0-1", "1-0", "1-1"]
        assert [state.pending for state in run.reconciliation.states] == [False, True, True, False]
        assert run.load_tasks()[1]["task_input"] == {"q": "a"}
        assert run.store.manifest.identity_verified is False
    finally:
        run.store.close()


def test_a_nemo_gym_run_without_its_materialized_file_maps_results_to_the_dataset(
    dataset: Path, tmp_path: Path
) -> None:
    """Without NeMo Gym's materialized file the dataset's tasks are used; results map by task/repeat index."""
    output = tmp_path / "out.jsonl"
    nemo_gym_run(output, [{}, {}, {}, {}], done=[(0, 0), (2, 0)])
    output.with_name("out_materialized_inputs.jsonl").unlink()
    run = prepared(dataset, output, URL, "+resume_from_cache=true", "+allow_unsafe_resume=true")
    try:
        assert [state.pending for state in run.reconciliation.states] == [False, True, False, True]
    finally:
        run.store.close()
