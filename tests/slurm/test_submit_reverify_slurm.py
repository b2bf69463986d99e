"""`gymslurm submit --reverify RUN` on the Slurm sandbox: the re-grading runs as jobs on the nodes (issue 21).

The same scenario as tests/e2e/test_submit_reverify.py, as the job user on cluster ``a``: a 2-shard run
of the demo server stops by its walltime with two judge failures that kept their answers; ``submit
--reverify RUN --wait`` queues the re-grading, whose jobs start the demo server on their node, re-grade
the saved answers through its ``POST /verify`` and merge: 6 tasks, the two re-graded in attempt 1.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.e2e.helpers import write_tasks

from .helpers import SlurmCluster, SlurmTestError, SlurmUser

JUDGE_DOWN = {"_demo_fault": "judge_failed"}
TASKS = [{}, JUDGE_DOWN, {}, {}, JUDGE_DOWN, {}]


def test_submit_reverify_regrades_a_runs_answers_in_slurm_jobs_and_merges_them(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_user: SlurmUser
) -> None:
    """As the job user: the stopped run's two judge-failed answers re-graded in jobs on the nodes,
    both shards DONE, the merge holds all 6 tasks, the re-graded two in a new attempt with reward 1.0."""
    work = slurm_user.workdir
    data = write_tasks(work / "data.jsonl", TASKS)
    server = json.dumps(["{python}", "-m", "gymslurm", "demo-server", "--host", "{host}", "--port", "{port}"])
    bench = slurm_user.write(
        "bench.yaml",
        f"dataset: {data}\nrun_root: {work / 'runs'}\nshards: 2\n"
        f"servers:\n  - name: demo\n    command: {server}\n    host: 127.0.0.1\n    port: 0\n"
        "    health_path: /health\n"
        "collector:\n  overrides: [+route_failures_to_sidecar=true, +retry_in_invocation=false]\n"
        f"slurm:\n  python: {slurm_python}\n  time: '00:05:00'\n  max_walltime: '00:00:01'\n"
        "aggregation:\n  on_failed_shard: aggregate-what-exists\n",
        mode=0o644,
    )
    data.chmod(0o644)
    python = str(slurm_python)
    try:
        slurm_user.run([python, "-m", "gymslurm", "submit", str(bench), "--wait"], timeout=600)
    except SlurmTestError as error:  # stopped by its walltime: --wait exits non-zero, as it should
        assert "max_walltime" in str(error), error
    (source,) = [p.parent for p in (work / "runs").glob("*/run.json")]
    again = [python, "-m", "gymslurm", "submit", "--reverify", str(source), "--wait"]
    out = slurm_user.run(again, timeout=600)
    match = re.search(r"gymslurm status (\S+)", out)
    assert match, out
    run = Path(match.group(1))
    assert re.search(r"^0\s+DONE\s", out, re.M) and re.search(r"^1\s+DONE\s", out, re.M), out
    starts = [
        json.loads(line)
        for shard in (0, 1)
        for line in (run / f"shards/{shard:03d}/ledger.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "start"
    ]
    assert {start["host"] for start in starts} <= set(slurm_cluster.nodes)
    rows = [json.loads(line) for line in (run / "output/merged/rollouts.jsonl").read_text().splitlines()]
    assert sorted(row["task_id"]["task_id"] for row in rows) == [str(n) for n in range(6)]
    regraded = sorted(
        (row["task_id"]["task_id"], row["_ng_attempt"], row["reward"])
        for row in rows
        if "_ng_reverify" in row
    )
    assert regraded == [("1", 1, 1.0), ("4", 1, 1.0)]
