"""A watch on the local backend with real processes (issue 35, item 1): checkpoints appear while the
watch's tick jobs run, ticks are submitted twice by hand and one is killed, and still each checkpoint
gets exactly one suite run, scored as its own policy, compared, gated and notified (docs/watch.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gymslurm.site.local import LocalBackend
from tests.e2e.launcher_chains_helpers import gymslurm
from tests.support import wait_until

pytestmark = pytest.mark.e2e

DEADLINE_S = 300


def _checkpoint(source: Path, name: str, accuracy: float) -> None:
    folder = source / name
    folder.mkdir(parents=True)
    (folder / "accuracy.txt").write_text(f"{accuracy}\n")
    (folder / "READY").touch()


def _suite(tmp: Path) -> Path:
    data = tmp / "data.jsonl"
    gymslurm("demo-server", "--write-dataset", str(data), "--n", "16")
    suite = tmp / "watched.yaml"
    suite.write_text(
        f"run_root: {tmp / 'runs'}\nshards: 1\n"
        "stack:\n  - name: policy\n"
        '    command: ["{python}", -m, gymslurm, demo-model-server, --host, "{host}", --port, "{port}",'
        ' --checkpoint, "{checkpoint}"]\n'
        "    probe: chat_completions\n    collector_override: null\n"
        f"notify:\n  - command: [bash, -c, 'cat >> {tmp / 'events.jsonl'}; echo >> {tmp / 'events.jsonl'}']\n"
        "    events: [watch_blocked]\n"
        f"benchmarks:\n  - {{name: arith, benchmark: demo, dataset: {data}}}\n"
    )
    return suite


def _ledger(watch: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (watch / "ledger.jsonl").read_text().splitlines() if line.strip()]


def _wait_compared(watch: Path, count: int) -> list[dict[str, Any]]:
    def compared() -> list[dict[str, Any]] | None:
        records = _ledger(watch)
        return records if sum(r["kind"] == "compared" for r in records) >= count else None

    def seen() -> str:
        log = "\n".join(p.read_text()[-3000:] for p in sorted((watch / "logs").glob("*")))
        return f"{count} checkpoints compared:\n{_ledger(watch)}\n{log}"

    return wait_until(compared, DEADLINE_S, seen, every_s=2)


def _live_jobs(watch: Path) -> list[str]:
    return [
        job
        for job, row in LocalBackend(watch / "local").queue().items()
        if row.state in ("PENDING", "RUNNING")
    ]


def test_each_checkpoint_gets_one_suite_run_despite_hand_submitted_and_killed_ticks(tmp_path: Path) -> None:
    """Three checkpoints (accuracy 0.9, 0.2, 0.9), each converted by a job first, ticks submitted
    twice by hand and one killed: three suite runs, one per checkpoint, each on its converted folder,
    scores that follow each checkpoint's policy, the drop blocked by the gate and notified once, and
    after cancel no job of the watch left."""
    source = tmp_path / "ck"
    source.mkdir()
    policy = tmp_path / "gate.yaml"
    policy.write_text("default:\n  max_drop: 0.05\n  alpha: 0.05\n  min_coverage: 0.5\n")
    _checkpoint(source, "step_001", 0.9)
    gymslurm(
        "watch",
        str(source),
        "--suite",
        str(_suite(tmp_path)),
        "--every",
        "10s",
        "--ready",
        "marker",
        "--backend",
        "local",
        "--run-root",
        str(tmp_path / "runs"),
        "--name",
        "w",
        "--gate",
        str(policy),
        "--convert",
        "bash -c 'mkdir -p {output} && cp {checkpoint}/accuracy.txt {output}/'",
    )
    watch = tmp_path / "runs" / "watches" / "w"
    tick = watch / "scripts" / "tick.sbatch"
    hand = LocalBackend(watch / "local")
    hand.submit(tick), hand.submit(tick)  # submitted twice by hand
    (source / "step_002.partial").mkdir()  # no marker yet: not a checkpoint
    _checkpoint(source, "step_002", 0.2)
    running = wait_until(
        lambda: [j for j, r in hand.queue().items() if r.state == "RUNNING"],
        60,
        "a tick job to run",
        every_s=0.2,
    )
    hand.cancel(running)  # a tick killed (possibly mid-tick)
    _wait_compared(watch, 2)
    _checkpoint(source, "step_003", 0.9)
    records = _wait_compared(watch, 3)

    claims = [r["checkpoint"] for r in records if r["kind"] == "claimed"]
    assert sorted(claims) == [str(source / f"step_00{n}") for n in (1, 2, 3)]
    runs = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
    assert len(runs) == 3  # one suite run per checkpoint, none twice
    submitted = {r["digest"]: r["run"] for r in records if r["kind"] == "submitted"}
    assert sorted(submitted.values()) == sorted(str(run) for run in runs)
    compared = {r["digest"]: r["result"] for r in records if r["kind"] == "compared"}
    by_name = {Path(r["checkpoint"]).name: compared[r["digest"]] for r in records if r["kind"] == "claimed"}
    assert by_name["step_001"]["score"] > 0.6
    assert by_name["step_002"]["score"] < 0.45
    assert by_name["step_002"]["previous"]["gate"] == "block"
    assert by_name["step_003"]["previous"]["gate"] == "pass"
    converted = {r["digest"]: r["checkpoint"] for r in records if r["kind"] == "converted"}
    assert sorted(converted) == sorted(compared)  # each converted by its own job, first
    for key, folder in converted.items():
        assert folder == str(watch / "converted" / key)
        suite = yaml.safe_load((watch / "suites" / f"{key}.yaml").read_text())
        assert folder in suite["stack"][0]["command"]  # the model server got the converted folder
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines() if line]
    assert [e["event"] for e in events] == ["watch_blocked"]
    assert events[0]["checkpoint"] == str(source / "step_002")

    shown = gymslurm("status", "w", "--run-root", str(tmp_path / "runs")).stdout
    assert shown.count("run: ") == 3 and "3 checkpoint(s)" in shown
    gymslurm("cancel", "w", "--run-root", str(tmp_path / "runs"))
    wait_until(
        lambda: not _live_jobs(watch),
        30,
        lambda: f"the cancelled watch's jobs to end (live: {_live_jobs(watch)})",
    )
    assert "cancelled" in gymslurm("status", "w", "--run-root", str(tmp_path / "runs")).stdout
