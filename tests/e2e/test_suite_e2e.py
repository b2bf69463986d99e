"""A suite on the local backend with real processes (issue 30): one model server a link, every
benchmark's rows those it gives alone, a crash loop that stops only its benchmark, and a resubmit
that finishes it without rerunning the others (docs/suites.md)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.launcher_chains_helpers import STANDIN, gymslurm, status, wait_until_final

pytestmark = pytest.mark.e2e

VOLATILE = ("_ng_run_id",)  # differs between any two runs


def _rows(path: Path) -> list[str]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(json.dumps({k: v for k, v in r.items() if k not in VOLATILE}, sort_keys=True) for r in rows)


def _ledger(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _demo_suite(tmp: Path) -> Path:
    data = tmp / "data.jsonl"
    gymslurm("demo-server", "--write-dataset", str(data), "--n", "12")
    suite = tmp / "three.yaml"
    suite.write_text(
        f"run_root: {tmp / 'runs'}\nshards: 2\n"
        "stack:\n  - name: policy\n"
        '    command: ["{python}", -m, gymslurm, demo-model-server, --host, "{host}", --port, "{port}",'
        " --slow-start-s, '4']\n"  # a model load: the collectors start meanwhile
        "    probe: chat_completions\n    collector_override: null\n"
        "benchmarks:\n"
        f"  - {{name: a, benchmark: demo, dataset: {data}}}\n"
        f"  - {{name: b, benchmark: demo, dataset: {data}, shards: 1}}\n"
        f"  - {{name: c, benchmark: demo, dataset: {data}, repeats: 2}}\n"
    )
    return suite


def test_each_benchmark_of_a_suite_gives_the_rows_it_gives_alone_with_one_model_server_a_link(
    tmp_path: Path,
) -> None:
    """Three demo benchmarks, two chains: each chain's link starts the policy server once and every
    benchmark's merged rows (order aside) are the ones the benchmark gives submitted alone. The
    collectors start while the model server loads and dispatch only once it is up (each says so
    in the link's log); the run's summary line sums the benchmarks' rollouts."""
    suite = _demo_suite(tmp_path)
    waited = gymslurm("submit", str(suite), "--backend", "local", "--wait")
    assert "run: 48/48 ok, 0 failed" in waited.stdout, waited.stdout
    for name, coverage in (("a", "12/12"), ("b", "12/12"), ("c", "24/24")):  # as status prints them
        assert re.search(rf"^{name} +\d+ DONE +{coverage} ", waited.stdout, re.MULTILINE), waited.stdout
    (run,) = [p.parent for p in (tmp_path / "runs").glob("three-*/run.json")]
    for chain, members in ((0, "abc"), (1, "ac")):
        (log,) = (run / "logs").glob(f"shard-{chain:03d}*")
        said = log.read_text()
        paused = said.count("supervision: down policy starting: not healthy yet")
        assert paused == len(members) and said.count("dispatch paused until the server is back") == paused
        for member in members:  # started before the model server was up, not after
            assert said.index(f"collector of {member}: ") < said.index("server 'policy' started")
        assert said.count("supervision: up policy") == paused
    data = tmp_path / "data.jsonl"
    for name, extra in (
        ("a", []),
        ("c", ['collector.overrides=["+route_failures_to_sidecar=true","+num_repeats=2"]']),
    ):
        root = tmp_path / f"alone-{name}"
        overrides = [f"dataset={data}", f"run_root={root}", "shards=2", *extra]
        gymslurm("submit", "demo", *overrides, "--backend", "local", "--wait")
        (alone,) = [p.parent for p in root.glob("demo-*/run.json")]
        merged = run / "benchmarks" / name / "output/merged/rollouts.jsonl"
        assert _rows(merged) == _rows(alone / "output/merged/rollouts.jsonl"), name
    assert _rows(run / "benchmarks/b/output/merged/rollouts.jsonl") == _rows(
        run / "benchmarks/a/output/merged/rollouts.jsonl"
    )
    for chain in (0, 1):
        records = _ledger(run / f"shards/{chain:03d}/ledger.jsonl")
        starts = [r for r in records if r["kind"] == "start"]
        policy = [
            r for r in records if r["kind"] == "server" and r["name"] == "policy" and r["event"] == "started"
        ]
        assert len(policy) == len(starts) >= 1
    metrics = json.loads((run / "suite_metrics.json").read_text())
    assert [(b["name"], b["tasks"], b["rows"], b["verdict"]) for b in metrics["benchmarks"]] == [
        ("a", 12, 12, "DONE"),
        ("b", 12, 12, "DONE"),
        ("c", 12, 24, "DONE"),
    ]
    assert [row["verdict"] for row in status(run)["suite"]] == ["DONE", "DONE", "DONE"]
    _aggregated_again_merges_only_what_changed(run)


def _aggregated_again_merges_only_what_changed(run: Path) -> None:
    """The suite's aggregation run again (a resubmitted suite) does not rewrite a benchmark merged
    before whose files did not change (its merge seal holds: same inode, same mtime); one whose
    settings file was written again (its identity changed, even with the same bytes) is merged again."""
    from gymslurm.job.aggregation import merge_run
    from gymslurm.job.heartbeat import Signals
    from gymslurm.job.suite_aggregation import merge_suite
    from gymslurm.launcher.rundir import RunDir

    def merged(name: str) -> dict[str, tuple[int, int]]:
        folder = run / "benchmarks" / name / "output/merged"
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}

    before = {name: merged(name) for name in "abc"}
    code, said = merge_suite(RunDir(run), Signals(), merge_run)
    assert code == 0 and said.count("(sealed: merged before, unchanged since)") == 3, said
    assert {name: merged(name) for name in "abc"} == before
    settings = run / "benchmarks/a/benchmark.yaml"
    settings.write_bytes(settings.read_bytes())
    code, said = merge_suite(RunDir(run), Signals(), merge_run)
    assert code == 0 and said.count("(sealed: merged before, unchanged since)") == 2, said
    assert merged("a") != before["a"] and {name: merged(name) for name in "bc"} == {
        n: before[n] for n in "bc"
    }


def _standin_suite(tmp: Path) -> Path:
    (tmp / "data.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(4)))
    for name, steps in (
        ("ok", [{"exit": 75, "progress": 1}, {"exit": 0, "progress": 1}]),
        ("broken", [{"exit": 1}]),
    ):
        (tmp / f"{name}.json").write_text(json.dumps(steps))
        (tmp / f"{name}.yaml").write_text(
            f"dataset: {tmp / 'data.jsonl'}\n"
            f"collector:\n  command: [{sys.executable}, {STANDIN}, {tmp / (name + '.json')}]\n"
        )
    suite = tmp / "loop.yaml"
    suite.write_text(
        f"run_root: {tmp / 'runs'}\nshards: 2\n"
        "slurm: {infra_retry_limit: 1}\naggregation: {enabled: false}\n"
        "benchmarks:\n"
        f"  - {{name: first, benchmark: {tmp / 'ok.yaml'}}}\n"
        f"  - {{name: broken, benchmark: {tmp / 'broken.yaml'}}}\n"
        f"  - {{name: second, benchmark: {tmp / 'ok.yaml'}, shards: 1}}\n"
    )
    return suite


def test_a_crash_loop_stops_only_its_benchmark_and_a_resubmit_finishes_it_alone(tmp_path: Path) -> None:
    """``broken`` exits 1 every time: it ends EXHAUSTED after its one retry while the two others
    finish DONE; fixed and resubmitted, only ``broken`` runs again (the others' ledgers unchanged)."""
    suite = _standin_suite(tmp_path)
    gymslurm("submit", str(suite), "--backend", "local")
    (run,) = [p.parent for p in (tmp_path / "runs").glob("loop-*/run.json")]
    report = wait_until_final(run, aggregation=False)
    assert [r["verdict"] for r in report["shards"]] == ["EXHAUSTED", "EXHAUSTED"]
    assert {r["benchmark"]: r["verdict"] for r in report["suite"]} == {
        "first": "DONE",
        "broken": "EXHAUSTED",
        "second": "DONE",
    }
    kept = {
        name: (run / f"benchmarks/{name}/shards/000/ledger.jsonl").read_bytes()
        for name in ("first", "second")
    }
    (tmp_path / "broken.json").write_text(json.dumps([{"exit": 0, "progress": 4}]))
    gymslurm("resubmit", str(run), str(suite))
    report = wait_until_final(run, aggregation=False)
    assert [r["verdict"] for r in report["shards"]] == ["DONE", "DONE"]
    assert {r["benchmark"]: r["verdict"] for r in report["suite"]} == {
        "first": "DONE",
        "broken": "DONE",
        "second": "DONE",
    }
    for name, before in kept.items():
        assert (run / f"benchmarks/{name}/shards/000/ledger.jsonl").read_bytes() == before, name


def _two_then_edited(tmp: Path) -> tuple[Path, str]:
    (tmp / "data.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(4)))
    (tmp / "done.json").write_text(json.dumps([{"exit": 0, "progress": 4}]))
    (tmp / "ok.yaml").write_text(
        f"dataset: {tmp / 'data.jsonl'}\n"
        f"collector:\n  command: [{sys.executable}, {STANDIN}, {tmp / 'done.json'}]\n"
    )
    head = f"run_root: {tmp / 'runs'}\nshards: 2\naggregation: {{enabled: false}}\nbenchmarks:\n"
    suite = tmp / "edit.yaml"
    suite.write_text(
        head
        + f"  - {{name: first, benchmark: {tmp / 'ok.yaml'}}}\n"
        + f"  - {{name: second, benchmark: {tmp / 'ok.yaml'}, shards: 1}}\n"
    )
    return suite, head


def test_a_benchmark_added_to_a_finished_suite_runs_alone_and_a_dropped_one_keeps_its_files(
    tmp_path: Path,
) -> None:
    """The suite file edited after the run finished: ``third`` added, ``second`` dropped. Resubmit
    runs only ``third`` (``first``'s ledgers byte for byte the same), ``second``'s folder stays and
    is listed as dropped; a kept benchmark whose config changed is refused, nothing written."""
    suite, head = _two_then_edited(tmp_path)
    gymslurm("submit", str(suite), "--backend", "local")
    (run,) = [p.parent for p in (tmp_path / "runs").glob("edit-*/run.json")]
    wait_until_final(run, aggregation=False)
    first = [(run / f"benchmarks/first/shards/{k:03d}/ledger.jsonl").read_bytes() for k in (0, 1)]
    suite.write_text(
        head
        + f"  - {{name: first, benchmark: {tmp_path / 'ok.yaml'}}}\n"
        + f"  - {{name: third, benchmark: {tmp_path / 'ok.yaml'}, shards: 1}}\n"
    )
    gymslurm("resubmit", str(run), str(suite))
    report = wait_until_final(run, aggregation=False)
    assert {r["benchmark"]: r["verdict"] for r in report["suite"]} == {"first": "DONE", "third": "DONE"}
    assert [(run / f"benchmarks/first/shards/{k:03d}/ledger.jsonl").read_bytes() for k in (0, 1)] == first
    assert (run / "benchmarks/second/shards/000/ledger.jsonl").is_file()
    assert json.loads((run / "suite.json").read_text())["dropped"] == ["second"]
    saved = (run / "suite.json").read_bytes()
    suite.write_text(head + f"  - {{name: first, benchmark: {tmp_path / 'ok.yaml'}, repeats: 2}}\n")
    refused = gymslurm("resubmit", str(run), str(suite), check=False)
    assert refused.returncode != 0 and "benchmark 'first' is not the one run" in refused.stderr
    assert (run / "suite.json").read_bytes() == saved


def _server(name: str, script: str, timeout_s: float = 30) -> dict[str, Any]:
    """A server whose shell ``script`` ends by serving HTTP on ``$0`` (its port)."""
    return {
        "name": name,
        "command": ["sh", "-c", script, "{port}"],
        "health_path": "/",
        "startup_timeout_s": timeout_s,
    }


def test_each_benchmarks_own_servers_start_without_waiting_for_anothers_nor_the_model(tmp_path: Path) -> None:
    """A suite link starts every benchmark's own servers at once, while the shared stack still
    loads: the model server (``policy``) becomes healthy only once ``second``'s server has begun,
    and ``first``'s only once the model's has (one after another, each would wait its whole
    start-up timeout for nothing); their addresses are the model's known at its launch. A
    benchmark whose server fails is named with why, and every server started is handed back to be
    stopped and lives until then (a server dies with the thread that started it: the threads stay
    until released); the shared stack's server is not started again."""
    from gymslurm.job import servers as server_mod
    from gymslurm.job.stack_load import StackLoad
    from gymslurm.job.suite_link import Bench, OwnServers
    from gymslurm.launcher.ledger import summarize
    from gymslurm.launcher.rundir import RunDir
    from gymslurm.launcher.settings import ServerSettings, validate

    serve = f'exec {sys.executable} -m http.server "$0" --bind 127.0.0.1'
    began, model_up = tmp_path / "second-began", tmp_path / "model-up"
    policy = _server("policy", f"while [ ! -e {began} ]; do sleep 0.1; done; touch {model_up}; {serve}")
    own = {
        "first": _server("env", f"while [ ! -e {model_up} ]; do sleep 0.1; done; {serve}", timeout_s=5),
        "second": _server("env", f"touch {began}; {serve}"),
        "broken": _server("env", "exit 3", timeout_s=10),
    }
    todo = [
        Bench(
            name,
            RunDir(tmp_path / name),
            validate({"name": name, "dataset": "d.jsonl", "servers": [policy, server]}, name),
            summarize([]),
        )
        for name, server in own.items()
    ]
    started: list[server_mod.RunningServer] = []
    noted: list[tuple[str, str]] = []

    def note(event: str, server: server_mod.RunningServer, _cause: str) -> None:
        noted.append((event, server.name))

    stack = StackLoad(
        [ServerSettings(**policy)], tmp_path / "logs", 0, started, note=note, withheld=frozenset()
    )
    owned = OwnServers()
    try:
        stack.start()
        shared = stack.addresses()
        assert stack.loading and [s.name for s in shared] == ["policy"]
        failed = owned.start(
            todo, shared, started, 0, note=note, withheld=frozenset(), stack={"policy"}, beside=stack
        )
        assert stack.done.wait(10) and stack.failure() is None
        time.sleep(1.0)  # a server whose starting thread ended would be dead by now
        assert [s.process.poll() for s in started if s.process is not None] == [None, None, None]
        assert list(failed) == ["broken"] and isinstance(failed["broken"], server_mod.ServerStartError)
        assert sorted(s.name for s in started) == ["env", "env", "policy"]
        assert sorted(noted) == [("started", "env"), ("started", "env"), ("started", "policy")]
        for bench in todo[:2]:
            assert set(bench.urls) == {"policy", "env"} and bench.urls["policy"] == shared[0].url
        assert todo[0].urls["env"] != todo[1].urls["env"]
    finally:
        stack.stop()
        for server in started:
            server_mod.stop(server)
        owned.release()
        stack.release()


def test_a_stack_failing_while_the_collectors_wait_for_it_stops_them_as_a_stack_start_failure(
    tmp_path: Path,
) -> None:
    """The shared model server exits during its start-up after every collector started (they wait
    for it): the link stops them and decides each benchmark as a link whose stack did not start
    (retried once, then stopped: the same failure twice), never as its collector's own end."""
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(4)))
    (tmp_path / "wait.json").write_text(json.dumps([{"exit": 0, "progress": 0, "sleep": 60}]))
    (tmp_path / "wait.yaml").write_text(
        f"dataset: {tmp_path / 'data.jsonl'}\n"
        f"collector:\n  command: [{sys.executable}, {STANDIN}, {tmp_path / 'wait.json'}]\n"
    )
    dies = ["sh", "-c", "sleep 3; echo 'error: no weights'; exit 3", "{port}"]
    suite = tmp_path / "dies.yaml"
    suite.write_text(
        f"run_root: {tmp_path / 'runs'}\nshards: 1\naggregation: {{enabled: false}}\n"
        f"stack:\n  - {{name: policy, command: {json.dumps(dies)}, health_path: /,"
        " collector_override: null}\n"
        "benchmarks:\n"
        f"  - {{name: first, benchmark: {tmp_path / 'wait.yaml'}}}\n"
        f"  - {{name: second, benchmark: {tmp_path / 'wait.yaml'}}}\n"
    )
    gymslurm("submit", str(suite), "--backend", "local")
    (run,) = [p.parent for p in (tmp_path / "runs").glob("dies-*/run.json")]
    report = wait_until_final(run, aggregation=False)
    assert [r["verdict"] for r in report["shards"]] == ["FAILED"], report["shards"]
    for name in ("first", "second"):
        output = run / f"benchmarks/{name}/output/shard-000"
        assert len((output / "rollouts_standin_calls.jsonl").read_text().splitlines()) == 2  # one a link
        decisions = [
            r for r in _ledger(run / f"benchmarks/{name}/shards/000/ledger.jsonl") if r["kind"] == "decision"
        ]
        assert [d["exit_code"] for d in decisions] == [1, 2], decisions
        assert all("the shared stack did not start" in d["reason"] for d in decisions)
