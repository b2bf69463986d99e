"""``gymslurm resubmit RUN BENCH --shards …`` on the local backend with real processes (issue 19):
only the selected shards restart, the others are untouched, and the refusal (before anything is
written) comes only when a selected shard is live."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import (
    STANDIN,
    decisions,
    gymslurm,
    only_run,
    status,
    wait_for_decisions,
    wait_until_final,
)

pytestmark = pytest.mark.e2e


def _bench(tmp: Path, steps: list[dict[str, object]], shard_1_steps: list[dict[str, object]]) -> Path:
    """Three shards of the stand-in collector: shard 1 follows its own steps, the others ``steps``."""
    (tmp / "steps.json").write_text(json.dumps(steps))
    (tmp / "steps1.json").write_text(json.dumps(shard_1_steps))
    (tmp / "data.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(3)))
    script = (
        f'case "$GYMSLURM_COLLECT_OVERRIDES" in *shard-001*) s={tmp / "steps1.json"};; '
        f'*) s={tmp / "steps.json"};; esac; exec {sys.executable} {STANDIN} "$s"'
    )
    path = tmp / "bench.yaml"
    path.write_text(
        f"dataset: {tmp / 'data.jsonl'}\nrun_root: {tmp / 'runs'}\n"
        f"collector:\n  command: {json.dumps(['/bin/sh', '-c', script])}\n"
    )
    return path


def _submit(bench: Path) -> Path:
    gymslurm("submit", str(bench), "--backend", "local", "shards=3", "aggregation.enabled=false")
    return only_run(bench.parent)


def _shard_files(run: Path) -> dict[str, bytes]:
    """Every file of the shards' folders, but the heartbeat a live link rewrites every 15 s by itself
    (a resubmit that takes longer on a loaded machine would see the link's beat, not its own write)."""
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file() and "shards/" in str(p.relative_to(run)) and p.name != "heartbeat.json"
    }


def test_resubmit_shards_restarts_only_the_selected_shards(tmp_path: Path) -> None:
    """Three FAILED shards, ``--shards 0,2``: shards 0 and 2 run a new link each; shard 1's ledger and
    files are byte for byte what they were."""
    bench = _bench(tmp_path, [{"exit": 76}, {"exit": 0}], [{"exit": 76}])
    run = _submit(bench)
    wait_until_final(run, aggregation=False)
    assert [decisions(run, s) for s in range(3)] == [["STOP_FAILED"]] * 3
    shard_1 = (run / "shards/001/ledger.jsonl").read_bytes()
    gymslurm("resubmit", str(run), str(bench), "--shards", "0,2")
    for shard in (0, 2):
        wait_for_decisions(run, more_than=1, shard=shard)
    report = wait_until_final(run, aggregation=False)
    assert [decisions(run, s) for s in range(3)] == [
        ["STOP_FAILED", "DONE"],
        ["STOP_FAILED"],
        ["STOP_FAILED", "DONE"],
    ]
    assert (run / "shards/001/ledger.jsonl").read_bytes() == shard_1
    assert [row["verdict"] for row in report["shards"]] == ["DONE", "FAILED", "DONE"]


def test_resubmit_shards_refuses_a_live_selected_shard_and_writes_nothing(tmp_path: Path) -> None:
    """Shard 1 still running: ``--shards 1`` (and ``--shards 0-1``) is refused naming shard 1, with no
    byte of any shard's files changed; ``--shards 0`` (shard 0 ended) goes ahead while shard 1 runs."""
    bench = _bench(tmp_path, [{"exit": 76}, {"exit": 0}], [{"exit": 0, "sleep": 120, "on_signal": 75}])
    run = _submit(bench)
    for shard in (0, 2):
        wait_for_decisions(run, more_than=0, shard=shard)
    try:
        before = _shard_files(run)
        for selection in ("1", "0-1"):
            refused = gymslurm("resubmit", str(run), str(bench), "--shards", selection, check=False)
            assert refused.returncode != 0
            assert "shard(s) 1 still has live jobs" in refused.stderr + refused.stdout
            assert _shard_files(run) == before
        gymslurm("resubmit", str(run), str(bench), "--shards", "0")
        wait_for_decisions(run, more_than=1, shard=0)
        assert decisions(run, 0) == ["STOP_FAILED", "DONE"]
        assert decisions(run, 2) == ["STOP_FAILED"] and decisions(run, 1) == []
        assert status(run)["shards"][1]["verdict"] not in ("DONE", "FAILED")
    finally:
        gymslurm("cancel", str(run), check=False)


def test_resubmit_shards_failed_restarts_the_failed_shards_only(tmp_path: Path) -> None:
    """``--shards failed``: status picks the FAILED shard (1) and only it runs a new link; the DONE
    shards' ledgers are byte for byte what they were."""
    bench = _bench(tmp_path, [{"exit": 0}], [{"exit": 76}, {"exit": 0}])
    run = _submit(bench)
    wait_until_final(run, aggregation=False)
    assert [decisions(run, s) for s in range(3)] == [["DONE"], ["STOP_FAILED"], ["DONE"]]
    done = {s: (run / f"shards/00{s}/ledger.jsonl").read_bytes() for s in (0, 2)}
    said = gymslurm("resubmit", str(run), str(bench), "--shards", "failed")
    assert "shard 1: new chain" in said.stdout and "shard 0" not in said.stdout, said.stdout
    wait_for_decisions(run, more_than=1, shard=1)
    report = wait_until_final(run, aggregation=False)
    assert decisions(run, 1) == ["STOP_FAILED", "DONE"]
    assert {s: (run / f"shards/00{s}/ledger.jsonl").read_bytes() for s in (0, 2)} == done
    assert [row["verdict"] for row in report["shards"]] == ["DONE", "DONE", "DONE"]


@pytest.mark.parametrize(
    "damage", [b"collector: [unclosed\n", b"name: \xff\xfe not utf-8\n"], ids=["not YAML", "not UTF-8"]
)
def test_resubmit_of_a_run_whose_saved_config_is_corrupt_is_a_one_line_error(
    tmp_path: Path, damage: bytes
) -> None:
    """A run's benchmark.yaml damaged after submit: resubmit exits 2 with one line naming the file and
    what to do, never a traceback."""
    bench = _bench(tmp_path, [{"exit": 0}], [{"exit": 0}])
    run = _submit(bench)
    wait_until_final(run, aggregation=False)
    (run / "benchmark.yaml").write_bytes(damage)
    done = gymslurm("resubmit", str(run), str(bench), check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"{run / 'benchmark.yaml'} cannot be read" in line and "restore it" in line
