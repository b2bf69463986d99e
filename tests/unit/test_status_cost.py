"""What ``status`` of a run costs beside its one squeue (issue 32: ≤ 1.5× a bare squeue of the run's
jobs plus parsing): the code it imports and the rows it types, as counts (the timings are
bench/status_foreign.py's).

A run of one benchmark whose first links are all queued imports none of the code that completes a
killed submit's queuing, renders the report, or reads a suite; its squeue lines are typed once
each, in one query, however many shards it has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gymslurm.launcher.rundir import queuing_left
from gymslurm.launcher.views.status import read_chains, run_status
from gymslurm.site.backend import SlurmBackend
from tests.unit.scripted_slurm import ROOT, ScriptedSlurm, array_run

NOT_ON_THE_PATH = (
    "gymslurm.job.first_links",  # completes a killed submit's queuing
    "gymslurm.launcher.settings",  # (its imports: the benchmark's settings)
    "gymslurm.launcher.views.report",  # the HTML page: the table refreshes it, --json does not
    "gymslurm.launcher.views.suite_status",  # a suite run's lines
    "gymslurm.launcher.suite_run",
)

LOADED = """
import json, sys
from gymslurm.cli import main
code = main(["status", sys.argv[1], "--json"])
print(json.dumps(sorted(m for m in sys.modules if m.startswith("gymslurm"))), file=sys.stderr)
raise SystemExit(code)
"""


def _slurm_on_path(tmp_path: Path, squeue_lines: str) -> dict[str, str]:
    """An environment whose ``squeue`` prints these lines and whose ``sacct`` prints none."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "squeue.txt").write_text(squeue_lines)
    for name, body in (("squeue", f"cat {tmp_path / 'squeue.txt'}"), ("sacct", "true")):
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}


def test_status_json_of_a_queued_run_imports_no_queuing_report_or_suite_code(tmp_path: Path) -> None:
    """``status RUN --json`` of an array run with every first link queued (no queuing mark, array.json's
    parts written), of one benchmark: its document, without importing any module of
    :data:`NOT_ON_THE_PATH` (~0.2 s of CPU a status paid before, of ~0.6 s in all)."""
    client = ScriptedSlurm()
    run = array_run(tmp_path, 3, client, [])
    assert not queuing_left(run)
    lines = "".join(f"{job}|gs-r|PENDING|JobHeldUser|(null)|0:00|5:00|N/A\n" for job in client.states)
    done = subprocess.run(
        [sys.executable, "-c", LOADED, str(run.root)],
        env=_slurm_on_path(tmp_path, lines),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [row["shard"] for row in document["shards"]] == [0, 1, 2]
    assert document["queries"] == 1
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert loaded.isdisjoint(NOT_ON_THE_PATH), loaded & set(NOT_ON_THE_PATH)


def test_a_killed_submits_plan_is_queuing_left(tmp_path: Path) -> None:
    """Queuing is left (status then imports the code that completes it) when the run carries the
    queuing mark, or when array.json holds a plan with no array queued."""
    client = ScriptedSlurm()
    run = array_run(tmp_path, 3, client, [])
    run.queuing_mark.touch()
    assert queuing_left(run)
    run.queuing_mark.unlink()
    plan = json.loads(run.array_path.read_text())
    run.array_path.write_text(json.dumps({**plan, "parts": []}))
    assert queuing_left(run)


def test_status_types_each_of_its_runs_squeue_lines_once_in_one_query(tmp_path: Path) -> None:
    """Status of a 2,000-shard array run whose first links and spares all pend (4,000 squeue lines):
    one squeue, 4,000 rows typed, one row per shard; the counts of a 2-shard run's status scaled."""
    counts = {}
    for shards in (2, 2_000):
        client = ScriptedSlurm()
        run = array_run(tmp_path / str(shards), shards, client, [])
        document = run_status(run, SlurmBackend(client, accounting=False), chains=read_chains(run, shards))
        counts[shards] = (client.queries, client.rows, len(document.shards), len(client.states))
    assert counts[2] == (1, 4, 2, 4)
    assert counts[2_000] == (1, 4_000, 2_000, 4_000)


def test_whether_a_run_aggregates_is_read_from_run_json_not_its_saved_benchmark(tmp_path: Path) -> None:
    """run.json records ``aggregation.enabled`` at submit: status of a finished run reads it there
    (benchmark.yaml is neither parsed nor needed); a run from before the record reads its saved
    benchmark."""
    client = ScriptedSlurm()
    run = array_run(tmp_path, 2, client, [])
    info = run.read_info()
    for recorded in (False, True):
        run.info_path.write_text(info.model_copy(update={"aggregation": recorded}).model_dump_json())
        assert not run.config_path.exists() and run.aggregation_enabled() is recorded
    run.info_path.write_text(info.model_copy(update={"aggregation": None}).model_dump_json())
    run.config_path.write_text("aggregation:\n  enabled: false\n")
    assert run.aggregation_enabled() is False
    run.config_path.write_text("shards: 2\n")
    assert run.aggregation_enabled() is True  # the setting's default


def test_a_chain_of_submissions_only_costs_what_folding_its_records_gives() -> None:
    """A chain no link of which ran yet (submissions only: most chains of a large run) is costed
    without folding its records into links: no GPU-hours, every fault kind 0, Slurm's GPU figure
    still asked of its jobs; the same as the fold gives."""
    from gymslurm.launcher.ledger import Submitted
    from gymslurm.launcher.links import faults_survived, links_of
    from gymslurm.launcher.run_cost import Cost

    records = [Submitted(job_id="100_3", by="submit (array)"), Submitted(job_id="101_3", by="spare")]
    cost = Cost.of(records, 0.0, {"100_3": 7200.0})
    assert cost == Cost(0.0, 0.0, 2.0, faults_survived(records, links_of(records)))
    assert Cost.of(records, 0.0, None).faults is not Cost.of(records, 0.0, None).faults  # not shared
