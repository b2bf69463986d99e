"""The report and status tell a run's result: final metrics, faults by kind, GPU-hours, charts, sharing."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import BudgetsRecord, DecisionRecord, Started, Submitted
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.launcher.views.report import write_report
from gymslurm.launcher.views.status import run_status
from gymslurm.launcher.views.table import print_table
from gymslurm.site.local import LocalBackend
from gymslurm.store.files import write_gymslurm_metrics
from gymslurm.store.paths import RunPaths
from tests.run_info import run_info

METRICS = {"mean/reward": 0.75, "coverage/measured": 40, "coverage/expected": 40}


def _decision(  # noqa: PLR0917
    job: str,
    start: str,
    end: str,
    state: str,
    code: int | None,
    decision: Decision,
    restart: int = 0,
    outcomes: tuple[int, int] = (0, 10),
) -> DecisionRecord:
    return DecisionRecord(
        job_id=job,
        restart_count=restart,
        start=start,
        end=end,
        elapsed_s=1800,
        slurm_state=state,
        exit_code=code,
        decision=decision,
        reason="why",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord(),
        outcomes_before=outcomes[0],
        outcomes=outcomes[1],
        idle_s=600,
    )


def make_run(tmp_path: Path, share: str = "none", merged: bool = True, budget: float | None = None) -> RunDir:
    """A finished one-shard run: a scancel, a requeue, then DONE, 4 GPUs a link; merged if asked."""
    root = tmp_path / "runs" / "bench-1"
    root.mkdir(parents=True, mode=0o700)
    run = RunDir(root)
    info = run_info(
        name=run.name,
        benchmark="bench",
        created_at="2026-12-01T10:00:00+00:00",
        backend="local",
        workdir=str(tmp_path),
        gpus=4,
        gpu_budget=budget,
        report_share=share,
    )  # type: ignore[arg-type]
    atomic_write(run.info_path, info.model_dump_json().encode())
    ledger = run.ledger(0)
    times = [
        "2026-12-01T10:00:00+00:00",
        "2026-12-01T10:30:00+00:00",
        "2026-12-01T11:00:00+00:00",
        "2026-12-01T11:30:00+00:00",
        "2026-12-01T12:00:00+00:00",
        "2026-12-01T12:30:00+00:00",
    ]
    ledger.append(Submitted(job_id="1"))
    ledger.append(Started(job_id="1", at=times[0], gpus=4))
    ledger.append(
        _decision("1", times[0], times[1], "SIGNALLED:SIGTERM", 75, Decision.CONTINUE, outcomes=(0, 10))
    )
    ledger.append(Submitted(job_id="2", after="1"))
    ledger.append(Started(job_id="2", at=times[2], gpus=4))
    ledger.append(
        _decision("2", times[2], times[3], "SIGNALLED:SIGTERM", 75, Decision.CONTINUE, outcomes=(10, 20))
    )
    ledger.append(Started(job_id="2", restart_count=1, at=times[4], gpus=4))
    ledger.append(
        _decision("2", times[4], times[5], "RUNNING", 0, Decision.DONE, restart=1, outcomes=(20, 40))
    )
    if merged:
        paths = RunPaths.for_output(run.merged_output("rollouts"))
        paths.folder.mkdir(parents=True)
        write_gymslurm_metrics(
            paths.gymslurm_metrics, {"metrics": METRICS, "metrics_source": "gymslurm", "written_at": times[5]}
        )
        paths.results.write_bytes(b'{"reward": 1.0, "task_id": {"taskset": "arith"}}\n')
        from gymslurm.store.rewards import write_reward_histogram

        write_reward_histogram(paths)
    return run


def _page(run: RunDir) -> str:
    return write_report(run, LocalBackend(run.local_dir)).read_text()


def test_the_report_of_a_merged_run_shows_its_final_metrics(tmp_path: Path) -> None:
    """The merged metrics (a list in NeMo Gym's file) are on the page, not "not merged yet"."""
    page = _page(make_run(tmp_path))
    assert "not merged yet" not in page
    assert re.search(r"<td>mean/reward</td><td>0.75</td>", page)
    assert "result: mean/reward 0.75" in page


def test_before_the_merge_the_report_says_so(tmp_path: Path) -> None:
    """No merged metrics yet: the page says the aggregation writes them."""
    assert "not merged yet" in _page(make_run(tmp_path, merged=False))


def test_status_carries_final_metrics_gpu_hours_and_faults(tmp_path: Path) -> None:
    """The status document (status --json) has the final metrics, GPU-hours and interruptions by kind."""
    run = make_run(tmp_path, budget=20.0)
    doc = run_status(run, LocalBackend(run.local_dir))
    assert doc.final_metrics is not None and doc.final_metrics["mean/reward"] == 0.75
    summary = doc.summary
    assert summary.gpu_hours == pytest.approx(3 * 4 * 0.5)  # three links of 4 GPUs for 30 minutes
    assert summary.gpu_hours_idle == pytest.approx(3 * 4 * 600 / 3600)
    assert summary.gpu_budget == 20.0 and summary.budget_fraction == pytest.approx(0.3)
    assert {k: n for k, n in summary.faults.items() if n} == {"cancelled": 1, "requeued": 1}
    assert doc.shards[0].gpu_text == "6.00 GPU-h"


def test_the_status_table_prints_the_result_and_the_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Human units: GPU-hours, the budget's share, faults by kind, the final metrics."""
    run = make_run(tmp_path, budget=20.0)
    print_table(run_status(run, LocalBackend(run.local_dir)))
    out = capsys.readouterr().out
    assert "GPU-hours: 6.00 GPU-h allocated (2.00 GPU-h idle), budget 20 GPU-h (30 % used)" in out
    assert "faults survived: requeued 1, cancelled 1" in out
    assert "final metrics: mean/reward 0.75" in out


def test_the_report_draws_inline_svg_with_a_mark_per_interruption(tmp_path: Path) -> None:
    """Coverage, rate, GPU-hours, rewards as inline SVG; a dashed mark per interruption; no outside file."""
    page = _page(make_run(tmp_path))
    for chart in ("chart-coverage", "chart-rate", "chart-gpu", "chart-rewards"):
        assert f'<svg id="{chart}"' in page, chart
    assert page.count('class="interruption"') == 2
    assert 'id="faults-total">faults survived: requeued 1, cancelled 1<' in page
    assert not re.search(r'(src|href)="(https?:)?//', page) and "<script src" not in page


def test_report_share_group_opens_the_page_alone_to_the_group(tmp_path: Path) -> None:
    """report.share: group: report.html 0640, the run folder 0710 (no listing), every other file 0600."""
    run = make_run(tmp_path, share="group")
    path = write_report(run, LocalBackend(run.local_dir))
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert stat.S_IMODE(run.root.stat().st_mode) == 0o710
    assert stat.S_IMODE(run.info_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(run.ledger(0).path.stat().st_mode) == 0o600


def test_by_default_the_report_is_the_owners_alone(tmp_path: Path) -> None:
    """Without report.share the page is 0600 in a 0700 folder."""
    run = make_run(tmp_path)
    path = write_report(run, LocalBackend(run.local_dir))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(run.root.stat().st_mode) == 0o700


def test_status_json_leaves_the_page_and_the_table_rewrites_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status --json` (what scripts poll) does not render report.html; `status` (a person's look) does."""
    from gymslurm.commands.status import main

    run = make_run(tmp_path)
    page = run.root / "report.html"
    assert main([str(run.root), "--json"]) == 0
    assert not page.exists()
    assert main([str(run.root)]) == 0
    assert page.exists()
    capsys.readouterr()


def test_the_reports_links_table_gives_each_links_gpus_and_gpu_hours(tmp_path: Path) -> None:
    """Every link's row has its GPUs and GPU-hours: three links of 4 GPUs for 30 minutes, 2 GPU-h each."""
    page = _page(make_run(tmp_path))
    links = page.split('<table id="links">', 1)[1].split("</table>", 1)[0]
    assert "<th>GPUs</th><th>GPU-h</th><th>idle GPU-h</th>" in links
    assert links.count("<td>4</td><td>2.00 GPU-h</td>") == 3, links
