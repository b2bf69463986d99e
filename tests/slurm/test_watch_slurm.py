"""A watch on the real Slurm sandbox as the test user (issue 35, item 1; docs/watch.md).

A "training" job writes 5 checkpoints (tiny folders, each its own demo policy) and a 6th whose
conversion fails while a watch runs; meanwhile the watch's jobs are killed twice and submitted twice
by hand, then one queued tick job is killed alone (the watch goes on by itself). Each checkpoint
is converted by its own job and its suite run waits for it in Slurm's queue (afterok): exactly 5
suite runs are compared, one per good checkpoint; the 6th's conversion failure is recorded once and
its waiting suite run cancelled; no process of the user is left outside Slurm's jobs.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from .helpers import SlurmCluster, SlurmUser, run

pytestmark = pytest.mark.slurm

DEADLINE_S = 600
ACCURACIES = (0.9, 0.3, 0.8, 0.5, 0.95)
CONVERT = (  # a conversion job per checkpoint: a copy of its policy; a BROKEN one fails
    "bash -c 'test ! -e {checkpoint}/BROKEN && mkdir -p {output} && cp {checkpoint}/accuracy.txt {output}/'"
)


def _ledger(watch: Path) -> list[dict[str, Any]]:
    path = watch / "ledger.jsonl"
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    )


def _wait(predicate: Any, what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(2)


def _tick_jobs(user: SlurmUser) -> list[str]:
    out = run(["squeue", "-h", "-u", user.name, "-n", "gsw-w", "-o", "%i %T"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pending_ticks(user: SlurmUser) -> list[str]:
    out = run(["squeue", "-h", "-u", user.name, "-n", "gsw-w", "-t", "PENDING", "-o", "%i"])
    return sorted((line.strip() for line in out.splitlines() if line.strip()), key=int)


def _kill(user: SlurmUser) -> None:
    jobs = _tick_jobs(user)
    assert jobs, "the watch had no job to kill"
    run(["scancel", *jobs])


def _outside_jobs(user: SlurmUser) -> list[str]:
    """This test's processes (of the user, naming its folder) with no slurmstepd among their
    ancestors: what runs on the login node. Other tests run as the same user: theirs are not counted."""
    found = []
    for proc in psutil.process_iter(["username", "cmdline"]):
        command = " ".join(proc.info["cmdline"] or [])
        if proc.info["username"] != user.name or str(user.workdir) not in command:
            continue
        try:
            if not any(parent.name().startswith("slurmstepd") for parent in proc.parents()):
                found.append(command)
        except psutil.NoSuchProcess:
            continue
    return found


def _training_script(source: Path) -> str:
    steps = "\n".join(
        f"mkdir -p {source}/step_00{n}.tmp && echo {acc} > {source}/step_00{n}.tmp/accuracy.txt && "
        f"mv {source}/step_00{n}.tmp {source}/step_00{n} && touch {source}/step_00{n}/READY && sleep 25"
        for n, acc in enumerate(ACCURACIES, start=1)
    )
    broken = (  # its conversion fails: the watch records it and never evaluates it
        f"mkdir -p {source}/step_006 && echo 0.5 > {source}/step_006/accuracy.txt && "
        f"touch {source}/step_006/BROKEN {source}/step_006/READY"
    )
    return f"#!/bin/bash\nmkdir -p {source}\nsleep 5\n{steps}\n{broken}\n"


def test_five_checkpoints_five_suite_runs_with_the_watch_killed_and_submitted_by_hand(
    slurm_cluster: SlurmCluster, slurm_user: SlurmUser, slurm_python: Path
) -> None:
    """5 checkpoints written by a job, and a 6th whose conversion fails; the watch's jobs killed twice
    (every tick job of it: the watch stops) and submitted twice by hand (it goes on where it stood),
    then its next queued tick killed alone (its spare takes over: no human command): each checkpoint
    claimed once, converted by its own job before its suite run (afterok), 5 compared, each scored as
    its own policy; the failed conversion recorded once, its suite run cancelled before it ran;
    nothing left outside Slurm."""
    work = slurm_user.workdir
    source = work / "ck"
    gymslurm = [str(slurm_python), "-m", "gymslurm"]
    slurm_user.run([*gymslurm, "demo-server", "--write-dataset", str(work / "data.jsonl"), "--n", "12"])
    suite = slurm_user.write(
        "watched.yaml",
        f"run_root: {work / 'runs'}\nshards: 1\nslurm: {{time: '00:05:00', python: {slurm_python}}}\n"
        "stack:\n  - name: policy\n"
        '    command: ["{python}", -m, gymslurm, demo-model-server, --host, "{host}", --port, "{port}",'
        ' --checkpoint, "{checkpoint}"]\n'
        "    probe: chat_completions\n    collector_override: null\n"
        f"benchmarks:\n  - {{name: arith, benchmark: demo, dataset: {work / 'data.jsonl'}}}\n",
        mode=0o644,
    )
    training = slurm_user.sbatch(_training_script(source), name="training")
    out = slurm_user.run(
        [
            *gymslurm,
            "watch",
            str(source),
            "--suite",
            str(suite),
            "--every",
            "10s",
            "--ready",
            "marker",
            "--backend",
            "slurm",
            "--run-root",
            str(work / "runs"),
            "--name",
            "w",
            "--convert",
            CONVERT,
        ]
    )
    assert re.search(r"first tick job \d+", out), out
    assert _outside_jobs(slurm_user) == []  # the command returned: nothing of it stays here
    watch = work / "runs" / "watches" / "w"
    tick = watch / "scripts" / "tick.sbatch"

    def five_compared() -> bool:
        return sum(r["kind"] == "compared" for r in _ledger(watch)) >= len(ACCURACIES)

    try:
        _wait(lambda: any(r["kind"] == "claimed" for r in _ledger(watch)), "a first checkpoint claimed", 180)
        _kill(slurm_user)  # killed (1): every tick job of the watch
        time.sleep(15)  # checkpoints go on being written while no watch job exists
        slurm_user.run(["sbatch", str(tick)])  # submitted by hand (1)
        _wait(lambda: sum(r["kind"] == "submitted" for r in _ledger(watch)) >= 2, "a second suite run", 240)
        _kill(slurm_user)  # killed (2)
        time.sleep(15)
        slurm_user.run(["sbatch", str(tick)])  # submitted by hand (2)
        _wait(lambda: sum(r["kind"] == "submitted" for r in _ledger(watch)) >= 3, "a third suite run", 240)
        _wait(lambda: len(_pending_ticks(slurm_user)) >= 2, "the next tick and its spare queued", 60)
        alone = _pending_ticks(slurm_user)[0]
        run(["scancel", alone])  # killed (3): the next tick alone; no human command after it
        killed_at = len(_ledger(watch))
        _wait(five_compared, "5 checkpoints compared")
        _wait(lambda: any(r["kind"] == "convert_failed" for r in _ledger(watch)), "the failed conversion")
    finally:
        _stop(slurm_user, gymslurm, work / "runs")
    records = _ledger(watch)
    claims = [r["checkpoint"] for r in records if r["kind"] == "claimed"]
    assert sorted(claims) == [str(source / f"step_00{n}") for n in range(1, 7)]  # 0 duplicates
    after_kill = [r["job"] for r in records[killed_at:] if r["kind"] == "tick"]
    assert after_kill and alone not in after_kill  # the watch went on without the killed tick
    scheduled = {r["job"] for r in records if r["kind"] == "scheduled"}
    assert set(after_kill) <= scheduled  # each queued by the watch itself: no human command
    runs = sorted(p.parent for p in (work / "runs").glob("*/run.json"))
    assert len(runs) == 6  # one per checkpoint, none twice
    assert sorted(r["run"] for r in records if r["kind"] == "submitted") == [str(r) for r in runs]
    failed = [r for r in records if r["kind"] == "convert_failed"]
    broken = next(r["digest"] for r in records if r["kind"] == "claimed" and r["checkpoint"].endswith("_006"))
    assert [r["digest"] for r in failed] == [broken]  # recorded once, never retried
    assert sum(r["kind"] == "converting" and r["digest"] == broken for r in records) == 1
    broken_run = next(Path(r["run"]) for r in records if r["kind"] == "submitted" and r["digest"] == broken)
    job_logs = [f for f in broken_run.rglob("*") if f.parent.name == "logs" and f.is_file()]
    assert job_logs == []  # its links waited for the conversion (afterok) and never ran
    compared = {r["digest"] for r in records if r["kind"] == "compared"}
    assert compared == {r["digest"] for r in records if r["kind"] == "converted"}
    assert len(compared) == 5
    scores = {
        Path(c["checkpoint"]).name: r["result"]["score"]
        for c in records
        if c["kind"] == "claimed"
        for r in records
        if r["kind"] == "compared" and r["digest"] == c["digest"]
    }
    assert scores["step_001"] > scores["step_002"] < scores["step_003"]  # each checkpoint its own policy
    status = slurm_user.run([*gymslurm, "status", "w", "--run-root", str(work / "runs")])
    assert "6 checkpoint(s)" in status and "FAILED: conversion job" in status
    _wait(lambda: not _tick_jobs(slurm_user), "the watch's jobs to end", 60)
    run(["scancel", str(training)])
    assert _outside_jobs(slurm_user) == []
    assert "cancelled" in slurm_user.run([*gymslurm, "status", "w", "--run-root", str(work / "runs")])


def _stop(user: SlurmUser, gymslurm: list[str], runs: Path) -> None:
    """Cancel the watch, then every suite run it made (the fixture cancels only what it submitted)."""
    user.run([*gymslurm, "cancel", "w", "--run-root", str(runs)])
    for folder in sorted(runs.glob("w-*")):
        user.run([*gymslurm, "cancel", str(folder)])
