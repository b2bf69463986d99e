"""End-to-end chains on the local backend with the scripted stand-in collector (real processes)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import (
    STANDIN,
    decisions,
    gymslurm,
    ledger,
    only_run,
    status,
    wait_for_decisions,
    wait_until_final,
    write_benchmark,
)
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def _submit(tmp_path: Path, steps: list[dict[str, object]], *overrides: str, extra: str = "") -> Path:
    bench = write_benchmark(tmp_path, steps, extra)
    gymslurm("submit", str(bench), "--backend", "local", "aggregation.command=[/bin/true]", *overrides)
    return only_run(tmp_path)


def test_progress_chain_runs_four_jobs_without_spending_retries(tmp_path: Path) -> None:
    """75,75,75,0 → four jobs, DONE, no retry spent, nothing left queued, aggregation once."""
    run = _submit(tmp_path, [{"exit": 75}, {"exit": 75}, {"exit": 75}, {"exit": 0}], "shards=1")
    report = wait_until_final(run)
    row = report["shards"][0]
    assert decisions(run) == ["CONTINUE", "CONTINUE", "CONTINUE", "DONE"]
    assert (row["verdict"], row["retries"]) == ("DONE", "0/3")
    assert report["aggregation"]["state"].startswith("DONE")
    calls = (run / "output/shard-000/rollouts_standin_calls.jsonl").read_text().splitlines()
    assert all("+resume_from_cache=true" in json.loads(c)["argv"] for c in calls)


def test_exit_1_until_the_budget_ends_stops_then_resubmit_gives_a_fresh_budget(tmp_path: Path) -> None:
    """Exit 1 spends retries until none are left, then stops; resubmit starts a fresh budget, history kept."""
    bench = write_benchmark(tmp_path, [{"exit": 1}], "slurm:\n  infra_retry_limit: 1\n")
    gymslurm("submit", str(bench), "--backend", "local", "shards=1", "aggregation.enabled=false")
    run = only_run(tmp_path)
    report = wait_until_final(run, aggregation=False)
    assert decisions(run) == ["RETRY", "STOP_EXHAUSTED"]
    assert report["shards"][0]["verdict"] == "EXHAUSTED"
    gymslurm("resubmit", str(run), str(bench), "--run-root", str(tmp_path / "runs"))
    wait_for_decisions(run, more_than=2)  # the status read before the new link decides is the old one
    report = wait_until_final(run, aggregation=False)
    assert decisions(run) == ["RETRY", "STOP_EXHAUSTED", "RETRY", "STOP_EXHAUSTED"]
    calls = (run / "output/shard-000/rollouts_standin_calls.jsonl").read_text().splitlines()
    assert (
        "+resubmit=true" in json.loads(calls[2])["argv"]
        and "+resubmit=true" not in json.loads(calls[3])["argv"]
    )


def test_exit_76_stops_failed(tmp_path: Path) -> None:
    """Exit 76 stops the chain at once; the shard is FAILED and the job exits 76."""
    run = _submit(tmp_path, [{"exit": 76}], "shards=1", "aggregation.enabled=false")
    report = wait_until_final(run, aggregation=False)
    assert decisions(run) == ["STOP_FAILED"]
    assert report["shards"][0]["verdict"] == "FAILED"
    job_file = run / f"local/jobs/{report['shards'][0]['job']}.json"
    wait_until(  # the ledger's decision lands before the process has exited
        lambda: json.loads(job_file.read_text()).get("exit_code") is not None,
        30,
        f"the job's exit code in {job_file}",
        every_s=0.2,
    )
    assert json.loads(job_file.read_text())["exit_code"] == 76


def test_exit_75_without_progress_spends_a_retry(tmp_path: Path) -> None:
    """A 75 whose coverage shows no new outcome counts as exit 1."""
    run = _submit(
        tmp_path, [{"exit": 75, "progress": 0}, {"exit": 0}], "shards=1", "aggregation.enabled=false"
    )
    report = wait_until_final(run, aggregation=False)
    assert decisions(run) == ["RETRY", "DONE"]
    assert report["shards"][0]["retries"] == "1/3"


def test_time_limit_signal_stops_cleanly_and_walltime_cap_ends_the_chain(tmp_path: Path) -> None:
    """USR1 before --time makes the collector exit 75; walltime accumulates until max_walltime stops it.

    The cap is twice the time limit: a link's elapsed is at most its limit plus the supervisor's
    poll, so the first link always continues, even on a loaded machine (with a cap of 11 s a first
    link slowed past it ended the chain alone: seen in CI). A link slower than its lead to write its
    decision after the collector's clean exit also gets the TERM of ``--time`` (seen in CI with a
    lead of 4 s): that TERM is recorded after the USR1. A link slower than its lead to *start* the
    collector gets the USR1 first and does not start it (exit None, CONTINUE with no retry spent);
    every other link's collector takes the USR1 and exits 75. With a lead of 6 s, CI at a load of 40
    saw three links in a row too slow to start theirs, so the USR1 still comes 6 s into a link but
    the lead is 14 s."""
    extra = "slurm:\n  time: '0:20'\n  signal_lead_s: 14\n  max_walltime: '0:40'\n"
    step = {"exit": 0, "sleep": 60, "on_signal": 75, "progress": 1}
    run = _submit(tmp_path, [step], "shards=1", "aggregation.enabled=false", extra=extra)
    report = wait_until_final(run, aggregation=False)
    records = [r for r in ledger(run) if r["kind"] == "decision"]
    assert [r["decision"] for r in records[:-1]] == ["CONTINUE"] * (len(records) - 1)
    assert records[-1]["decision"] == "STOP_WALLTIME" and len(records) >= 2
    shown = [(r["job_id"], r["exit_code"], r["slurm_state"], r["decision"], r["reason"]) for r in records]
    assert all(r["slurm_state"] in ("SIGNALLED:SIGUSR1", "SIGNALLED:SIGUSR1,SIGTERM") for r in records), shown
    assert all(r["exit_code"] in (75, None) for r in records), shown
    assert records[-1]["budgets_after"]["infra_retries_used"] == 0, shown
    assert any(r["exit_code"] == 75 for r in records), shown
    assert records[-1]["budgets_after"]["walltime_s"] >= 5
    assert report["shards"][0]["verdict"] == "EXHAUSTED"


def test_three_shards_ending_together_aggregate_once(tmp_path: Path) -> None:
    """Three chains that end at the same moment submit exactly one aggregation job."""
    run = _submit(tmp_path, [{"exit": 0}], "shards=3")
    report = wait_until_final(run)
    assert [row["verdict"] for row in report["shards"]] == ["DONE"] * 3
    kinds = [r["kind"] for r in ledger(run, None)]
    assert (kinds.count("start"), kinds.count("decision"), kinds[0]) == (1, 1, "submitted")


def test_a_killed_link_is_accounted_for_by_its_successor(tmp_path: Path) -> None:
    """SIGKILL of a running link is a crash: its successor writes the missing decision, spends a retry."""
    run = _submit(tmp_path, [{"exit": 0, "sleep": 60}, {"exit": 0}], "shards=1", "aggregation.enabled=false")
    calls = run / "output/shard-000/rollouts_standin_calls.jsonl"
    wait_until(calls.exists, 30, f"the first link's collector to start ({calls})", every_s=0.2)
    job = json.loads((run / "local/jobs/local-1.json").read_text())
    os.killpg(job["pid"], signal.SIGKILL)
    wait_until_final(run, aggregation=False)
    records = [r for r in ledger(run) if r["kind"] == "decision"]
    assert records[0]["accounted_by"] == records[1]["job_id"] != records[0]["job_id"]
    first = records[0]
    assert (first["decision"], first["exit_code"], first["slurm_state"]) == ("RETRY", None, "FAILED")
    assert "crashed" in records[0]["reason"] and records[0]["elapsed_s"] > 0
    assert records[1]["decision"] == "DONE"


def test_status_while_running_then_cancel(tmp_path: Path) -> None:
    """status shows HEALTHY while a link runs; after cancel it reads CANCELLED and no job is live."""
    run = _submit(tmp_path, [{"exit": 0, "sleep": 60}], "shards=1", "aggregation.enabled=false")
    wait_until(lambda: status(run)["shards"][0]["verdict"] == "HEALTHY", 30, "a HEALTHY shard", every_s=0.2)
    gymslurm("cancel", str(run))
    report = wait_until_final(run, aggregation=False)
    assert report["shards"][0]["verdict"] == "CANCELLED"
    assert any(r["kind"] == "cancelled" for r in ledger(run))


def test_submit_refused_while_the_run_is_live(tmp_path: Path) -> None:
    """A second submit of a benchmark whose run is live is refused, naming the run."""
    run = _submit(tmp_path, [{"exit": 0, "sleep": 60}], "shards=1", "aggregation.enabled=false")
    second = gymslurm("submit", str(tmp_path / "bench.yaml"), "--backend", "local", "shards=1", check=False)
    assert second.returncode == 2 and run.name in second.stderr
    gymslurm("cancel", str(run))


def test_secrets_never_reach_run_files(tmp_path: Path) -> None:
    """Canary secrets (benchmark and environment) reach the collector but no file of the run."""
    extra = "  env:\n    OPENAI_API_KEY: canary-cfg-91\n"
    bench = write_benchmark(tmp_path, [{"exit": 0}])
    bench.write_text(bench.read_text() + extra)
    gymslurm(
        "submit",
        str(bench),
        "--backend",
        "local",
        "shards=1",
        "aggregation.command=[/bin/true]",
        env={"HF_TOKEN": "canary-env-77"},
    )
    run = only_run(tmp_path)
    wait_until_final(run)
    for path in run.rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert b"canary-cfg-91" not in text and b"canary-env-77" not in text, path
    call = json.loads((run / "output/shard-000/rollouts_standin_calls.jsonl").read_text().splitlines()[0])
    assert {"OPENAI_API_KEY", "HF_TOKEN"} <= set(call["secret_env_keys"])


def test_dry_run_prints_scripts_and_writes_nothing(tmp_path: Path) -> None:
    """--dry-run prints every script and creates no run directory (Slurm: one array link script)."""
    bench = write_benchmark(tmp_path, [{"exit": 0}])
    done = gymslurm("submit", str(bench), "--dry-run", "--backend", "slurm", "shards=2")
    assert done.stdout.count("#SBATCH --open-mode=append") == 2 and "scripts/links.sbatch" in done.stdout
    locally = gymslurm("submit", str(bench), "--dry-run", "--backend", "local", "shards=2")
    assert locally.stdout.count("#SBATCH --open-mode=append") == 3  # the local backend: one script per shard
    assert not (tmp_path / "runs").exists()


def test_demo_benchmark_starts_checks_and_stops_its_server(tmp_path: Path) -> None:
    """submit demo (local): each job starts the demo server, the collector reaches it, and it is stopped."""
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps([{"exit": 75}, {"exit": 0}]))
    gymslurm(
        "submit",
        "demo",
        "--backend",
        "local",
        "shards=1",
        f"run_root={tmp_path / 'runs'}",
        f"dataset={tmp_path / 'demo.jsonl'}",
        f"collector.command=[{sys.executable},{STANDIN},{steps}]",
        "aggregation.command=[/bin/true]",
    )
    run = only_run(tmp_path)
    assert wait_until_final(run)["shards"][0]["verdict"] == "DONE"
    calls = [
        json.loads(c)
        for c in (run / "output/shard-000/rollouts_standin_calls.jsonl").read_text().splitlines()
    ]
    assert [c["server"].split()[0] for c in calls] == ["200", "200"]
    port = int(calls[-1]["server"].rsplit(":", 1)[1])
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # stopped with its job
    assert len((run / "inputs/shard-000.jsonl").read_text().splitlines()) == 40


def test_demo_runs_from_an_unactivated_venv(tmp_path: Path) -> None:
    """submit demo --wait by path, a foreign ``python`` first on PATH: every step runs, the run is DONE."""
    foreign = tmp_path / "bin"
    foreign.mkdir()
    (foreign / "python").write_text("#!/bin/sh\necho 'not the interpreter running gymslurm' >&2\nexit 127\n")
    (foreign / "python").chmod(0o755)
    done = gymslurm(
        "submit",
        "demo",
        "--backend",
        "local",
        "--wait",
        f"run_root={tmp_path / 'runs'}",
        f"dataset={tmp_path / 'demo.jsonl'}",
        env={"PATH": f"{foreign}:{os.environ['PATH']}", "VIRTUAL_ENV": ""},
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    run = only_run(tmp_path)
    assert [row["verdict"] for row in status(run)["shards"]] == ["DONE", "DONE"]
    assert (run / "output/merged/rollouts.jsonl").is_file()


def test_merged_rows_of_a_sharded_run_carry_the_datasets_task_indices(tmp_path: Path) -> None:
    """Shards keep the dataset's task indices (not each shard's from 0), identical rows one task.

    Rows r0, r0, r1, r2, r3, r4 over two shards: (task, rollout) = (0,0) (0,1) (1,0) | (2,0) (3,0)
    (4,0), as NeMo Gym numbers the whole file, so its per-task metrics group the merged rows right."""
    demo = tmp_path / "demo-rows.jsonl"
    gymslurm("demo-server", "--write-dataset", str(demo), "--n", "5")
    rows = demo.read_text().splitlines()
    (tmp_path / "demo.jsonl").write_text("\n".join([rows[0], *rows]) + "\n")
    gymslurm(
        "submit",
        "demo",
        "--backend",
        "local",
        "--wait",
        "shards=2",
        f"run_root={tmp_path / 'runs'}",
        f"dataset={tmp_path / 'demo.jsonl'}",
    )
    merged = (only_run(tmp_path) / "output/merged/rollouts.jsonl").read_text().splitlines()
    indices = sorted((json.loads(r)["_ng_task_index"], json.loads(r)["_ng_rollout_index"]) for r in merged)
    assert indices == [(0, 0), (0, 1), (1, 0), (2, 0), (3, 0), (4, 0)]


def test_copies_of_a_row_in_different_shards_are_distinct_rollouts_of_one_task(tmp_path: Path) -> None:
    """Rows r0, r1, r2, r0 over two shards: the second r0 is rollout 1 of task 0 with its own id, as in
    one shard (it was rollout 0 again: two merged rows with one rollout id)."""
    demo = tmp_path / "demo-rows.jsonl"
    gymslurm("demo-server", "--write-dataset", str(demo), "--n", "3")
    rows = demo.read_text().splitlines()
    (tmp_path / "demo.jsonl").write_text("\n".join([*rows, rows[0]]) + "\n")
    gymslurm(
        "submit",
        "demo",
        "--backend",
        "local",
        "--wait",
        "shards=2",
        f"run_root={tmp_path / 'runs'}",
        f"dataset={tmp_path / 'demo.jsonl'}",
    )
    merged_file = only_run(tmp_path) / "output/merged/rollouts.jsonl"
    merged = [json.loads(r) for r in merged_file.read_text().splitlines()]
    keys = sorted((r["_ng_task_index"], r["_ng_rollout_index"], r["_ng_rollout_id"]) for r in merged)
    assert keys == [(0, 0, "arith-0"), (0, 1, "arith-0-r1"), (1, 0, "arith-1"), (2, 0, "arith-2")], keys
