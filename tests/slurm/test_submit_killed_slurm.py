"""A ``submit`` SIGKILLed at any instant is finished by the next ``status`` with no job queued twice
(issue 32), on the real Slurm sandbox.

3 shards in arrays of 2 (``slurm.array_size: 2``) at the default lookahead: submit makes 6 ``sbatch``
calls (each array of first links and its spare arrays). An ``sbatch`` on the test user's PATH logs
every call and, for ``gymslurm submit``'s own calls, SIGKILLs submit right after its k-th call went
through, before submit could read the job id or record it. The next ``gymslurm status`` finishes the
queuing (each sbatch is written as an intent with its ``--comment`` before it runs, and looked up
before it is made again); the run then ends DONE by itself, and the first-link arrays queued, by
submit, status and the jobs together, are exactly the 6 of the plan.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import SlurmUser
from .launcher_chains import STANDIN

pytestmark = pytest.mark.slurm

WRAPPER = """#!/bin/bash
# sbatch, logged; gymslurm submit (the parent) is SIGKILLed right after its KILL_AT-th call went through
echo "$*" >> {log}
parent=$(tr '\\0' ' ' < /proc/$PPID/cmdline)
case "$parent" in
  *" submit "*)
    n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo "$n" > {count}
    out=$({real} "$@"); rc=$?
    if [ "$n" -eq {kill_at} ]; then kill -KILL "$PPID"; sleep 5; fi
    echo "$out"; exit "$rc";;
esac
exec {real} "$@"
"""


def _gymslurm(user: SlurmUser, python: Path, path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    argv = user.command([str(python), "-m", "gymslurm", *args])
    return subprocess.run(
        argv, cwd=user.workdir, env=env, capture_output=True, text=True, timeout=180, check=False
    )


def _first_link_sbatches(log: Path) -> list[str]:
    """The sbatch calls that queued first links: arrays with no dependency or one on a whole array (a
    spare), never a successor (its dependency names a task, ``A_i``) or the aggregation (no array)."""
    calls = log.read_text().splitlines() if log.exists() else []
    found = []
    for call in calls:
        words = call.split()
        after = [w for w in words if w.startswith("--dependency=")]
        if any(w.startswith("--array=") for w in words) and not any("_" in w for w in after):
            found.append(call)
    return found


def _wait_done(user: SlurmUser, python: Path, path: str, run: Path, timeout_s: float = 420) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        done = _gymslurm(user, python, path, "status", str(run), "--json")
        assert done.returncode == 0, done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        verdicts = [row["verdict"] for row in report["shards"]]
        if all(v == "DONE" for v in verdicts) and report["aggregation"]["state"].startswith("DONE"):
            return report
        assert "STALLED" not in verdicts, json.dumps(report, indent=1)
        assert time.monotonic() < deadline, json.dumps(report, indent=1)
        time.sleep(3)


@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_submit_killed_right_after_an_sbatch_is_finished_by_the_next_status(
    slurm_user: SlurmUser, slurm_python: Path, kill_at: int
) -> None:
    """submit SIGKILLed right after its 1st, 2nd or 3rd sbatch went through (the job queued, its id
    never recorded by submit): the next status queues the rest, no array of first links twice, and
    every shard and the aggregation end DONE with no other command."""
    work = slurm_user.workdir
    real = shutil.which("sbatch")
    assert real is not None
    bin_dir = work / "bin"
    bin_dir.mkdir()
    os.chmod(bin_dir, 0o777)
    log, count = work / "sbatch.log", work / "sbatch.count"
    slurm_user.write(
        "bin/sbatch", WRAPPER.format(log=log, count=count, real=real, kill_at=kill_at), mode=0o755
    )
    path = f"{bin_dir}:{os.environ['PATH']}"
    standin = slurm_user.write("standin.py", STANDIN.read_text())
    slurm_user.write("steps.json", json.dumps([{"exit": 0, "progress": 1}]), mode=0o644)
    slurm_user.write("data.jsonl", "".join(json.dumps({"q": i}) + "\n" for i in range(6)), mode=0o644)
    bench = slurm_user.write(
        "bench.yaml",
        f"dataset: {work / 'data.jsonl'}\nrun_root: {work / 'runs'}\nshards: 3\n"
        f"collector:\n  command: {json.dumps([str(slurm_python), str(standin), str(work / 'steps.json')])}\n"
        "aggregation:\n  command: [/bin/true]\n"
        f"slurm:\n  python: {slurm_python}\n  time: '00:05:00'\n  array_size: 2\n",
        mode=0o644,
    )
    killed = _gymslurm(slurm_user, slurm_python, path, "submit", str(bench))
    (run_json,) = (work / "runs").glob("*/run.json")
    run = run_json.parent
    try:
        assert killed.returncode in (-9, 137), (killed.stdout, killed.stderr)  # (runuser says 128 + 9)
        assert len(_first_link_sbatches(log)) == kill_at
        _wait_done(slurm_user, slurm_python, path, run)
        firsts = _first_link_sbatches(log)
        assert len(firsts) == 6, "\n".join(firsts)  # 2 arrays x (first links + 2 spares), each once
        record = json.loads((run / "array.json").read_text())
        recorded = [job for part in record["parts"] for job in [part["job_id"], *part["spares"]]]
        assert len(set(recorded)) == 6 and record.get("intent") is None
        assert not (run / "queuing").exists()
    finally:
        _gymslurm(slurm_user, slurm_python, path, "cancel", str(run))
