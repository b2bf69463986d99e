"""`gymslurm reverify --judge-failed-only` end to end: runs collected from the real demo server.

One scenario (module fixture) builds two runs with the real collector and re-verifies them:

- run ``review``: ``arith-0``/``arith-1`` complete; ``arith-2`` and ``arith-3`` end attempt 0 in a
  judge failure that kept the policy's answer (``_demo_fault: judge_failed``), then two resumes
  against a server that never answers are SIGKILLed mid-request, leaving executions 1 and 2
  reserved without outcomes: the review case ``judge_failed (A) → interrupted → interrupted``.
  ``arith-3``'s judge is down on ``/verify`` too (``_demo_verify_fault``).
- run ``stopped``: ``arith-0`` fails judging with an answer at attempt 0, then a recorded agent
  failure (no answer) at attempt 1, then an interruption: the newer outcome stops the reuse.

The observable that the agent never ran again: the demo server's shutdown summary counts ``/run``
and ``/verify`` requests apart; ``/run`` stays at what collection sent.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DemoServer, launch_demo_server
from tests.e2e.helpers import (
    REPO_ROOT,
    collect,
    collect_command,
    companion,
    read_jsonl,
    reservations_of,
    snapshot,
    write_tasks,
)
from tests.support import wait_until

pytestmark = pytest.mark.e2e

NO_RETRY = "+retry_in_invocation=false"
INCOMPLETE_IS_75 = "+require_complete=true"
RESUME = "+resume_from_cache=true"
JUDGE_DOWN = {"_demo_fault": "judge_failed"}
REVIEW_TASKS = [{}, {}, JUDGE_DOWN, {**JUDGE_DOWN, "_demo_verify_fault": "judge_failed"}]
STOPPED_TASKS = [{"_demo_fault": ["judge_failed", "retryable"]}]


def reverify(source: Path, output: Path, url: str) -> subprocess.CompletedProcess[str]:
    """Run ``gymslurm reverify --judge-failed-only`` to its end."""
    command = [
        sys.executable,
        "-m",
        "gymslurm",
        "reverify",
        "--judge-failed-only",
        f"+input_jsonl_fpath={source}",
        f"+output_jsonl_fpath={output}",
        f"+environment_server_url={url}",
    ]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)


def interrupt(dataset: Path, output: Path, hanging: DemoServer, reserved: list[int]) -> None:
    """Resume against a server that never answers; SIGKILL once ``reserved`` executions are reserved."""
    process = subprocess.Popen(
        collect_command(dataset, output, hanging.url, RESUME, NO_RETRY),
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def reserving() -> bool:
        if reservations_of(output) == reserved:
            return True
        assert process.poll() is None, f"the collector exited early: {process.communicate()[1]}"
        return False

    try:
        wait_until(
            reserving, 120, lambda: f"reservations {reserved} (seen {reservations_of(output)})", every_s=0.02
        )
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()


@dataclass
class Scenario:
    """Both runs, what re-verification printed and wrote, and the grading server's request counts."""

    review: Path
    stopped: Path
    review_out: Path
    stopped_out: Path
    review_done: subprocess.CompletedProcess[str]
    stopped_done: subprocess.CompletedProcess[str]
    review_before: dict[str, str]
    review_after: dict[str, str]
    run_requests_by_collection: int
    run_requests: int
    verify_requests: int


def sidecar_row(output: Path, rollout_id: str, attempt: int) -> dict[str, Any]:
    """The failure-sidecar row of one execution."""
    rows = read_jsonl(companion(output, "_failures.jsonl"))
    (row,) = [r for r in rows if (r["_ng_rollout_id"], r["_ng_attempt"]) == (rollout_id, attempt)]
    return row


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    """Collect both runs, interrupt them, re-verify them; stop the grading server to read its counts."""
    root = tmp_path_factory.mktemp("reverify")
    grader = launch_demo_server((), root / "grader.stderr")
    hanging = launch_demo_server(("--latency-ms", "600000"), root / "hanging.stderr")
    try:
        review_data = write_tasks(root / "review.jsonl", REVIEW_TASKS)
        review = root / "review" / "out.jsonl"
        first = collect(review_data, review, grader.url, NO_RETRY, INCOMPLETE_IS_75)
        assert first.returncode == 75, first.stderr
        interrupt(review_data, review, hanging, [1, 1, 2, 2])
        interrupt(review_data, review, hanging, [1, 1, 3, 3])

        stopped_data = write_tasks(root / "stopped.jsonl", STOPPED_TASKS)
        stopped = root / "stopped" / "out.jsonl"
        assert collect(stopped_data, stopped, grader.url, NO_RETRY, INCOMPLETE_IS_75).returncode == 75
        again = collect(
            stopped_data, stopped, grader.url, "+resume_from_cache=true", NO_RETRY, INCOMPLETE_IS_75
        )
        assert again.returncode == 75, again.stderr
        interrupt(stopped_data, stopped, hanging, [3])

        before = snapshot(review.parent)
        review_out, stopped_out = root / "new" / "review.jsonl", root / "new" / "stopped.jsonl"
        review_done = reverify(review, review_out, grader.url)
        stopped_done = reverify(stopped, stopped_out, grader.url)
        after = snapshot(review.parent)
    finally:
        hanging.stop()
        assert grader.stop() == 0
    counts = re.search(r"stopped after (\d+) /run requests .* and (\d+) /verify requests", grader.stderr())
    assert counts, grader.stderr()
    yield Scenario(
        review,
        stopped,
        review_out,
        stopped_out,
        review_done,
        stopped_done,
        before,
        after,
        run_requests_by_collection=len(REVIEW_TASKS) + 2,  # review: one attempt each; stopped: two
        run_requests=int(counts[1]),
        verify_requests=int(counts[2]),
    )


def test_collection_saved_judge_failures_with_answers(scenario: Scenario) -> None:
    """The demo's judge_failed fault is saved as a judge failure whose sidecar row keeps the answer."""
    row = sidecar_row(scenario.review, "arith-2", 0)
    assert (row["_ng_failure_class"], row["_ng_failure_terminal"]) == ("judge_failed", False)
    assert row["_ng_failure_response"]["answer"]
    assert reservations_of(scenario.review) == [1, 1, 3, 3]


def test_interrupted_after_judge_failure_reuses_the_answer(scenario: Scenario) -> None:
    """Review case: judge_failed (A) → interrupted → interrupted re-grades A in new attempt 3."""
    assert scenario.review_done.returncode == 0, scenario.review_done.stderr
    answer = sidecar_row(scenario.review, "arith-2", 0)["_ng_failure_response"]
    (row,) = [r for r in read_jsonl(scenario.review_out) if r["_ng_rollout_id"] == "arith-2"]
    expected = "3"  # write_tasks: task 2 asks 2 + 1
    assert (row["_ng_attempt"], row["_ng_reverify"]["source_attempt"]) == (3, 0)
    assert row["response"] == answer
    assert row["reward"] == (1.0 if answer["answer"] == expected else 0.0)


def test_agent_was_not_run_again(scenario: Scenario) -> None:
    """Re-verification sent only /verify requests (one per re-judged answer), never /run."""
    assert scenario.run_requests == scenario.run_requests_by_collection
    assert scenario.verify_requests == 2


def test_completed_results_are_carried_unchanged(scenario: Scenario) -> None:
    """The source's completed rows appear in the output byte for byte."""
    source_lines = scenario.review.read_bytes().splitlines()
    output_lines = scenario.review_out.read_bytes().splitlines()
    assert len(source_lines) == 2 and output_lines[:2] == source_lines


def test_judge_down_again_is_saved_with_the_answer(scenario: Scenario) -> None:
    """A re-grade the judge fails again lands in the output's sidecar, the answer kept for next time."""
    answer = sidecar_row(scenario.review, "arith-3", 0)["_ng_failure_response"]
    row = sidecar_row(scenario.review_out, "arith-3", 3)
    assert (row["_ng_failure_class"], row["_ng_failure_response"]) == ("judge_failed", answer)
    assert row["_ng_failure_record"]["failure"]["stage"] == "verification"
    assert "arith-3" not in {r["_ng_rollout_id"] for r in read_jsonl(scenario.review_out)}


def test_source_run_is_not_written(scenario: Scenario) -> None:
    """Re-verification changes no byte of the source run."""
    assert scenario.review_after == scenario.review_before


def test_newer_outcome_without_answer_stops_reuse(scenario: Scenario) -> None:
    """judge_failed (A) → agent failure → interrupted: skipped with a warning, exit 1, nothing written."""
    done = scenario.stopped_done
    assert done.returncode == 1, done.stderr
    assert "warning" in done.stderr and "stops the reuse" in done.stderr
    assert "execution 1" in done.stderr and "execution 0" in done.stderr
    assert not scenario.stopped_out.exists()


@pytest.mark.parametrize(
    ("target", "message"),
    [("the source", "the source run"), ("another run", "belongs to an established run")],
)
def test_refuses_to_write_into_an_established_run(scenario: Scenario, target: str, message: str) -> None:
    """An output that is the source or another run is refused (exit 2, saying why); no byte changes."""
    output = scenario.review if target == "the source" else scenario.stopped
    before = snapshot(output.parent)
    refused = reverify(scenario.review, output, "http://127.0.0.1:9")
    assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    assert snapshot(output.parent) == before


def test_outputs_are_plain_jsonl(scenario: Scenario) -> None:
    """The output and its sidecar are JSON lines with the stamps of the source run."""
    run_id = read_jsonl(scenario.review)[0]["_ng_run_id"]
    rows = read_jsonl(scenario.review_out) + read_jsonl(companion(scenario.review_out, "_failures.jsonl"))
    assert {row["_ng_run_id"] for row in rows} == {run_id}
    assert all(json.dumps(row) for row in rows)
