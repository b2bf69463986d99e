"""End to end: the real demo server subprocess on loopback, driven over HTTP with httpx."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gymslurm.demo.http import DIE_EXIT_CODE
from tests.e2e.conftest import REPO_ROOT, DemoServer

pytestmark = pytest.mark.e2e


def run_body(rollout_id: str = "arith-17", attempt: int = 0, **extra: Any) -> dict[str, Any]:
    """A /run request for 17 + 25, with extra task_input fields."""
    task_input = {"question": "What is 17 + 25?", "a": 17, "b": 25, "op": "+", **extra}
    return {
        "episode_id": {"rollout_id": rollout_id, "attempt": attempt},
        "task": {"task_id": {"taskset": "arith", "task_id": "17"}, "task_input": task_input},
    }


def test_run_answers_a_graded_result(shared_demo_server: DemoServer) -> None:
    """A /run request gets a graded result echoing the episode and task ids."""
    reply = httpx.post(f"{shared_demo_server.url}/run", json=run_body())
    assert reply.status_code == 200
    payload = reply.json()
    assert payload["episode_id"] == {"rollout_id": "arith-17", "attempt": 0}
    assert payload["task_id"] == {"taskset": "arith", "task_id": "17"}
    assert payload["result"]["expected_answer"] == "42"
    assert payload["result"]["reward"] in (0.0, 1.0)


def test_accuracy_one_answers_every_task_correctly(start_demo_server: Callable[..., DemoServer]) -> None:
    """With --accuracy 1.0 every rollout is rewarded 1.0 over one keep-alive connection."""
    server = start_demo_server("--accuracy", "1.0")
    with httpx.Client(base_url=server.url) as client:
        rewards = [client.post("/run", json=run_body(f"r{i}")).json()["result"]["reward"] for i in range(50)]
    assert rewards == [1.0] * 50


def test_unknown_field_is_rejected_with_422(shared_demo_server: DemoServer) -> None:
    """An unknown request field is answered 422 with a JSON error naming it."""
    reply = httpx.post(f"{shared_demo_server.url}/run", json={**run_body(), "extra": 1})
    assert reply.status_code == 422
    assert reply.json()["detail"][0]["loc"] == ["body", "extra"]


def test_aggregate_metrics_reports_mean_reward(shared_demo_server: DemoServer) -> None:
    """/aggregate_metrics answers flat agent and key metrics with the mean reward."""
    items = [{"_ng_task_index": 0, "reward": 1.0}, {"_ng_task_index": 1, "reward": 0.0}]
    reply = httpx.post(f"{shared_demo_server.url}/aggregate_metrics", json={"verify_responses": items})
    assert reply.status_code == 200
    assert reply.json()["key_metrics"]["mean/reward"] == 0.5
    assert len(reply.json()["group_level_metrics"]) == 2


def test_global_config_names_model_accuracy_verifier_and_seed(
    start_demo_server: Callable[..., DemoServer],
) -> None:
    """/global_config_dict_yaml serves the resolved configuration as a JSON-encoded YAML string."""
    server = start_demo_server("--model-name", "m1", "--accuracy", "0.25", "--seed", "7")
    config = yaml.safe_load(httpx.get(f"{server.url}/global_config_dict_yaml").json())
    policy = config["policy_model"]["responses_api_models"]["demo_policy"]
    assert policy == {"model": "m1", "accuracy": 0.25, "seed": 7}
    assert config["gymslurm_demo"]["resources_servers"]["gymslurm_demo"]["verifier"] == "exact_match"


def test_global_config_text_changes_with_accuracy(start_demo_server: Callable[..., DemoServer]) -> None:
    """Two servers with different accuracies serve different configuration texts."""
    first, second = start_demo_server("--accuracy", "0.5"), start_demo_server("--accuracy", "0.6")
    texts = {httpx.get(f"{server.url}/global_config_dict_yaml").text for server in (first, second)}
    assert len(texts) == 2


@pytest.mark.parametrize(
    ("fault", "key", "expected"),
    [
        ("retryable", "failure", {"terminal": False, "failure_kind": "session_lost", "stage": "seed"}),
        ("terminal", "failure", {"terminal": True, "failure_kind": "agent_command_not_allowed"}),
        ("omit", "result", {"_ng_no_persist": True}),
        ("masked", "result", {"mask_sample": True, "failure_kind": "verifier_error"}),
    ],
)
def test_scripted_fault_reply(
    shared_demo_server: DemoServer, fault: str, key: str, expected: dict[str, Any]
) -> None:
    """A task's _demo_fault produces that fault's documented reply over the wire."""
    payload = httpx.post(f"{shared_demo_server.url}/run", json=run_body(_demo_fault=fault)).json()
    assert expected.items() <= payload[key].items()


def test_http503_fault_answers_503_with_retry_after(shared_demo_server: DemoServer) -> None:
    """The http503 fault answers HTTP 503 with a Retry-After header."""
    reply = httpx.post(f"{shared_demo_server.url}/run", json=run_body(_demo_fault="http503"))
    assert (reply.status_code, reply.headers["retry-after"]) == (503, "1")


def test_fault_attempts_limit_lets_the_retry_succeed(shared_demo_server: DemoServer) -> None:
    """With _demo_fault_attempts 1 attempt 0 fails and attempt 1 gets a result."""
    body: dict[str, Any] = {"_demo_fault": "retryable", "_demo_fault_attempts": 1}
    first = httpx.post(f"{shared_demo_server.url}/run", json=run_body(attempt=0, **body)).json()
    second = httpx.post(f"{shared_demo_server.url}/run", json=run_body(attempt=1, **body)).json()
    assert "failure" in first
    assert "result" in second


def test_rate_flag_faults_every_attempt(start_demo_server: Callable[..., DemoServer]) -> None:
    """--terminal-rate 1 makes every attempt a terminal failure."""
    server = start_demo_server("--terminal-rate", "1")
    with httpx.Client(base_url=server.url) as client:
        replies = [client.post("/run", json=run_body(f"r{i}")).json() for i in range(5)]
    assert all(reply["failure"]["terminal"] is True for reply in replies)


def test_die_fault_exits_without_answering(demo_server: DemoServer) -> None:
    """The die fault closes the connection unanswered and the process exits with DIE_EXIT_CODE."""
    with pytest.raises(httpx.TransportError):
        httpx.post(f"{demo_server.url}/run", json=run_body(_demo_fault="die"))
    assert demo_server.process.wait(timeout=10) == DIE_EXIT_CODE
    assert "injected fault 'die'" in demo_server.stderr()


def test_die_after_answers_n_requests_then_dies(start_demo_server: Callable[..., DemoServer]) -> None:
    """--die-after 2 answers two /run requests and dies on the third."""
    server = start_demo_server("--die-after", "2")
    with httpx.Client(base_url=server.url) as client:
        statuses = [client.post("/run", json=run_body(f"r{i}")).status_code for i in range(2)]
        with pytest.raises(httpx.TransportError):
            client.post("/run", json=run_body("r2"))
    assert statuses == [200, 200]
    assert server.process.wait(timeout=10) == DIE_EXIT_CODE


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(demo_server: DemoServer, signum: signal.Signals) -> None:
    """SIGTERM and SIGINT make the server exit 0 after printing its summary."""
    httpx.post(f"{demo_server.url}/run", json=run_body())
    demo_server.process.send_signal(signum)
    assert demo_server.process.wait(timeout=10) == 0
    assert "stopped after 1 /run requests" in demo_server.stderr()


def test_write_dataset_writes_n_rows(tmp_path: Path) -> None:
    """--write-dataset PATH --n N writes N JSONL task rows and exits 0."""
    path = tmp_path / "tasks.jsonl"
    command = [sys.executable, "-m", "gymslurm", "demo-server", "--write-dataset", str(path), "--n", "5"]
    subprocess.run(command, cwd=REPO_ROOT, check=True, capture_output=True, timeout=60)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["task_id"]["task_id"] for row in rows] == ["0", "1", "2", "3", "4"]
