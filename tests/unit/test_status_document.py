"""The status document (`status --json`, schema gymslurm.status version 1) and the report's data: their
field sets pinned, key for key and in order, and the one vocabulary of verdicts they speak."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import orjson
import pytest

from gymslurm.errors import ConfigError
from gymslurm.formats import FORMATS
from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.ledger import FINISHED, BudgetsRecord, DecisionRecord, Started, Submitted
from gymslurm.launcher.rundir import ArrayRecord, RunDir, RunInfo, atomic_write
from gymslurm.launcher.verdicts import DECISION_COLOURS, LOOKS, RUNNING_LINK, VERDICT_OF_STOP, ChainVerdict
from gymslurm.launcher.views.document import ShardRow, SuiteRow, status_json, with_suite
from gymslurm.launcher.views.report import _CLOCK_SHARD, report_data
from gymslurm.launcher.views.status import run_status
from gymslurm.launcher.views.table import COLUMNS
from gymslurm.site.local import LocalBackend

ROW = [
    "shard",
    "verdict",
    "why",
    "job",
    "job_state",
    "successor",
    "successor_state",
    "jobs",
    "last_exit",
    "collector_exit",
    "last_decision",
    "retries",
    "walltime",
    "walltime_used_s",
    "walltime_budget_s",
    "walltime_cap_s",
    "coverage",
    "expected",
    "successful",
    "failed",
    "omitted",
    "in_flight",
    "live",
    "rate_per_s",
    "eta_s",
    "eta",
    "heartbeat_age_s",
    "log",
    "server_logs",
    "failed_by_class",
    "server_restarts",
    "injected",
    "interrupted",
    "gpu_hours",
    "gpu_hours_idle",
    "gpu_hours_slurm",
    "gpu_text",
    "faults",
    "excluded_nodes",
]
DOCUMENT = [
    "schema",
    "version",
    "run",
    "path",
    "backend",
    "benchmark",
    "generated_at",
    "summary",
    "shards",
    "aggregation",
    "final_metrics",
    "final_metrics_problem",
    "queries",
]
SUMMARY = [
    "expected",
    "successful",
    "failed",
    "omitted",
    "interrupted",
    "shards",
    "counted_shards",
    "rate_per_s",
    "eta_s",
    "eta",
    "failed_by_class",
    "verdicts",
    "walltime_used_s",
    "gpu_hours",
    "gpu_hours_idle",
    "gpu_hours_slurm",
    "slurm_accounting",
    "gpu_budget",
    "budget_fraction",
    "budget_warning",
    "faults",
]
AGGREGATION = ["job", "state", "finished", "stalled", "log"]
LINK = [
    "job",
    "restart",
    "start",
    "end",
    "elapsed_s",
    "gpus",
    "decision",
    "slurm_state",
    "gpu_hours",
    "gpu_hours_idle",
]
REPORT = ["schema", "version", "status", "shards", "metrics", "rewards", "suite", "comparison"]
SUITE = [
    "benchmark",
    "shards",
    "verdict",
    "outcomes",
    "expected",
    "eta_s",
    "busy_s",
    "headline",
    "run",
    "gpu_hours",
]


def _run(tmp_path: Path) -> RunDir:
    """A local run of one shard: one link decided CONTINUE, the next running."""
    run = RunDir(tmp_path / "run")
    info = RunInfo(
        name="r",
        benchmark="b",
        overrides=[],
        created_at="2026-12-01T10:00:00+00:00",
        backend="local",
        shards=1,
        workdir="/",
        output_stem="rollouts",
        infra_retry_limit=3,
        max_walltime_s=3600.0,
    )
    atomic_write(run.info_path, info.model_dump_json().encode())
    decided = DecisionRecord(
        job_id="1",
        start="2026-12-01T10:00:00+00:00",
        end="2026-12-01T10:10:00+00:00",
        elapsed_s=600,
        slurm_state="RUNNING",
        exit_code=75,
        decision=Decision.CONTINUE,
        reason="why",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord.of(Budgets(1, 600, 0)),
    )
    for record in (Submitted(job_id="1"), Started(job_id="1", at=decided.start), decided):
        run.ledger(0).append(record)
    run.ledger(0).append(Submitted(job_id="2", after="1"))
    return run


def test_the_status_document_has_exactly_its_version_1_fields_in_order(tmp_path: Path) -> None:
    """`status --json` of version 1 holds these keys, in this order, at every level: a consumer's parse
    of today's document reads tomorrow's (fields are only added, at the end, with the version kept)."""
    run = _run(tmp_path)
    document = json.loads(status_json(run_status(run, LocalBackend(run.local_dir), now=1796119800.0)))
    assert (document["schema"], document["version"]) == ("gymslurm.status", 1)
    assert list(document) == DOCUMENT
    assert list(document["summary"]) == SUMMARY
    assert [list(row) for row in document["shards"]] == [ROW]
    assert list(document["aggregation"]) == AGGREGATION


def test_status_of_one_shard_adds_its_links_after_the_row(tmp_path: Path) -> None:
    """`status --shard N --json`: the row's fields, then `links` (each with its own fields) and Slurm's
    figure per job."""
    run = _run(tmp_path)
    document = json.loads(status_json(run_status(run, LocalBackend(run.local_dir), shard=0)))
    (row,) = document["shards"]
    assert list(row) == [*ROW, "links", "gpu_hours_slurm_by_job"]
    assert [list(link) for link in row["links"]] == [LINK]


def test_a_suite_runs_document_adds_one_row_per_benchmark_after_the_rest(tmp_path: Path) -> None:
    """A suite run (docs/suites.md): the run's document, then `suite`, each benchmark with its fields."""
    run = _run(tmp_path)
    row = SuiteRow(
        benchmark="a",
        shards=1,
        verdict="DONE",
        outcomes=4,
        expected=4,
        eta_s=None,
        busy_s=0.0,
        headline=None,
        run="/r/a",
    )
    plain = run_status(run, LocalBackend(run.local_dir), now=1796119800.0)
    assert with_suite(plain, []) is plain
    document = json.loads(status_json(with_suite(plain, [row])))
    assert list(document) == [*DOCUMENT, "suite"]
    assert [list(r) for r in document["suite"]] == [SUITE]


def test_the_reports_data_holds_the_status_document_unchanged(tmp_path: Path) -> None:
    """report.html's embedded data: schema gymslurm.report version 1, the status document as it is."""
    run = _run(tmp_path)
    status = run_status(run, LocalBackend(run.local_dir), now=1796119800.0)
    data = json.loads(orjson.dumps(report_data(run, LocalBackend(run.local_dir), status)))
    assert list(data) == REPORT and (data["schema"], data["version"]) == ("gymslurm.report", 1)
    assert data["status"] == json.loads(status_json(status))
    assert [list(shard) for shard in data["shards"]] == [["shard", "links", "faults"]]


def test_both_documents_take_their_version_from_the_one_table() -> None:
    """gymslurm/formats.py names the printed documents and the run folder's records with the rest."""
    assert {"status", "report", "run_info", "array"} <= set(FORMATS)
    assert FORMATS["status"].field == "version" and FORMATS["run_info"].field == "v"


def test_every_column_and_every_clock_field_is_a_field_of_the_row() -> None:
    """The table and the report name columns by the row's fields; a renamed field fails here, not when a
    line is printed."""
    names = {f.name for f in fields(ShardRow)}
    assert {column.field for column in COLUMNS} <= names and names >= _CLOCK_SHARD


def test_every_verdict_has_its_meaning_and_both_colours() -> None:
    """One vocabulary: each verdict has a meaning, a terminal colour (SGR) and a page colour."""
    assert set(LOOKS) == set(ChainVerdict)
    for look in LOOKS.values():
        assert (
            look.meaning and re.fullmatch(r"3[0-7]", look.ansi) and re.fullmatch(r"#[0-9a-f]{6}", look.html)
        )


def test_every_stop_has_a_verdict_and_every_decision_a_page_colour() -> None:
    """A finished (or paused) chain's last decision names its verdict; the timeline colours each
    decision a link can write, and a link still running."""
    assert set(VERDICT_OF_STOP) == {*FINISHED, Decision.PAUSED}
    assert set(DECISION_COLOURS) == {*map(str, Decision), RUNNING_LINK}


def test_the_docs_list_the_verdicts_of_the_vocabulary() -> None:
    """docs/launcher.md's verdict table names exactly the vocabulary's words, in its order."""
    page = (Path(__file__).parents[2] / "docs" / "launcher.md").read_text()
    table = page.split("| verdict | meaning |", 1)[1].split("\n\n", 1)[0]
    assert re.findall(r"^\| ([A-Z_]+) \|", table, re.M) == [str(verdict) for verdict in ChainVerdict]


@pytest.mark.parametrize(
    ("name", "record"),
    [
        ("run.json", {"v": 2, "name": "r"}),
        ("array.json", {"v": 2, "job_id": "1", "shards": 1, "max_running": None, "at": "t"}),
    ],
)
def test_a_run_record_of_another_version_is_refused_naming_the_file(
    tmp_path: Path, name: str, record: dict[str, object]
) -> None:
    """run.json and array.json are version-checked first, through formats.py, in its one voice."""
    run = RunDir(tmp_path / "run")
    atomic_write(run.root / name, orjson.dumps(record))
    read = run.read_info if name == "run.json" else run.read_array
    with pytest.raises(ConfigError, match=rf"{name}: .* is version 2 \(v 2\); this gymslurm reads version 1"):
        read()


def test_an_array_record_without_a_version_reads_as_version_1(tmp_path: Path) -> None:
    """A record whose `v` was left out reads as 1, as the models always did."""
    run = RunDir(tmp_path / "run")
    atomic_write(run.array_path, orjson.dumps({"job_id": "1", "shards": 1, "max_running": None, "at": "t"}))
    assert run.read_array() == ArrayRecord(job_id="1", shards=1, max_running=None, at="t")
