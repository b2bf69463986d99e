"""report.html's pure parts: the timeline of links, faults survived, and the page around the data."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import orjson

from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.ledger import BudgetsRecord, DecisionRecord, Started, Submitted
from gymslurm.launcher.links import faults_survived, links_of
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.views.document import ReportData, ShardTimeline, SuiteRow
from gymslurm.launcher.views.report import refresh_report, render, report_data
from gymslurm.launcher.views.status import run_status
from gymslurm.site.local import LocalBackend
from gymslurm.store import RunPaths
from gymslurm.store.atomic import publish_json
from gymslurm.store.files import write_gymslurm_metrics
from tests.status_documents import document, one_shard_run, row


def _decided(
    job: str, decision: Decision, code: int | None, restart: int = 0, by: str | None = None
) -> DecisionRecord:
    return DecisionRecord(
        job_id=job,
        restart_count=restart,
        start="2026-12-01T10:00:00+00:00",
        end="2026-12-01T10:10:00+00:00",
        elapsed_s=600,
        slurm_state="RUNNING",
        exit_code=code,
        decision=decision,
        reason="why",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord.of(Budgets(1, 600, 0)),
        accounted_by=by,
    )


RECORDS = [
    Submitted(job_id="1"),
    Started(job_id="1", at="2026-12-01T10:00:00+00:00"),
    _decided("1", Decision.CONTINUE, None),
    Started(job_id="1", restart_count=1, at="2026-12-01T10:11:00+00:00"),
    _decided("1", Decision.RETRY, 1, restart=1),
    Started(job_id="2", at="2026-12-01T10:20:00+00:00"),
    _decided("2", Decision.CONTINUE, None, by="3"),
    Started(job_id="3", at="2026-12-01T10:30:00+00:00"),
]


def test_links_are_each_run_of_each_job_with_how_it_ended() -> None:
    """One link per run of a job (a requeue is a second run), the last one still running."""
    links = links_of(RECORDS)  # type: ignore[arg-type]
    assert [(link["job"], link["restart"], link["decision"]) for link in links] == [
        ("1", 0, "CONTINUE"),
        ("1", 1, "RETRY"),
        ("2", 0, "CONTINUE"),
        ("3", 0, None),
    ]
    assert links[-1]["end"] is None and links[-1]["reason"].startswith("running")


def test_faults_survived_count_a_lost_link_and_a_retry() -> None:
    """A run that died without a word is lost (no rerun of its job); a RETRY is a retry spent."""
    faults = faults_survived(RECORDS, links_of(RECORDS))  # type: ignore[arg-type]
    assert {k: n for k, n in faults.items() if n} == {"lost": 1, "retries_spent": 1}


def _data() -> ReportData:
    shard = row(
        0,
        "HEALTHY",
        why="w",
        job="3",
        job_state="RUNNING",
        jobs=3,
        last_exit=0,
        last_decision="CONTINUE",
        retries="1/3",
        walltime="30m00s/none",
        coverage="5/9 ok, 0 failed",
        expected=9,
        successful=5,
        in_flight=1,
    )
    status = document([shard], state="not submitted", run="r<1>")
    links = links_of(RECORDS)  # type: ignore[arg-type]
    timeline = ShardTimeline(shard=0, links=links, faults=faults_survived(RECORDS, links))  # type: ignore[arg-type]
    return ReportData(status=status, shards=[timeline], metrics=None, rewards=None)


def test_the_page_embeds_its_data_and_draws_one_bar_per_link() -> None:
    """Self-contained: the data is embedded (and parses back equal), no external URL, a bar per link."""
    data = _data()
    page = render(data, now=1796119800.0)
    embedded = re.search(r'<script type="application/json" id="gymslurm-report">(.*?)</script>', page, re.S)
    assert embedded and json.loads(embedded.group(1)) == json.loads(orjson.dumps(data))
    assert page.count('class="bar"') == 4 and "r&lt;1&gt;" in page
    assert not re.search(r'(src|href)="(https?:)?//', page), "no network resource"
    for table in ("shards", "coverage", "faults", "walltime", "links"):
        assert f'id="{table}"' in page


def test_the_report_shows_the_merged_outputs_aggregate_metrics(tmp_path: Path) -> None:
    """Once aggregation wrote NeMo Gym's aggregate-metrics list, the report shows its metrics."""
    run = one_shard_run(tmp_path / "run")
    merged = RunPaths.for_output(run.merged_output("rollouts"))
    merged.aggregate_metrics.parent.mkdir(parents=True)
    metrics = {"reward/mean": 0.75, "coverage/expected": 4}
    publish_json(
        merged.aggregate_metrics,
        [{"agent_ref": {"name": "a"}, "_ng_environment_server": "env", "agent_metrics": metrics}],
    )
    data = report_data(run, LocalBackend(run.local_dir), status=_data().status)
    assert data.metrics == metrics
    assert "not merged yet" not in render(data)


def test_without_the_servers_metrics_the_report_shows_gymslurms_own(tmp_path: Path) -> None:
    """A merge no server answered wrote only <stem>_gymslurm_metrics.json: the report shows those."""
    run = one_shard_run(tmp_path / "run")
    merged = RunPaths.for_output(run.merged_output("rollouts"))
    merged.gymslurm_metrics.parent.mkdir(parents=True)
    own = {"metrics": {"reward/mean": 0.5}, "metrics_source": "gymslurm"}
    write_gymslurm_metrics(merged.gymslurm_metrics, own)
    data = report_data(run, LocalBackend(run.local_dir), status=_data().status)
    assert data.metrics == {"reward/mean": 0.5}


def test_a_shard_whose_first_link_has_not_started_draws_no_lane_and_is_counted() -> None:
    """10,000 shards mostly waiting: the timeline draws lanes only for shards with links and says how many
    are left out, instead of thousands of empty lanes."""
    data = _data()
    waiting = ShardTimeline(shard=1, links=[], faults=faults_survived([], []))
    page = render(replace(data, shards=[*data.shards, waiting]), now=1796119800.0)
    assert page.count('class="lane"') == 1 and "1 shard(s) not drawn: no link started yet" in page


def test_table_cells_are_escaped_even_when_one_holds_a_separator_character() -> None:
    """The cells are escaped in one pass over the joined table; a reason holding the separator itself
    falls back to cell by cell, so no cell is ever split or left unescaped."""
    data = _data()
    links = data.shards[0].links
    links[0]["reason"] = "a\x1eb <c>"
    page = render(data, now=1796119800.0)
    assert "<td>a\x1eb &lt;c&gt;</td>" in page
    links[0]["reason"] = "plain <d>"
    assert "<td>plain &lt;d&gt;</td>" in render(data, now=1796119800.0)


def _one_shard_run(tmp_path: Path) -> RunDir:
    run = one_shard_run(tmp_path / "run")
    for record in RECORDS:
        run.ledger(0).append(record)  # type: ignore[arg-type]
    return run


def test_status_leaves_a_page_that_changed_only_with_the_clock_and_rewrites_one_that_changed(
    tmp_path: Path,
) -> None:
    """Two looks a minute apart with nothing new: the page is left as it was (it says when it was
    written); a new record in a ledger: the page is rewritten."""
    run = _one_shard_run(tmp_path)
    backend = LocalBackend(run.local_dir)
    path = refresh_report(run, backend, run_status(run, backend, now=1796119800.0))
    assert path is not None
    first = path.read_bytes()
    refresh_report(run, backend, run_status(run, backend, now=1796119860.0))
    assert path.read_bytes() == first
    run.ledger(0).append(_decided("3", Decision.DONE, 0))
    refresh_report(run, backend, run_status(run, backend, now=1796119920.0))
    assert path.read_bytes() != first and b"DONE" in path.read_bytes()


def test_a_suite_runs_page_lists_each_benchmarks_headline_with_its_uncertainty_and_count() -> None:
    """A suite run's page has a table of its benchmarks: the headline, its standard error and 95%
    interval over tasks, the tasks and rows it rests on, the ETA and the GPU-hours share; a
    benchmark not merged yet shows none."""
    score = {"name": "arith", "metric": "reward", "value": 0.775, "stderr": 0.067, "ci95": [0.62, 0.9]}
    row = SuiteRow(
        benchmark="arith",
        shards=1,
        verdict="DONE",
        outcomes=40,
        expected=40,
        eta_s=0.0,
        busy_s=0.0,
        headline={**score, "tasks": 40, "rows": 80, "verdict": "DONE"},
        run="r",
        gpu_hours=1.5,
    )
    later = replace(row, benchmark="later", verdict="RUNNING", headline=None, eta_s=125.0, gpu_hours=None)
    data = replace(_data(), suite=[row, later])
    page = render(data, now=1796119800.0)
    table = re.search(r'<table id="suite">(.*?)</table>', page, re.S)
    assert table is not None
    cells = re.findall(r"<td>(.*?)</td>", table.group(1))
    assert cells[:10] == [
        "arith",
        "DONE",
        "40/40",
        "reward 0.775",
        "0.067",
        "[0.620, 0.900]",
        "40",
        "80",
        "0s",
        "1.50 GPU-h",
    ]
    assert cells[10:] == ["later", "RUNNING", "40/40", "-", "-", "-", "-", "-", "2m05s", "-"]
    assert 'id="suite"' not in render(_data(), now=1796119800.0)
