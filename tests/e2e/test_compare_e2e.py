"""``gymslurm compare`` and ``gymslurm gate`` on real runs of the demo Environment Server.

Two demo policies of known accuracy answer the same 300 tasks: the baseline server at 0.9, the
candidate at 0.6 (``--accuracy``; each answer is a seeded draw, docs/demo-server.md), so the true
difference is -0.3. The candidate's run stops at 280 tasks (``+limit``) and its dataset makes 5 tasks
masked, 5 unscored and 3 terminal failures, and 4 fail once before they succeed (a retry). A second
collection from the baseline server gives the same rewards again (the same draws). Every figure the
commands print is checked against the saved rows, read here with plain ``json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import launch_demo_server
from tests.e2e.helpers import collect, gymslurm, read_jsonl, write_tasks

pytestmark = pytest.mark.e2e

TASKS, LIMIT = 300, 280
MASKED, UNSCORED, FAILED, RETRIED = 5, 5, 3, 4
BASELINE, CANDIDATE = ("--accuracy", "0.9", "--seed", "1"), ("--accuracy", "0.6", "--seed", "2")
POLICY = "default:\n  max_drop: 0.05\n  alpha: 0.05\n  min_coverage: 0.85\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The baseline, the same baseline collected again, and the candidate (module docstring)."""
    root = tmp_path_factory.mktemp("compare")
    faults = (
        [{"_demo_fault": "masked_kept"}] * MASKED
        + [{"_demo_fault": "unscored"}] * UNSCORED
        + [{"_demo_fault": "terminal"}] * FAILED
        + [{"_demo_fault": "retryable", "_demo_fault_attempts": 1}] * RETRIED
    )
    tasks = write_tasks(root / "tasks.jsonl", [{}] * TASKS)
    faulty = write_tasks(root / "faulty.jsonl", faults + [{}] * (TASKS - len(faults)))
    baseline = launch_demo_server(BASELINE, root / "baseline.stderr")
    candidate = launch_demo_server(CANDIDATE, root / "candidate.stderr")
    outputs = {name: root / name / "rollouts.jsonl" for name in ("baseline", "again", "candidate")}
    try:
        for name, dataset, server, extra in (
            ("baseline", tasks, baseline, ()),
            ("again", tasks, baseline, ()),
            ("candidate", faulty, candidate, (f"+limit={LIMIT}",)),
        ):
            done = collect(dataset, outputs[name], server.url, *extra)
            assert done.returncode == 0, done.stderr
    finally:
        baseline.stop()
        candidate.stop()
    outputs["tasks"] = tasks
    return outputs


def compare_json(*args: str) -> dict[str, Any]:
    done = gymslurm("compare", *args, "--json")
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def measured(output: Path) -> dict[str, float]:
    """Task id → reward of every saved result that is measured (numeric reward, not masked)."""
    return {
        row["task_id"]["task_id"]: float(row["reward"])
        for row in read_jsonl(output)
        if isinstance(row.get("reward"), int | float) and row.get("mask_sample") is not True
    }


@pytest.fixture(scope="module")
def regression(runs: dict[str, Path]) -> dict[str, Any]:
    """``gymslurm compare baseline candidate --json``: the one benchmark's entry."""
    document = compare_json(str(runs["baseline"]), str(runs["candidate"]))
    assert document["format_version"] == 1 and len(document["benchmarks"]) == 1
    entry: dict[str, Any] = document["benchmarks"][0]
    return entry


def test_two_demo_policies_of_known_accuracy_differ_by_their_known_difference(
    regression: dict[str, Any],
) -> None:
    """0.9 against 0.6: the interval holds -0.3 and not 0, McNemar's mid-p is tiny, "regressed"."""
    low, high = regression["interval"]
    assert low <= -0.3 <= high < 0, (low, high)
    assert regression["change"] == "regressed" and regression["test"] == "mcnemar"
    assert regression["p_value"] < 1e-9 and regression["p_exact"] >= regression["p_value"]


def test_the_delta_and_the_flips_are_those_of_the_saved_rows(
    runs: dict[str, Path], regression: dict[str, Any]
) -> None:
    """Recomputed from the two results files: the paired tasks' means, their difference, the flips."""
    base, cand = measured(runs["baseline"]), measured(runs["candidate"])
    paired = sorted(base.keys() & cand.keys(), key=int)
    assert regression["tasks"]["paired"] == len(paired)
    assert regression["baseline_mean"] == pytest.approx(sum(base[t] for t in paired) / len(paired))
    assert regression["delta"] == pytest.approx(sum(cand[t] - base[t] for t in paired) / len(paired))
    down = [t for t in paired if base[t] == 1.0 and cand[t] == 0.0]
    up = [t for t in paired if base[t] == 0.0 and cand[t] == 1.0]
    assert [f["task_id"] for f in regression["flips"]["pass_to_fail"]] == down
    assert [f["task_id"] for f in regression["flips"]["fail_to_pass"]] == up


def test_masked_unscored_and_failed_tasks_are_left_out_counted_never_failures(
    regression: dict[str, Any],
) -> None:
    """The candidate's 13 unmeasured tasks and the 20 it never ran: baseline-only, counted, excluded;
    its rollouts count each selected outcome once (the 4 retried tasks are measured)."""
    tasks = regression["tasks"]
    unmeasured = MASKED + UNSCORED + FAILED
    assert (tasks["paired"], tasks["baseline_only"]) == (LIMIT - unmeasured, TASKS - LIMIT + unmeasured)
    assert (tasks["candidate_only"], tasks["neither"]) == (0, 0)
    assert tasks["coverage"] == pytest.approx((LIMIT - unmeasured) / TASKS)
    rollouts = regression["candidate"]["rollouts"]
    assert rollouts == {
        "measured": LIMIT - unmeasured,
        "masked": MASKED,
        "unscored": UNSCORED,
        "failed": FAILED,
        "omitted": 0,
        "unfinished": 0,
    }
    flipped = {f["task_id"] for f in regression["flips"]["pass_to_fail"]}
    assert flipped.isdisjoint(str(t) for t in range(unmeasured)), "an unmeasured task is never a fail"


def test_identical_runs_compare_as_no_change_and_pass_the_gate(runs: dict[str, Path], tmp_path: Path) -> None:
    """The baseline collected twice (the same draws): delta 0, interval [0, 0], p 1; the gate passes."""
    (entry,) = compare_json(str(runs["baseline"]), str(runs["again"]))["benchmarks"]
    assert (entry["delta"], entry["interval"], entry["p_value"], entry["change"]) == (
        0.0,
        [0.0, 0.0],
        1.0,
        "no change",
    )
    assert entry["flips"]["pass_to_fail"] == entry["flips"]["fail_to_pass"] == []
    (tmp_path / "policy.yaml").write_text(POLICY)
    gate = gymslurm(
        "gate", "--policy", str(tmp_path / "policy.yaml"), str(runs["baseline"]), str(runs["again"])
    )
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert gate.stdout.startswith("PASS ") and "gate: pass (exit 0)" in gate.stdout


def test_the_gate_blocks_the_regression_from_the_runs_and_from_the_saved_comparison(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """A 30-point drop, significant, over max_drop: exit 1 (block), the same from a saved --json."""
    (tmp_path / "policy.yaml").write_text(POLICY)
    policy = ["--policy", str(tmp_path / "policy.yaml")]
    done = gymslurm("gate", *policy, str(runs["baseline"]), str(runs["candidate"]))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("BLOCK rollouts: a significant drop larger than allowed")
    saved = tmp_path / "comparison.json"
    saved.write_text(gymslurm("compare", str(runs["baseline"]), str(runs["candidate"]), "--json").stdout)
    again = gymslurm("gate", *policy, str(saved), "--json")
    assert again.returncode == 1 and json.loads(again.stdout)["decision"] == "block"


def test_the_table_and_the_page_show_the_comparison(runs: dict[str, Path], tmp_path: Path) -> None:
    """Without --json a table for people, the excluded tasks said; --html writes the page with its chart."""
    page = tmp_path / "compare.html"
    done = gymslurm("compare", str(runs["baseline"]), str(runs["candidate"]), "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert "regressed" in done.stdout and "mcnemar" in done.stdout
    assert f"{TASKS - LIMIT + MASKED + UNSCORED + FAILED} measured by the baseline only" in done.stdout
    assert "never counted as failures" in done.stdout and f"page: {page}" in done.stdout
    text = page.read_text()
    assert '<svg id="chart-compare"' in text and text.count('class="interval"') == 1


def test_a_launcher_run_is_compared_by_its_name_through_its_merged_output(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """A local launcher run (two shards, merged) of the baseline's policy on the same tasks, named under
    --run-root, against the baseline collection: the same rewards, "no change" over every task."""
    bench = tmp_path / "bench.yaml"
    bench.write_text(
        f"name: arith\ndataset: {runs['tasks']}\nrun_root: {tmp_path / 'runs'}\nshards: 2\n"
        "servers:\n  - name: env\n"
        f"    command: [{sys.executable}, -m, gymslurm, demo-server, --host, '{{host}}', --port, '{{port}}',"
        f" {', '.join(repr(arg) for arg in BASELINE)}]\n    health_path: /health\n    probe_interval_s: 0.5\n"
        f"collector:\n  command: [{sys.executable}, -m, gymslurm, collect]\n"
        "  overrides: [+route_failures_to_sidecar=true, +progress=none]\n"
        f"slurm:\n  python: {sys.executable}\n"
    )
    submitted = gymslurm("submit", str(bench), "--backend", "local", "--wait", timeout=300)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    (run,) = (tmp_path / "runs").iterdir()
    (entry,) = compare_json(str(runs["baseline"]), run.name, "--run-root", str(tmp_path / "runs"))[
        "benchmarks"
    ]
    assert entry["benchmark"] == "arith" and entry["candidate"]["source"].endswith(
        "output/merged/rollouts.jsonl"
    )
    assert (entry["tasks"]["paired"], entry["delta"], entry["change"]) == (TASKS, 0.0, "no change")


def test_a_run_that_is_not_merged_or_not_there_is_refused_saying_what_to_give(tmp_path: Path) -> None:
    """An unknown name, or a missing file: exit 2 with a message naming what compare accepts."""
    missing = gymslurm("compare", str(tmp_path / "none.jsonl"), "nowhere", "--run-root", str(tmp_path))
    assert missing.returncode == 2 and "does not exist or is not a file" in missing.stderr
    unknown = gymslurm("compare", "run-a", "run-b", "--run-root", str(tmp_path))
    assert unknown.returncode == 2 and "no run 'run-a'" in unknown.stderr
