"""``gymslurm compare`` and NeMo Gym 0.7.0's ``gym eval compare`` agree on the figures both compute.

Two runs collected by gymslurm from the demo Environment Server at two accuracies (0.7 and 0.6),
two repeats per task (so some tasks are tied at 0.5). NeMo Gym's compare reads only each run's
``<stem>_aggregate_metrics.json``: it is made here by NeMo Gym's own ``compute_aggregate_metrics``
(what a NeMo Gym server's ``POST /aggregate_metrics`` answers), run in NeMo Gym's venv over a copy of
each results file. Then both commands compare the same two runs, and agree on (docs/compare.md):

- the difference of the mean reward (NeMo Gym's ``mean/reward`` row's ``delta``);
- the pass→fail and fail→pass flips, task by task, and the tied count (the same 0.5 rule);
- the tasks both measured (its ``common_task_count``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.compat.nemogym import NemoGymSetupError, ensure_nemo_gym
from tests.e2e.conftest import launch_demo_server
from tests.e2e.helpers import collect, gymslurm, write_tasks

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

TASKS = 200
AGGREGATE = """
import json, sys
from nemo_gym.reward_profile import compute_aggregate_metrics
for src in sys.argv[1:]:
    rows = [json.loads(line) for line in open(src) if line.strip()]
    entry = {"agent_ref": {"name": "demo"}, **compute_aggregate_metrics(rows).model_dump(mode="json")}
    with open(src[: -len(".jsonl")] + "_aggregate_metrics.json", "w") as out:
        json.dump([entry], out)
"""


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (
        f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


def test_gymslurm_and_nemo_gym_agree_on_the_delta_and_the_flips(tmp_path: Path) -> None:
    """The same two runs: equal mean-reward delta, equal flips task by task, equal tied and common counts."""
    try:
        venv = ensure_nemo_gym()
    except NemoGymSetupError as error:
        pytest.fail(f"NeMo Gym could not be installed: {error}", pytrace=False)
    tasks = write_tasks(tmp_path / "tasks.jsonl", [{}] * TASKS)
    outputs = {}
    for name, accuracy, seed in (("baseline", "0.7", "1"), ("candidate", "0.6", "2")):
        server = launch_demo_server(("--accuracy", accuracy, "--seed", seed), tmp_path / f"{name}.stderr")
        try:
            outputs[name] = tmp_path / name / "rollouts.jsonl"
            done = collect(tasks, outputs[name], server.url, "+num_repeats=2")
            assert done.returncode == 0, done.stderr
        finally:
            server.stop()

    nemo = {}  # NeMo Gym's side: a copy of each results file, its aggregate metrics beside it
    for name, output in outputs.items():
        nemo[name] = tmp_path / "nemo" / name / "rollouts.jsonl"
        nemo[name].parent.mkdir(parents=True)
        shutil.copy(output, nemo[name])
    _run([str(venv / "bin/python"), "-c", AGGREGATE, *map(str, nemo.values())], tmp_path)
    _run(
        [
            str(venv / "bin/gym"),
            "eval",
            "compare",
            "--baseline",
            str(nemo["baseline"]),
            "--candidates",
            str(nemo["candidate"]),
            "-o",
            str(tmp_path / "report"),
            "--report-format",
            "json",
        ],
        tmp_path,
    )
    theirs = json.loads((tmp_path / "report" / "compare_report.json").read_text())["comparisons"][0]
    ours = _ours(outputs)

    (row,) = [r for r in theirs["metrics"] if r["metric"] == "mean/reward"]
    assert row["candidates"][0]["delta"] == pytest.approx(ours["delta"], abs=1e-12)
    (flips,) = theirs["flips"]
    assert flips["mode"] == "binary" and ours["flips"]["mode"] == "binary"
    assert flips["common_task_count"] == ours["tasks"]["paired"] == TASKS
    assert flips["tied_count"] == ours["flips"]["tied"] > 0, "two repeats make some tasks 0.5 on a side"
    for direction in ("pass_to_fail", "fail_to_pass"):
        their_tasks = sorted(f["task_index"] for f in flips["flips"] if f["direction"] == direction)
        our_tasks = sorted(int(f["task_id"]) for f in ours["flips"][direction])
        assert their_tasks == our_tasks and flips[f"{direction}_count"] == len(our_tasks) > 0, direction


def _ours(outputs: dict[str, Path]) -> dict[str, Any]:
    done = gymslurm("compare", str(outputs["baseline"]), str(outputs["candidate"]), "--json")
    assert done.returncode == 0, done.stderr
    entry: dict[str, Any] = json.loads(done.stdout)["benchmarks"][0]
    return entry
