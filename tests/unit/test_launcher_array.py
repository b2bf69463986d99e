"""Thousands of shards (docs/launcher.md, "Scale"): the first links as one job array, pure parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.commands.new_run import render_scripts, split_dataset
from gymslurm.commands.wait import next_poll_s
from gymslurm.errors import ConfigError
from gymslurm.job.first_links import array_indices
from gymslurm.launcher.ledger import Started, Submitted
from gymslurm.launcher.rundir import (
    ArrayRecord,
    RunDir,
    atomic_write,
    ensure_shard_input,
    shard_slice,
)
from gymslurm.launcher.settings import load_benchmark
from gymslurm.site.arrays import plan_arrays
from tests.run_info import run_info

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


@pytest.mark.parametrize("value", ["true", "false"])
def test_the_retired_slurm_array_knob_is_refused_by_name(tmp_path: Path, value: str) -> None:
    """slurm.array is no longer a setting (every Slurm run is arrays): a benchmark or an override that
    sets it is refused naming the file, the key, its value and what to do, not as an unknown key."""
    with pytest.raises(
        ConfigError,
        match=r"b\.yaml is invalid: slurm: 'array' \((True|False)\) is no longer a setting.*"
        r"MaxArraySize.*remove 'array' from the benchmark's slurm section",
    ):
        _settings(tmp_path, f"slurm.array={value}")
    bench = tmp_path / "b.yaml"
    bench.write_text(bench.read_text() + f"slurm:\n  array: {value}\n")
    with pytest.raises(ConfigError, match=r"'array' \((True|False)\) is no longer a setting"):
        load_benchmark(str(bench), [])


def test_a_run_saved_with_slurm_array_true_still_loads(tmp_path: Path) -> None:
    """A run submitted before the knob was retired saved slurm.array: true in its benchmark.yaml; its
    links and resubmits still load it (true is what every run does now)."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.config_path.write_text(f"dataset: {tmp_path / 'd.jsonl'}\nname: b\nslurm:\n  array: true\n")
    assert run.load_settings({}).slurm.max_running is None


def test_shards_past_max_array_size_are_split_over_arrays() -> None:
    """10,000 shards at MaxArraySize 1001 are 10 arrays, task ids 0..1000 each, the last one short."""
    plan = plan_arrays(10_000, {"MaxArraySize": 1001, "MaxJobCount": 100_000}, None)
    assert len(plan.parts) == 10 and plan.parts[0] == (0, 1001) and plan.parts[-1] == (9009, 991)
    assert sum(size for _, size in plan.parts) == 10_000 and all(size <= 1001 for _, size in plan.parts)
    assert plan.throttle is None and plan.note is None


def test_a_plan_past_max_job_count_is_throttled_to_fit() -> None:
    """MaxJobCount counts every array task (the sandbox refused the tenth array of 10,000 shards at
    10000): 4,000 shards (8,000 tasks with their spares) at 10,000 are throttled so that
    2 x shards + arrays x N + 2 fits."""
    plan = plan_arrays(4_000, {"MaxArraySize": 1001, "MaxJobCount": 10_000}, None, lookahead=2)
    assert plan.throttle == (10_000 - 8_000 - 2) // 4 and plan.footprint <= 10_000
    assert plan.note is not None and "MaxJobCount = 10000" in plan.note


def test_the_footprint_counts_the_lookahead_behind_each_running_chain() -> None:
    """slurm.lookahead 2: a shard not started holds its first link and its spare, a running chain its
    link and the two queued behind it, the aggregation two: 3,400 shards unthrottled would hold
    3 x 3,400 + 2 = 10,202 > 10,000 records (though 2 x shards + 1 fits), so the plan throttles."""
    limits = {"MaxArraySize": 1001, "MaxJobCount": 10_000}
    plan = plan_arrays(3_400, limits, None, lookahead=2)
    assert plan.throttle == (10_000 - 2 * 3_400 - 2) // 4 and plan.footprint <= 10_000
    assert plan_arrays(3_400, limits, None, lookahead=1).throttle is None


def test_max_running_is_shared_by_the_arrays() -> None:
    """slurm.max_running=40 over 10 arrays: %4 each."""
    assert plan_arrays(10_000, {"MaxArraySize": 1001, "MaxJobCount": 100_000}, 40).throttle == 4


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        ({"MaxArraySize": 0}, "MaxArraySize = 0"),
        ({"MaxArraySize": 1001, "MaxJobCount": 10_000}, "MaxJobCount = 10000"),
        ({"MaxArraySize": 1001, "MaxJobCount": 100_000, "MaxSubmitJobs": 5000}, "MaxSubmitJobs = 5000"),
    ],
)
def test_a_plan_that_cannot_fit_is_refused_naming_the_limit(limits: dict[str, int], named: str) -> None:
    """No arrays at all, no room for one link per array, or more tasks than MaxSubmitJobs: refused."""
    with pytest.raises(ConfigError, match=named):
        plan_arrays(10_000, limits, None)


def test_an_array_run_has_one_link_script_per_array(tmp_path: Path) -> None:
    """scripts/links.sbatch for shards 0..1000 (shard = task id), links-1001.sbatch for the next range
    (shard = 1001 + task id), each log named by the ledger's job id."""
    run = RunDir(tmp_path / "runs" / "r")
    plan = plan_arrays(1500, {"MaxArraySize": 1001}, None)
    scripts = render_scripts(run, _settings(tmp_path, "shards=1500"), tmp_path, plan)
    assert sorted(p.name for p in scripts) == ["aggregate.sbatch", "links-1001.sbatch", "links.sbatch"]
    text = scripts[run.links_script]
    assert '--shard "$SLURM_ARRAY_TASK_ID"' in text
    assert f"#SBATCH --output={run.root}/logs/shard-%3a-%A_%a.out" in text
    later = scripts[run.links_script_for(1001)]
    assert '--shard "$((1001 + SLURM_ARRAY_TASK_ID))"' in later
    assert f"#SBATCH --output={run.root}/logs/shard-1001+%a-%A_%a.out" in later


def test_a_shard_past_the_first_array_begins_with_its_own_array_task(tmp_path: Path) -> None:
    """Shard 1500 of arrays at base 0 and 1001 is task 499 of the second array; a successor is task 499
    of a one-task array of links-1001.sbatch."""
    from gymslurm.launcher.rundir import ArrayPart

    record = ArrayRecord(
        job_id="10",
        shards=2000,
        max_running=None,
        at="t",
        chunk=1001,
        parts=[ArrayPart(job_id="10", base=0, size=1001), ArrayPart(job_id="11", base=1001, size=999)],
    )
    assert (record.task(0), record.task(1000), record.task(1001), record.task(1500)) == (
        "10_0",
        "10_1000",
        "11_0",
        "11_499",
    )
    assert record.base(1500) == 1001 and record.base(7) == 0
    old = ArrayRecord(job_id="162", shards=3, max_running=None, at="t")  # written before parts existed
    assert (old.task(2), old.base(2)) == ("162_2", 0)


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
    info = run_info(output_stem="o")
    assert (info.array, info.accounting) == (False, None)


def test_a_shard_whose_array_was_never_queued_has_no_first_link(tmp_path: Path) -> None:
    """submit died after its first array: array.json lists it alone, and shard 1 has no job (STALLED)."""
    from gymslurm.launcher.rundir import ArrayPart

    record = ArrayRecord(
        job_id="10",
        shards=3,
        max_running=None,
        at="t",
        chunk=1,
        parts=[ArrayPart(job_id="10", base=0, size=1)],
    )
    run = RunDir(tmp_path / "r")
    assert run.chain_state(0, record).jobs == ["10_0"]
    assert record.task(1) is None and run.chain_state(1, record).jobs == []


def test_slurm_array_size_caps_the_shards_per_array() -> None:
    """slurm.array_size=1 below MaxArraySize: one array per shard."""
    plan = plan_arrays(3, {"MaxArraySize": 1001}, None, array_size=1)
    assert (plan.chunk, plan.parts) == (1, [(0, 1), (1, 1), (2, 1)])
