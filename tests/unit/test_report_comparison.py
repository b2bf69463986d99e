"""``gymslurm report RUN --baseline OTHER``: the report shows compare's comparison (docs/compare.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymslurm.commands import report
from gymslurm.errors import GymslurmError
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.views.charts import flips_text
from gymslurm.launcher.views.report import write_report
from gymslurm.site.local import LocalBackend
from gymslurm.store.comparison_file import comparison_path, read_comparison
from gymslurm.store.paths import RunPaths
from tests.unit.test_launcher_report_result import make_run


def scored_run(folder: Path, passes: int, tasks: int = 40) -> Path:
    """A finished run (no server started) whose merged output passes the first ``passes`` tasks."""
    run = make_run(folder)
    rows = [
        {
            "_ng_run_id": folder.name,
            "_ng_rollout_id": f"arith-{task}",
            "task_id": {"taskset": "arith", "task_id": str(task)},
            "reward": float(task < passes),
        }
        for task in range(tasks)
    ]
    results = RunPaths.for_output(run.merged_output("rollouts")).results
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run.root


def test_report_with_a_baseline_shows_the_comparison_and_keeps_it(tmp_path: Path) -> None:
    """The page gets compare's table and chart (delta, interval, flips); a report rewritten later (as
    ``status`` does) still shows it, read back from comparison.json, not computed again."""
    baseline, candidate = scored_run(tmp_path / "a", 30), scored_run(tmp_path / "b", 18)
    assert report.main([str(candidate), "--baseline", str(baseline)]) == 0
    page = (candidate / "report.html").read_text()
    assert 'id="compared"' in page and '<svg id="chart-compare"' in page and 'class="interval"' in page
    assert "↓12 ↑0" in page  # 12 tasks went from pass to fail, none back
    assert "regressed" in page
    document = read_comparison(candidate)
    assert document is not None and document.candidate == candidate.name
    assert document.benchmarks[0].delta == pytest.approx(-0.3)
    later = write_report(RunDir(candidate), LocalBackend(candidate / "local"))
    assert 'id="compared"' in later.read_text()


def test_a_report_without_a_baseline_has_no_comparison(tmp_path: Path) -> None:
    """No --baseline, no comparison.json: the page has no comparison section."""
    run = scored_run(tmp_path / "a", 30)
    assert report.main([str(run)]) == 0
    assert 'id="compared"' not in (run / "report.html").read_text()
    assert not comparison_path(run).exists()


def test_a_baseline_that_is_not_a_run_changes_nothing(tmp_path: Path) -> None:
    """A baseline that cannot be read is an error before anything is written."""
    run = scored_run(tmp_path / "a", 30)
    with pytest.raises(GymslurmError):
        report.main([str(run), "--baseline", str(tmp_path / "nowhere"), "--run-root", str(tmp_path)])
    assert not comparison_path(run).exists() and not (run / "report.html").exists()


@pytest.mark.parametrize(
    ("flips", "text"),
    [
        ({"mode": "binary", "pass_to_fail": [{}, {}], "fail_to_pass": [{}]}, "↓2 ↑1"),
        ({"mode": "continuous", "changed": [{}] * 5}, "5 changed"),
        ({"mode": "unavailable"}, ""),
    ],
)
def test_flips_text(flips: dict[str, object], text: str) -> None:
    """The chart's flips column: ↓ pass → fail and ↑ fail → pass, or how many tasks moved (table)."""
    assert flips_text(flips) == text
