"""``summary.json`` (issue 23: run.json's successor): the job that ends a run writes how it ended and
what it cost, and its figures are ``status --json``'s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymslurm.launcher.run_cost import read_run_summary
from gymslurm.launcher.rundir import RunDir
from tests.e2e.launcher_chains_helpers import gymslurm, only_run, status, wait_until_final, write_benchmark

pytestmark = pytest.mark.e2e


def _finished(tmp_path: Path, aggregation: bool) -> tuple[Path, dict[str, object]]:
    steps = [{"exit": 75, "progress": 40}, {"exit": 0, "progress": 60}]
    extra = "slurm:\n  gpus: 2\n" + ("" if aggregation else "aggregation:\n  enabled: false\n")
    bench = write_benchmark(tmp_path, steps, extra)
    gymslurm("submit", str(bench), "--backend", "local", "shards=2")
    run = only_run(tmp_path)
    wait_until_final(run, aggregation=aggregation)
    return run, status(run)


@pytest.mark.parametrize("aggregation", [True, False], ids=["by the aggregation", "by the last link"])
def test_the_job_that_ends_a_run_writes_its_summary_with_status_figures(
    tmp_path: Path, aggregation: bool
) -> None:
    """Two shards of two links each (2 GPUs per link, declared): summary.json says both DONE, their
    100 rollouts each, and the GPU-hours status says, per shard and for the run."""
    run, report = _finished(tmp_path, aggregation)
    summary = read_run_summary(RunDir(run))
    assert summary is not None, sorted(p.name for p in run.iterdir())
    assert summary.verdicts == {"DONE": 2}
    assert summary.rollouts["successful"] == 200 and summary.rollouts["expected"] == 200
    assert [s.links for s in summary.shards] == [2, 2]
    for shard in summary.shards:  # each link's GPU-hours, summing to the shard's
        assert [link["gpus"] for link in shard.link_costs] == [2, 2]
        assert sum(link["gpu_hours"] for link in shard.link_costs) == pytest.approx(shard.gpu_hours, abs=1e-3)
    assert ("aggregation job" in summary.written_by) is aggregation, summary.written_by
    assert (summary.aggregation is not None) is aggregation
    shards = report["shards"]  # type: ignore[index]
    for row, shard in zip(shards, summary.shards, strict=True):
        assert shard.gpu_hours == pytest.approx(row["gpu_hours"], abs=1e-3) and shard.gpu_hours > 0
    assert summary.cost["gpu_hours"] == pytest.approx(report["summary"]["gpu_hours"], abs=2e-3)  # type: ignore[index]
    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk["format_version"] == 1 and (run / "summary.json").stat().st_mode & 0o077 == 0


def test_a_summary_of_another_version_is_refused_by_name(tmp_path: Path) -> None:
    """A summary.json of a version this gymslurm does not read: the error names the file and the way out."""
    from gymslurm.errors import StoreError

    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    (run.root / "summary.json").write_text('{"format_version": 9}')
    with pytest.raises(StoreError, match=r"summary.json.*version 9.*move it aside"):
        read_run_summary(run)


def test_status_of_one_shard_lists_each_links_gpu_hours(tmp_path: Path) -> None:
    """``status RUN --shard 1``: that shard alone, each link with its GPUs and GPU-hours (allocated
    and idle), summing to the shard's; a shard the run does not have is refused by number."""
    run, _ = _finished(tmp_path, aggregation=False)
    report = json.loads(gymslurm("status", str(run), "--shard", "1", "--json").stdout)
    (row,) = report["shards"]
    assert row["shard"] == 1 and [link["gpus"] for link in row["links"]] == [2, 2]
    assert sum(link["gpu_hours"] for link in row["links"]) == pytest.approx(row["gpu_hours"], abs=1e-3)
    assert all(link["gpu_hours"] > 0 and link["decision"] for link in row["links"])
    text = gymslurm("status", str(run), "--shard", "1").stdout
    assert "shard 1 links:" in text and text.count(" 2 GPUs, ") == 2, text
    refused = gymslurm("status", str(run), "--shard", "5", check=False)
    assert refused.returncode == 2 and "has shards 0..1, not 5" in refused.stderr
