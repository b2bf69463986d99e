"""`gymslurm submit --reverify RUN`: judge-only re-grading as jobs, on the local backend (issue 21, item 8).

The source run collects 6 arithmetic tasks in 2 shards from the demo server its jobs start; two tasks
end their first attempt in a judge failure that kept the policy's answer (``_demo_fault:
judge_failed``), and the chain stops there (``slurm.max_walltime`` of one second: STOP_WALLTIME after
the first link), as a run whose judge was down until the walltime ran out does. ``submit --reverify``
then queues a re-grading run of the same benchmark: each job starts the benchmark's server again,
re-grades the saved answers through its ``POST /verify`` (the agent never runs), and the
aggregation merges the re-graded shards: every task once, the two re-graded with reward 1.0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import write_tasks
from tests.e2e.launcher_chains_helpers import gymslurm, status, wait_until_final

pytestmark = pytest.mark.e2e

JUDGE_DOWN = {"_demo_fault": "judge_failed"}
TASKS = [{}, JUDGE_DOWN, {}, {}, JUDGE_DOWN, {}]  # shard 0: tasks 0-2, shard 1: tasks 3-5


def benchmark(work: Path) -> Path:
    path = work / "bench.yaml"
    server = json.dumps(["{python}", "-m", "gymslurm", "demo-server", "--host", "{host}", "--port", "{port}"])
    path.write_text(
        f"dataset: {work / 'data.jsonl'}\nrun_root: {work / 'runs'}\nshards: 2\nbackend: local\n"
        f"servers:\n  - name: demo\n    command: {server}\n    host: 127.0.0.1\n    port: 0\n"
        "    health_path: /health\n"
        "collector:\n  overrides: [+route_failures_to_sidecar=true, +retry_in_invocation=false]\n"
        "slurm:\n  max_walltime: '00:00:01'\n"
        "aggregation:\n  on_failed_shard: aggregate-what-exists\n"
    )
    return path


def merged(run: Path) -> list[dict[str, Any]]:
    path = run / "output" / "merged" / "rollouts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_submit_reverify_regrades_a_runs_saved_answers_as_jobs_and_merges_them(tmp_path: Path) -> None:
    """The judge-failed answers of a stopped run are re-graded in jobs (servers started there), each
    shard's output published, the aggregation merges all 6 tasks; the source run is not written."""
    write_tasks(tmp_path / "data.jsonl", TASKS)
    first = gymslurm("submit", str(benchmark(tmp_path)), "--wait", check=False)
    assert first.returncode != 0, first.stdout  # stopped by its walltime with judge failures left
    (source,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
    assert [row["last_decision"] for row in status(source)["shards"]] == ["STOP_WALLTIME"] * 2, first.stdout
    before = {p: p.stat().st_size for p in (source / "output").rglob("*") if p.is_file()}
    done = gymslurm("submit", "--reverify", str(source), "--wait")
    match = re.search(r"gymslurm status (\S+)", done.stdout)
    assert match, done.stdout
    run = Path(match.group(1))
    report = wait_until_final(run)
    assert [row["verdict"] for row in report["shards"]] == ["DONE"] * 2, done.stdout
    assert json.loads((run / "run.json").read_text())["reverify_of"] == str(source)
    rows = merged(run)
    assert sorted(row["task_id"]["task_id"] for row in rows) == [str(n) for n in range(6)]
    regraded = {row["task_id"]["task_id"]: row for row in rows if "_ng_reverify" in row}
    assert sorted(regraded) == ["1", "4"] and {row["reward"] for row in regraded.values()} == {1.0}
    assert {row["_ng_attempt"] for row in regraded.values()} == {1}  # a new attempt after the saved one
    assert before == {p: p.stat().st_size for p in (source / "output").rglob("*") if p.is_file()}
