"""``RunDir.aggregation_enabled``: run.json's ``aggregation`` record (the fast path ``status`` takes)
and the saved benchmark.yaml (read for runs from before the record) give the same answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.launcher.settings import load_benchmark, split_secrets
from tests.run_info import run_info


def _saved_run(tmp_path: Path, overrides: list[str], recorded: bool) -> RunDir:
    """A run folder as submit saves it (benchmark.yaml: the composed, redacted benchmark), its
    run.json with submit's ``aggregation`` record, or without it (a run from before the record)."""
    tmp_path.mkdir()
    bench = tmp_path / "b.yaml"
    bench.write_text(f"name: agg\ndataset: {tmp_path / 'd.jsonl'}\nrun_root: {tmp_path / 'runs'}\n")
    settings, data = load_benchmark(str(bench), overrides)
    run = RunDir(tmp_path / "runs" / "r")
    clean, _ = split_secrets(data)
    atomic_write(run.config_path, OmegaConf.to_yaml(OmegaConf.create(clean)).encode())
    info = run_info(aggregation=settings.aggregation.enabled if recorded else None)
    atomic_write(run.info_path, info.model_dump_json().encode())
    return run


@pytest.mark.parametrize(
    ("overrides", "enabled"),
    [([], True), (["aggregation.enabled=false"], False), (["aggregation.enabled=true"], True)],
)
def test_run_json_record_and_saved_benchmark_answer_alike(
    tmp_path: Path, overrides: list[str], enabled: bool
) -> None:
    """A run whose benchmark leaves the aggregation on by default, turns it off or on: run.json's
    record and, without it, the saved benchmark.yaml both say whether the run aggregates, alike."""
    recorded = _saved_run(tmp_path / "new", overrides, recorded=True)
    older = _saved_run(tmp_path / "old", overrides, recorded=False)
    assert recorded.read_info().aggregation is enabled  # the fast path is the one taken
    assert older.read_info().aggregation is None
    assert recorded.aggregation_enabled() is enabled
    assert older.aggregation_enabled() is enabled
