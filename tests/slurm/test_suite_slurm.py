"""A suite on the multi-node Slurm sandbox as the test user (issue 30, docs/suites.md).

Three demo benchmarks (the real collector, the demo Environment Server, one shared demo model
server a link), two shards, so two suite chains. Chain 1's first link is preempted by a ``high``
job as soon as it started (the ``low`` partition is requeued: the same job runs again); chain 0's
first link is SIGKILLed mid-collection (its chain-step process: its queued successor judges it and
carries on); ``broken``'s collector exits 1 every time
until a file ``fixed`` exists (a crash loop whose fix leaves the benchmark's config, so its
identity, as it was). Then ``fixed`` is written and the suite resubmitted.

The links ask for all four GPUs of their node, so the preemptor (one GPU on the link's node) can
take it only from this test's link: no other test's job holds a GPU there (the other preempting
tests take a whole node's CPUs, or a GPU of their own link's node).
"""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support import wait_until

from .helpers import SlurmCluster, SlurmUser, job_nodes, scenario_user
from .launcher_chains import FINAL, Chain
from .nodes import preempt_on

pytestmark = pytest.mark.slurm

TASKS = 24  # per benchmark, 12 a shard
NAMES = ("arith", "broken", "twice")  # twice: the same tasks, 2 repeats each
ROWS = {"arith": TASKS, "twice": 2 * TASKS}
# A model server of 1 slot at 0.7-1.4 s a completion: a link collects its 36 rows for about a
# minute, long enough to be killed or preempted while they are in flight (the sandbox's Slurm took
# up to 25 s to preempt).
MODEL_FLAGS = ["--slots", "1", "--latency-ms", "700"]
GATE = '[ -e "$(dirname "$0")/fixed" ] || { echo "broken: no fix yet" >&2; exit 1; }\nexec "$@"\n'


def _dataset() -> str:
    """The demo dataset of TASKS tasks (JSONL)."""
    from gymslurm.demo.server import write_dataset

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tasks.jsonl"
        write_dataset(path, TASKS, seed=0)
        return path.read_text()


def _benchmark(python: Path, collector: list[str]) -> str:
    """A demo benchmark whose Environment Server asks the suite's ``policy`` server."""
    server = [str(python), "-m", "gymslurm", "demo-server", "--host", "{host}", "--port", "{port}"]
    aggregate = [str(python), "-m", "gymslurm", "aggregate", "{inputs_glob}", "+output_jsonl_fpath={output}"]
    return (
        "servers:\n  - name: demo\n"
        f"    command: {json.dumps([*server, '--policy-url', '{servers.policy.url}'])}\n"
        "    host: 127.0.0.1\n    port: 0\n    health_path: /health\n"
        "    collector_override: +environment_server_url\n"
        f"collector:\n  command: {json.dumps(collector)}\n"
        '  overrides: ["+route_failures_to_sidecar=true", "+progress=plain"]\n'
        f"aggregation:\n  command: {json.dumps(aggregate)}\n"
    )


def _submit(user: SlurmUser, python: Path) -> Chain:
    """Write the benchmarks and the suite, submit it as the test user."""
    work = user.workdir
    data = user.write("data.jsonl", _dataset(), mode=0o644)
    collect = [str(python), "-m", "gymslurm", "collect"]
    gate = user.write("gate.sh", GATE)
    user.write("bench.yaml", _benchmark(python, collect), mode=0o644)
    user.write("broken.yaml", _benchmark(python, ["sh", str(gate), *collect]), mode=0o644)
    model = [str(python), "-m", "gymslurm", "demo-model-server", "--host", "{host}", "--port", "{port}"]
    suite = user.write(
        "suite.yaml",
        f"run_root: {work / 'runs'}\nshards: 2\n"
        f"stack:\n  - name: policy\n    command: {json.dumps([*model, *MODEL_FLAGS])}\n"
        "    probe: chat_completions\n    collector_override: null\n"
        f"slurm: {{python: {python}, time: '00:05:00', partition: low, gpus: 4, infra_retry_limit: 1}}\n"
        "benchmarks:\n"
        f"  - {{name: arith, benchmark: {work / 'bench.yaml'}, dataset: {data}}}\n"
        f"  - {{name: broken, benchmark: {work / 'broken.yaml'}, dataset: {data}}}\n"
        f"  - {{name: twice, benchmark: {work / 'bench.yaml'}, dataset: {data}, repeats: 2}}\n",
        mode=0o644,
    )
    chain = Chain(user, python, steps=[])
    out = chain.gymslurm("submit", str(suite))
    match = re.search(r"gymslurm status (\S+)", out)
    assert match, out
    chain.run = Path(match.group(1))
    return chain


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _rows(chain: Chain, name: str, shard: int | None) -> list[dict[str, Any]]:
    """A benchmark's rows: a shard's output, or (None) its merged output."""
    assert chain.run is not None
    folder = "merged" if shard is None else f"shard-{shard:03d}"
    return _records(chain.run / "benchmarks" / name / "output" / folder / "rollouts.jsonl")


def _saved(chain: Chain, name: str, shard: int) -> int:
    """Whole rows a benchmark's shard output holds so far (a row being written is not counted)."""
    assert chain.run is not None
    path = chain.run / "benchmarks" / name / "output" / f"shard-{shard:03d}" / "rollouts.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _running_link(chain: Chain, shard: int, rows: int) -> str:
    """The job id of the suite chain's running link once it started the model server and its
    collectors saved ``rows`` rows."""
    wait_until(
        lambda: (
            any(r["kind"] == "server" for r in chain.ledger(shard))
            and _saved(chain, "arith", shard) + _saved(chain, "twice", shard) >= rows
        ),
        240,
        f"{rows} rows of chain {shard}'s first link",
        every_s=0.2,
    )
    return str([r for r in chain.ledger(shard) if r["kind"] == "start"][-1]["job_id"])


def _kill_link(chain: Chain, shard: int) -> None:
    """SIGKILL the ``chain-step`` process of the suite chain's running link: it writes nothing more
    (``scancel --signal=KILL`` does not do it: with ``--full`` Slurm sends TERM first and the link
    decides, with ``--batch`` only the batch shell dies)."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info["cmdline"] or []
        if "chain-step" in argv and str(chain.run) in argv and argv[argv.index("--shard") + 1] == str(shard):
            os.kill(proc.info["pid"], signal.SIGKILL)
            return
    raise AssertionError(f"no chain-step process of chain {shard} of {chain.run}")


def _final(chain: Chain, aggregations: int, timeout: float) -> dict[str, Any]:
    """``status --json`` once every chain and benchmark is final and the suite's aggregation ran
    ``aggregations`` times."""

    def final() -> dict[str, Any] | None:
        report = chain.status()
        done = [r for r in chain.ledger(None) if r["kind"] == "decision"]
        ended = all(r["verdict"] in FINAL for r in [*report["shards"], *report["suite"]])
        return report if ended and len(done) >= aggregations else None

    return wait_until(final, timeout, lambda: json.dumps(chain.status(), indent=1)[-4000:], every_s=2.0)


def _one_model_server_a_link(chain: Chain) -> None:
    """Every link of both suite chains (a requeued run counted apart) started the policy server once."""
    for shard in (0, 1):
        records = chain.ledger(shard)
        links = Counter((r["job_id"], r["restart_count"]) for r in records if r["kind"] == "start")
        policy = Counter(
            (r["job_id"], r["restart_count"])
            for r in records
            if r["kind"] == "server" and r["name"] == "policy" and r["event"] == "started"
        )
        assert policy == links, (shard, policy, links)


def _merged_once(chain: Chain, name: str) -> None:
    """A benchmark's merged output holds each of its rollouts exactly once."""
    ids = Counter(row["_ng_rollout_id"] for row in _rows(chain, name, None))
    assert len(ids) == ROWS[name] and set(ids.values()) == {1}, (name, ids.most_common(3))


def _untouched(chain: Chain, name: str) -> dict[str, bytes]:
    """Every file of a benchmark's shard ledgers and shard outputs, by path."""
    assert chain.run is not None
    root = chain.run / "benchmarks" / name
    files = [*root.glob("shards/*/ledger.jsonl"), *root.glob("output/shard-*/*")]
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(files) if p.is_file()}


def test_a_suite_survives_kills_preemption_and_a_crash_loop_and_a_resubmit_finishes_only_the_broken(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> None:
    """Chain 0's first link SIGKILLed, chain 1's preempted (requeued), ``broken`` crash-looping:
    arith and twice end DONE, broken EXHAUSTED, every link started the model server once, each
    benchmark merged once with each rollout once. ``broken`` fixed, the suite resubmitted: it ends
    DONE with its rows, and arith's and twice's ledgers and shard files are byte for byte the same."""
    chain = _submit(scenario_user(slurm_session_dir, "suite"), slurm_python)
    try:
        preempted = _running_link(chain, 1, rows=0)  # at once: Slurm takes its time to preempt
        (node,) = job_nodes(preempted)  # one GPU of the link's node: only this link holds any there
        preempt_on(chain.user, node, "--gres=gpu:1")
        killed = _running_link(chain, 0, rows=1)
        _kill_link(chain, 0)
        report = _final(chain, aggregations=1, timeout=420)
        verdicts = {row["benchmark"]: row["verdict"] for row in report["suite"]}
        assert verdicts == {"arith": "DONE", "broken": "EXHAUSTED", "twice": "DONE"}, report["suite"]
        assert [row["verdict"] for row in report["shards"]] == ["EXHAUSTED", "EXHAUSTED"]
        zero, one = chain.ledger(0), chain.ledger(1)
        judged = [r for r in zero if r["kind"] == "decision" and r["job_id"] == killed]
        assert [r["accounted_by"] not in (None, killed) for r in judged] == [True], judged  # by its successor
        first = [
            r for r in one if r["kind"] == "decision" and (r["job_id"], r["restart_count"]) == (preempted, 0)
        ]
        assert [r["slurm_state"] for r in first] == ["SIGNALLED:SIGTERM"], first  # the preemption's TERM
        assert (preempted, 1) in {(r["job_id"], r["restart_count"]) for r in one if r["kind"] == "start"}
        _one_model_server_a_link(chain)
        aggregation = [r["kind"] for r in chain.ledger(None)]
        assert (aggregation.count("start"), aggregation.count("decision")) == (1, 1), aggregation
        for name in ("arith", "twice"):
            _merged_once(chain, name)
        assert chain.run is not None
        metrics = json.loads((chain.run / "suite_metrics.json").read_text())
        assert [(b["name"], b["verdict"], b["rows"]) for b in metrics["benchmarks"]] == [
            ("arith", "DONE", TASKS),
            ("broken", "EXHAUSTED", 0),
            ("twice", "DONE", 2 * TASKS),
        ]
        kept = {name: _untouched(chain, name) for name in ("arith", "twice")}

        chain.user.write("fixed", "", mode=0o644)
        chain.gymslurm("resubmit", str(chain.run), str(chain.user.workdir / "suite.yaml"))
        report = _final(chain, aggregations=2, timeout=300)
        assert {row["benchmark"]: row["verdict"] for row in report["suite"]} == dict.fromkeys(NAMES, "DONE")
        assert [row["verdict"] for row in report["shards"]] == ["DONE", "DONE"]
        for name, files in kept.items():
            assert _untouched(chain, name) == files, name
            _merged_once(chain, name)
        broken = Counter(row["_ng_rollout_id"] for row in _rows(chain, "broken", None))
        assert len(broken) == TASKS and set(broken.values()) == {1}
        _one_model_server_a_link(chain)
        metrics = json.loads((chain.run / "suite_metrics.json").read_text())
        assert [(b["verdict"], b["rows"]) for b in metrics["benchmarks"]] == [
            ("DONE", TASKS),
            ("DONE", TASKS),
            ("DONE", 2 * TASKS),
        ]
    finally:
        chain.cancel()
