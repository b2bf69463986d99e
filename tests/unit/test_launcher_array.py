"""Thousands of shards (docs/launcher.md, "Scale"): the first links as one job array, pure parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.errors import ConfigError
from gymslurm.launcher.ledger import Started, Submitted
from gymslurm.launcher.rundir import (
    ArrayRecord,
    RunDir,
    RunInfo,
    atomic_write,
    ensure_shard_input,
    shard_slice,
)
from gymslurm.launcher.settings import load_benchmark
from gymslurm.launcher.submit import array_indices, next_poll_s, render_scripts, split_dataset, use_array

INDEX_ROWS = [
    ("every shard, no throttle", list(range(1000)), None, "0-999"),
    ("every shard, throttled", list(range(1000)), 10, "0-999%10"),
    ("a resubmit of some shards", [9, 3, 4, 5, 12], None, "3-5,9,12"),
    ("one shard (a successor)", [7], None, "7"),
]


@pytest.mark.parametrize(("name", "shards", "throttle", "text"), INDEX_ROWS, ids=[r[0] for r in INDEX_ROWS])
def test_array_indices(name: str, shards: list[int], throttle: int | None, text: str) -> None:
    """--array lists the shards as ranges, with the %max_running throttle when set."""
    assert array_indices(shards, throttle) == text


def _settings(tmp_path: Path, *overrides: str):  # type: ignore[no-untyped-def]
    bench = tmp_path / "b.yaml"
    bench.write_text(f"dataset: {tmp_path / 'd.jsonl'}\nrun_root: {tmp_path / 'runs'}\n")
    return load_benchmark(str(bench), list(overrides))[0]


def test_slurm_runs_use_an_array_when_asked_local_runs_and_the_default_do_not(tmp_path: Path) -> None:
    """On Slurm the first links are one array with slurm.array=true (opt-in); never locally or by default."""
    assert use_array(_settings(tmp_path, "shards=1000", "slurm.array=true"), "slurm")
    assert not use_array(_settings(tmp_path, "shards=1000", "slurm.array=true"), "local")
    assert not use_array(_settings(tmp_path, "shards=1000"), "slurm")


def test_more_shards_than_an_array_holds_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """Above MaxArraySize the submission is refused, saying what to do."""
    with pytest.raises(ConfigError, match=r"shards=1002 is more than one job array holds.*slurm.array=false"):
        use_array(_settings(tmp_path, "shards=1002", "slurm.array=true"), "slurm")
    assert not (tmp_path / "runs").exists()


def test_an_array_run_has_one_link_script_for_every_shard(tmp_path: Path) -> None:
    """One scripts/links.sbatch (shard = $SLURM_ARRAY_TASK_ID, log named by the ledger's job id)."""
    run = RunDir(tmp_path / "runs" / "r")
    scripts = render_scripts(run, _settings(tmp_path, "shards=1000"), tmp_path, array=True)
    assert sorted(p.name for p in scripts) == ["aggregate.sbatch", "links.sbatch"]
    text = scripts[run.links_script]
    assert '--shard "$SLURM_ARRAY_TASK_ID"' in text
    assert f"#SBATCH --output={run.root}/logs/shard-%3a-%A_%a.out" in text


def test_array_run_writes_one_dataset_copy_and_each_link_cuts_its_slice(tmp_path: Path) -> None:
    """Submit writes one file instead of N; a shard's first link cuts the same slice submit would have."""
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("".join(f'{{"q": {i}}}\n' for i in range(10)))
    run = RunDir(tmp_path / "r")
    counts = split_dataset(dataset, run, 4, array=True)
    assert counts == [2, 3, 2, 3] and not run.shard_input(0).exists()
    eager = RunDir(tmp_path / "eager")
    split_dataset(dataset, eager, 4)
    for shard in range(4):
        assert ensure_shard_input(run, shard, 4).read_bytes() == eager.shard_input(shard).read_bytes()
    assert shard_slice([b"a\n", b"b\n", b"c\n"], 2, 1) == [b"b\n", b"c\n"]


def test_a_shard_of_an_array_run_begins_with_its_array_task(tmp_path: Path) -> None:
    """Readers see shard i's first link as <array>_<i> although submit wrote no ledger line for it."""
    run = RunDir(tmp_path / "r")
    array = ArrayRecord(job_id="162", shards=3, max_running=2, at="2026-12-01T00:00:00+00:00")
    assert run.chain_state(2, array).jobs == ["162_2"] and run.chain_state(2, None).jobs == []
    run.ledger(2).append(Started(job_id="162_2"))
    run.ledger(2).append(Submitted(job_id="170_2", after="162_2", by="162_2"))
    state = run.chain_state(2, array)
    assert state.jobs == ["162_2", "170_2"] and state.successor_of == {"162_2": "170_2"}


def test_array_json_round_trips(tmp_path: Path) -> None:
    """array.json reads back as written; a run without one was submitted link by link."""
    run = RunDir(tmp_path / "r")
    assert run.read_array() is None
    record = ArrayRecord(job_id="162", shards=3, max_running=None, at="t")
    atomic_write(run.array_path, record.model_dump_json().encode())
    assert run.read_array() == record


BACKOFF_ROWS = [
    ("nothing changed: wait longer", 1.0, False, 1.5),
    ("growth stops at 30 s", 25.0, False, 30.0),
    ("something changed: look again soon", 30.0, True, 1.0),
]


@pytest.mark.parametrize(
    ("name", "previous", "changed", "wait"), BACKOFF_ROWS, ids=[r[0] for r in BACKOFF_ROWS]
)
def test_wait_polls_with_backoff(name: str, previous: float, changed: bool, wait: float) -> None:
    """--wait polls with backoff, not every second."""
    assert next_poll_s(previous, changed) == wait


def test_run_info_records_array_and_accounting() -> None:
    """run.json says whether the first links are an array and whether Slurm keeps accounting."""
    info = RunInfo(name="r", benchmark="b", overrides=[], created_at="t", backend="slurm", shards=1,
                   workdir="/", output_stem="o", infra_retry_limit=3, max_walltime_s=None)  # fmt: skip
    assert (info.array, info.accounting) == (False, None)
