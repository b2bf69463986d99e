"""gymslurm against NeMo Gym 0.7.0's own servers, unchanged (issue 11; docs/nemo-gym.md).

The stack (tests/compat/nemogym.py) is NeMo Gym's head server, the ``example_single_tool_call`` weather
resources server, ``simple_agent`` and ``openai_model`` in front of a loopback fake model, with three
Environment Servers in front: the typed ``single_agent_turn``, the ``legacy_agent`` relay (435 of the
438 environment servers NeMo Gym ships) and the ``single_agent_turn_legacy`` adapter. gymslurm's own
``collect`` and ``aggregate`` drive them as subprocesses; NeMo Gym's ``gym eval aggregate`` reads
gymslurm's outputs. Every answer of the fake model is right, so every rollout earns reward 1.0.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gymslurm.demo.model import DEFAULT_MODEL
from tests.compat.gym_eval import HEAD_SERVER, gym_aggregate
from tests.compat.nemogym import ADAPTER, DEMO_POLICY, RELAY, TYPED, Stack
from tests.e2e.helpers import REPO_ROOT, collect_args, gymslurm

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

ROWS = 5


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def collect(stack: Stack, output: Path, server: str, *overrides: str) -> Any:
    """``gymslurm collect`` of NeMo Gym's example dataset through one of the stack's Environment Servers."""
    args = collect_args(stack.dataset, output, stack.urls[server], "+taskset=weather", *overrides)
    return gymslurm(*args, timeout=600)


def test_the_typed_environment_server_runs_every_task(nemo_gym_stack: Stack, tmp_path: Path) -> None:
    """single_agent_turn, driven unchanged with the typed protocol: 5/5 results, reward 1.0 each."""
    output = tmp_path / "typed.jsonl"
    done = collect(nemo_gym_stack, output, TYPED)
    assert done.returncode == 0, done.stderr
    results = rows(output)
    assert len(results) == ROWS and {row["reward"] for row in results} == {1.0}


def test_the_legacy_agent_relay_runs_every_task(nemo_gym_stack: Stack, tmp_path: Path) -> None:
    """legacy_agent (the relay of 435 shipped benchmarks): the flat row out, the verify response back, 5/5."""
    output = tmp_path / "relay.jsonl"
    done = collect(nemo_gym_stack, output, RELAY, "+environment_protocol=legacy_agent")
    assert done.returncode == 0, done.stderr
    results = rows(output)
    assert len(results) == ROWS and {row["reward"] for row in results} == {1.0}
    assert not (tmp_path / "relay_failures.jsonl").exists() or not rows(tmp_path / "relay_failures.jsonl")


def test_the_legacy_adapter_runs_every_task(nemo_gym_stack: Stack, tmp_path: Path) -> None:
    """single_agent_turn_legacy: the typed request answered flat is read as a legacy result, 5/5."""
    output = tmp_path / "adapter.jsonl"
    done = collect(nemo_gym_stack, output, ADAPTER, "+environment_protocol=legacy_reply")
    assert done.returncode == 0, done.stderr
    results = rows(output)
    assert len(results) == ROWS and {row["reward"] for row in results} == {1.0}
    assert {row["agent_ref"]["name"] for row in results} == {"weather_agent"}


# --- NeMo Gym's tools on gymslurm's outputs --------------------------------------------------------


@pytest.fixture(scope="module")
def relay_run(nemo_gym_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One collection through the legacy relay, killed (SIGKILL) after its first result, then resumed."""
    output = tmp_path_factory.mktemp("relay-kill") / "relay.jsonl"
    args = collect_args(
        nemo_gym_stack.dataset,
        output,
        nemo_gym_stack.urls[RELAY],
        "+taskset=weather",
        "+environment_protocol=legacy_agent",
        "+concurrency=1",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gymslurm", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not (output.exists() and output.read_bytes().count(b"\n") >= 1) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert output.read_bytes().count(b"\n") < ROWS, "the collection finished before it could be killed"
    done = gymslurm(*args, "+resume_from_cache=true", timeout=600)
    assert done.returncode == 0, done.stderr
    return output


def test_a_killed_relay_collection_resumes_to_every_task(relay_run: Path) -> None:
    """SIGKILL mid-run, then +resume_from_cache=true: every task once in the selection, reward 1.0."""
    merged = relay_run.parent / "merged.jsonl"
    done = gymslurm("aggregate", str(relay_run), f"+output_jsonl_fpath={merged}")
    assert done.returncode == 0, done.stderr
    selected = rows(merged)
    assert sorted(row["_ng_rollout_id"] for row in selected) == [f"weather-{n}" for n in range(ROWS)]
    assert {row["reward"] for row in selected} == {1.0}


def test_rows_are_stamped_as_nemo_gym_stamps_them(relay_run: Path) -> None:
    """Each row names its Environment Server, that server's type, its agent and its task id."""
    for row in rows(relay_run):
        assert row["_ng_environment_server"] == RELAY and row["_ng_result_type"] == "legacy_agent"
        assert row["agent_ref"] == {"name": "weather_agent"}
        assert row["_ng_task_id"] == row["task_id"]


def test_collect_writes_nemo_gyms_metrics_file_from_the_server(relay_run: Path) -> None:
    """<stem>_aggregate_metrics.json: NeMo Gym's list of per-server entries, from POST /aggregate_metrics."""
    (entry,) = json.loads((relay_run.parent / "relay_aggregate_metrics.json").read_text())
    assert entry["_ng_environment_server"] == RELAY and entry["agent_ref"] == {"name": "weather_agent"}
    assert entry["agent_metrics"] and "gymslurm_note" not in entry
    own = json.loads((relay_run.parent / "relay_gymslurm_metrics.json").read_text())
    assert own["metrics"]["coverage/measured"] == ROWS


def test_nemo_gyms_aggregate_reads_gymslurms_outputs(nemo_gym_stack: Stack, relay_run: Path) -> None:
    """gym eval aggregate on gymslurm's results file computes full metrics (not an empty list)."""
    entries = gym_aggregate(nemo_gym_stack, relay_run, relay_run.parent / "ng" / "ng.jsonl")
    assert [entry["_ng_environment_server"] for entry in entries] == [RELAY]
    assert entries[0]["agent_metrics"]


# --- NeMo Gym's own collector on the same stack: repeated rows, and the same results ------------


@pytest.fixture(scope="module")
def nemo_gym_collection(nemo_gym_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NeMo Gym's collector (gym eval run --no-serve) through the relay, num_repeats=2: its results file."""
    output = tmp_path_factory.mktemp("ng-run") / "ng.jsonl"
    done = nemo_gym_stack.gym_command(
        "eval",
        "run",
        "--no-serve",
        *HEAD_SERVER,
        "+disable_health_check=true",
        f"+input_jsonl_fpath={nemo_gym_stack.dataset}",
        f"+output_jsonl_fpath={output}",
        "+num_repeats=2",
        "+environment_routing_mode=legacy",
        f"+environment_server_name={RELAY}",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return output


def test_nemo_gyms_repeated_rows_are_collected_with_nemo_gyms_ids(
    nemo_gym_stack: Stack, nemo_gym_collection: Path, tmp_path: Path
) -> None:
    """NeMo Gym's materialized file of a num_repeats=2 run: one rollout per row, ids <task>-<rollout>."""
    materialized = nemo_gym_collection.parent / "ng_materialized_inputs.jsonl"
    output = tmp_path / "repeated.jsonl"
    args = collect_args(
        materialized,
        output,
        nemo_gym_stack.urls[RELAY],
        "+taskset=weather",
        "+environment_protocol=legacy_agent",
    )
    done = gymslurm(*args, timeout=600)
    assert done.returncode == 0, done.stderr
    results = rows(output)
    assert sorted(row["_ng_rollout_id"] for row in results) == sorted(
        f"{task}-{repeat}" for task in range(ROWS) for repeat in range(2)
    )
    assert {row["reward"] for row in results} == {1.0}


def test_gymslurm_and_nemo_gyms_collector_get_the_same_results(
    nemo_gym_collection: Path, relay_run: Path
) -> None:
    """Through the same relay, gymslurm's rows hold what NeMo Gym's hold (rewards, verify-response fields)."""
    ours = {row["_ng_task_index"]: row for row in rows(relay_run)}
    theirs = [row for row in rows(nemo_gym_collection) if row["_ng_rollout_index"] == 0]
    assert len(theirs) == len(ours) == ROWS
    gymslurm_stamps = {"_ng_run_id", "_ng_attempt", "_ng_rollout_id", "task_id", "_ng_task_id"}
    for row in theirs:
        mine = ours[row["_ng_task_index"]]
        assert mine["reward"] == row["reward"]
        shared = {key for key in row if not key.startswith("ng_") and key not in ("_ng_attempt_index",)}
        assert shared <= set(mine), sorted(shared - set(mine))
        assert set(mine) - set(row) <= gymslurm_stamps, sorted(set(mine) - set(row))
        assert mine["responses_create_params"]["input"] == row["responses_create_params"]["input"]


def test_nemo_gyms_openai_model_serves_the_demo_model_servers_answers(nemo_gym_stack: Stack) -> None:
    """NeMo Gym's own ``openai_model`` (unchanged) in front of ``gymslurm demo-model-server``: its
    ``/v1/responses`` calls the demo model server's Responses API and NeMo Gym's response model
    accepts the reply, whose text is the demo model's own answer to the same question."""
    import httpx

    question = {"input": [{"role": "user", "content": "What is 17 + 25?"}]}
    direct = httpx.post(
        nemo_gym_stack.urls["demo_model"] + "/v1/responses", json=question, timeout=60, trust_env=False
    )
    via = httpx.post(
        nemo_gym_stack.urls[DEMO_POLICY] + "/v1/responses", json=question, timeout=60, trust_env=False
    )
    assert (direct.status_code, via.status_code) == (200, 200), via.text[:500]

    def text(reply: dict[str, Any]) -> str:
        return "".join(
            part["text"]
            for item in reply["output"]
            if item.get("type") == "message"
            for part in item["content"]
            if part.get("type") == "output_text"
        )

    assert text(via.json()) == text(direct.json()) != ""
    assert via.json()["model"] == DEFAULT_MODEL


# --- A suite of NeMo Gym benchmarks: each one's merged output is what NeMo Gym reads alone ---------

SUITE = {"relay": (2, []), "repeats": (1, ["+num_repeats=2"])}  # name: shards, collector overrides


def _nemo_gym_benchmark(stack: Stack, folder: Path, name: str) -> Path:
    """A benchmark of the stack's relay (through its head server, which every job is given)."""
    shards, extra = SUITE[name]
    overrides = [
        "+route_failures_to_sidecar=true",
        "+environment_routing_mode=legacy",
        f"+environment_server_name={RELAY}",
        "+taskset=weather",
        *extra,
    ]
    path = folder / f"{name}.yaml"
    path.write_text(
        f"dataset: {stack.dataset}\noutput_stem: weather\nshards: {shards}\n"
        f"servers:\n  - name: nemo_gym\n    url: {stack.head_url}\n    collector_override: +head_server_url\n"
        f"collector:\n  overrides: {json.dumps(overrides)}\n"
    )
    return path


@pytest.fixture(scope="module")
def suite_and_alone(nemo_gym_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``gymslurm submit relay.yaml repeats.yaml`` (a suite sharing the stack) and each benchmark
    submitted alone, the three at once on the local backend: each merged output, by ``suite/NAME``
    and ``alone/NAME``."""
    folder = tmp_path_factory.mktemp("suite-vs-alone")
    files = {name: _nemo_gym_benchmark(nemo_gym_stack, folder, name) for name in SUITE}
    runs = {"suite": [*map(str, files.values())], **{f"alone-{n}": [str(p)] for n, p in files.items()}}
    processes = {
        label: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gymslurm",
                "submit",
                *given,
                "--backend=local",
                "--wait",
                f"run_root={folder / label}",
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for label, given in runs.items()
    }
    for label, process in processes.items():
        out, _ = process.communicate(timeout=900)
        assert process.returncode == 0, f"{label}: {out[-3000:]}"
    merged = {}
    for name in SUITE:
        (merged[f"suite/{name}"],) = folder.glob(f"suite/*/benchmarks/{name}/output/merged/weather.jsonl")
        (merged[f"alone/{name}"],) = folder.glob(f"alone-{name}/*/output/merged/weather.jsonl")
    return merged


@pytest.mark.parametrize("name", sorted(SUITE))
def test_nemo_gyms_aggregate_of_a_suite_benchmark_is_that_of_the_benchmark_alone(
    nemo_gym_stack: Stack, suite_and_alone: dict[str, Path], tmp_path: Path, name: str
) -> None:
    """Each benchmark of a suite run (its own folder, merged by the suite's aggregation): the same
    rollouts and rewards as submitted alone, and ``gym eval aggregate`` on it gives what it gives
    on the run alone."""
    suite, alone = suite_and_alone[f"suite/{name}"], suite_and_alone[f"alone/{name}"]

    def graded(path: Path) -> list[tuple[str, float]]:  # NeMo Gym's response ids differ run to run
        return sorted((row["_ng_rollout_id"], row["reward"]) for row in rows(path))

    assert graded(suite) == graded(alone) and len(graded(suite)) == ROWS * (2 if name == "repeats" else 1)
    ours = gym_aggregate(nemo_gym_stack, suite, tmp_path / "suite" / "ng.jsonl")
    theirs = gym_aggregate(nemo_gym_stack, alone, tmp_path / "alone" / "ng.jsonl")
    assert [e["_ng_environment_server"] for e in ours] == [RELAY] and ours[0]["agent_metrics"]
    assert ours == theirs
