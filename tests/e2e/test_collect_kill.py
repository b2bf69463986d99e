"""A collector SIGKILLed at random moments, then resumed, ends with the ground-truth coverage.

Each scenario kills ``KILLS`` collectors (24 in the suite) at a random instant — during start-up,
preparation, dispatch or reporting — and resumes each time. The dataset's faults are scripted per
task, so the final category of every rollout is known whatever attempts the kills consumed: that is
the ground truth the final coverage and the files themselves must match, with no rollout counted twice.
"""

from __future__ import annotations

import json
import random
import signal
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import REPO_ROOT, read_jsonl

pytestmark = pytest.mark.e2e

KILLS = 8
TASKS = 400

# scripted fault -> final coverage category (attempt-independent by construction)
SCRIPT: list[tuple[dict[str, Any], str]] = [
    ({}, "measured"),
    ({}, "measured"),
    ({}, "measured"),
    ({"_demo_fault": "retryable", "_demo_fault_attempts": 1}, "measured"),
    ({"_demo_fault": "unscored"}, "unscored"),
    ({"_demo_fault": "omit"}, "intentionally_omitted"),
    ({"_demo_fault": "terminal"}, "failed"),
    ({"_demo_fault": "masked_kept"}, "masked"),
]


def dataset(path: Path) -> tuple[Path, Counter[str]]:
    truth: Counter[str] = Counter()
    with path.open("w") as handle:
        for number in range(TASKS):
            extra, category = SCRIPT[number % len(SCRIPT)]
            truth[category] += 1
            task_input = {"question": f"What is {number} + 2?", "a": number, "b": 2, "op": "+", **extra}
            row = {"task_id": {"taskset": "arith", "task_id": str(number)}, "task_input": task_input}
            handle.write(json.dumps(row) + "\n")
    return path, truth


def command(data: Path, output: Path, url: str, resume: bool) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gymslurm",
        "collect",
        f"+input_jsonl_fpath={data}",
        f"+output_jsonl_fpath={output}",
        f"+environment_server_url={url}",
        "+progress=none",
        "+summary=false",
        "+concurrency=4",
        "+require_complete=true",
        f"+resume_from_cache={str(resume).lower()}",
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_at_random_moments_then_resume_matches_ground_truth(
    start_demo_server: Callable[..., Any], tmp_path: Path, seed: int
) -> None:
    """After 8 random SIGKILLs and resumes, coverage equals the ground truth and nothing counts twice."""
    rng = random.Random(seed)
    server = start_demo_server("--latency-ms", "25", "--accuracy", "1.0")
    data, truth = dataset(tmp_path / "d.jsonl")
    output = tmp_path / "run" / "out.jsonl"
    kills = runs = 0
    while kills < KILLS:
        runs += 1
        process = subprocess.Popen(
            command(data, output, server.url, resume=runs > 1),
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if kill_at_random_moment(process, rng, output):
            kills += 1
        else:
            assert process.returncode in (75, 76), f"run {runs}: exit {process.returncode}"
            pytest.fail(f"the run finished after {kills} kills; make the dataset larger")
    for _ in range(5):
        final = subprocess.run(
            command(data, output, server.url, resume=True),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if final.returncode != 75:
            break
    assert final.returncode == 76, final.stderr  # the scripted terminal failures remain
    cov = json.loads(output.with_name("out_coverage.json").read_text())
    found = {key: cov[key] for key in ("measured", "unscored", "masked", "failed", "intentionally_omitted")}
    assert found == {key: truth[key] for key in found}
    assert (cov["expected"], cov["missing"], cov["not_started"]) == (TASKS, 0, 0)
    assert_nothing_counted_twice(output)


def saved_lines(output: Path) -> int:
    """Complete result lines so far (a line being written is not parsed)."""
    return output.read_bytes().count(b"\n") if output.exists() else 0


def kill_at_random_moment(process: subprocess.Popen[bytes], rng: random.Random, output: Path) -> bool:
    """SIGKILL ``process`` at a random instant: half the time early (start-up, preparation), half
    during dispatch (after 1-30 more saved results). False when it finished first."""
    if rng.random() < 0.5:
        deadline = time.monotonic() + rng.uniform(0.05, 0.8)
    else:
        target = saved_lines(output) + rng.randint(1, 30)
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline and saved_lines(output) < target:
            time.sleep(0.01)
        deadline = time.monotonic()
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    if process.poll() is not None:
        process.communicate()
        return False
    process.send_signal(signal.SIGKILL)
    process.communicate()
    return True


def assert_nothing_counted_twice(output: Path) -> None:
    """Every execution has at most one outcome, and every rollout's newest execution has exactly one."""
    raw = output.with_name("out_reservations.bin").read_bytes()
    (count,) = struct.unpack_from("<Q", raw, 16)
    reserved = struct.unpack_from(f"<{count}I", raw, 64)
    ids = [row["_ng_rollout_id"] for row in read_jsonl(output.with_name("out_gymslurm_inputs.jsonl"))]
    rows = read_jsonl(output) + read_jsonl(output.with_name("out_failures.jsonl"))
    executions = Counter((row["_ng_rollout_id"], row["_ng_attempt"]) for row in rows)
    assert max(executions.values()) == 1
    for rollout_id, reservations in zip(ids, reserved, strict=True):
        assert executions[(rollout_id, reservations - 1)] == 1, rollout_id
        assert all(attempt < reservations for (rid, attempt) in executions if rid == rollout_id)
