"""A writer SIGKILLed at random points never loses a flushed outcome and never goes backwards."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gymslurm.errors import InconsistentHistoryError
from gymslurm.store import RunPaths, RunSpec, RunStore
from gymslurm.store.jsonl import read_tail

pytestmark = pytest.mark.crash

WRITER = Path(__file__).with_name("store_writer.py")
ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = 40
KILLS_PER_SEED = 13
DIGEST = "sha256:" + "2" * 64
REPLACEMENT_ROLLOUTS = 20000


def inputs(count: int) -> list[dict[str, object]]:
    return [
        {
            "_ng_rollout_id": f"crash-t{i}",
            "_ng_task_index": i,
            "_ng_rollout_index": 0,
            "task_id": {"taskset": "crash", "task_id": f"t{i}"},
            "task_input": {"i": i},
        }
        for i in range(count)
    ]


def create(paths: RunPaths, count: int = ROLLOUTS) -> RunStore:
    return RunStore.create_fresh(
        paths,
        RunSpec(
            source_path="d",
            source_digest=DIGEST,
            inputs=inputs(count),
            identity={"model": "m"},
            config_digest=DIGEST,
            max_rollout_attempts=3,
        ),
    )


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def run_and_kill(command: list[str], rng: random.Random, lines_before_kill: int) -> list[str]:
    """Start ``command``, SIGKILL it after some printed lines plus a random delay; return its lines."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, env=child_env())
    assert child.stdout is not None
    printed: list[bytes] = []
    for _ in range(lines_before_kill):
        line = child.stdout.readline()
        if not line:
            break
        printed.append(line)
    time.sleep(rng.random() * 0.004)
    child.send_signal(signal.SIGKILL)
    printed.extend(child.stdout.read().splitlines(keepends=True))
    child.wait()
    assert child.returncode == -signal.SIGKILL, "the writer died on its own: it must only stop when killed"
    return [line.decode() for line in printed if line.endswith(b"\n")]


@pytest.mark.parametrize("seed", range(4))
def test_killed_writer_loses_nothing_flushed(tmp_path: Path, seed: int) -> None:
    """After every SIGKILL: reading succeeds, flushed outcomes are there, reservations never shrink."""
    rng = random.Random(seed)
    paths = RunPaths.for_output(tmp_path / "out.jsonl")
    create(paths).close()
    reserved: dict[int, int] = {}
    flushed: set[tuple[int, int, str]] = set()
    previous = [0] * ROLLOUTS
    torn_seen = 0
    for kill in range(KILLS_PER_SEED):
        command = [sys.executable, str(WRITER), str(paths.output), str(seed * 1000 + kill)]
        for line in run_and_kill(command, rng, lines_before_kill=rng.randrange(1, 120)):
            fields = line.split()
            index, attempt = int(fields[1]), int(fields[2])
            reserved[index] = max(reserved.get(index, -1), attempt)
            if fields[0] == "O":
                flushed.add((index, attempt, fields[3]))
        torn_seen += read_tail(paths.results).torn or read_tail(paths.failures).torn
        store = RunStore.open(paths, writable=False)
        history = store.read_history()  # never fails on a torn tail
        store.reconcile()  # and the history is consistent with the reservations
        counts = list(store.table.counts())
        store.close()
        assert all(now >= before for now, before in zip(counts, previous, strict=True)), "attempts went back"
        assert all(counts[index] > attempt for index, attempt in reserved.items()), "a reservation was lost"
        saved = {(i, o.attempt, o.kind) for i in range(ROLLOUTS) for o in history.outcomes(i)}
        assert flushed <= saved, f"flushed outcomes lost: {sorted(flushed - saved)[:5]}"
        previous = counts
    print(f"seed {seed}: {KILLS_PER_SEED} kills, {len(flushed)} outcomes, torn tails seen {torn_seen}")


REPLACER = """
import sys
from gymslurm.store import RunPaths, RunSpec, RunStore
rows = [{"_ng_rollout_id": f"crash-t{i}", "task_id": {"taskset": "crash", "task_id": f"t{i}"}}
        for i in range(REPLACEMENT_ROLLOUTS)]
print("start", flush=True)
spec = RunSpec(source_path="d", source_digest="DIGEST", inputs=rows, identity={}, config_digest="DIGEST",
               max_rollout_attempts=3)
RunStore.create_fresh(RunPaths.for_output(sys.argv[1]), spec).close()
""".replace("DIGEST", DIGEST).replace("REPLACEMENT_ROLLOUTS", str(REPLACEMENT_ROLLOUTS))


@pytest.mark.parametrize("seed", range(2))
def test_killed_fresh_replacement_is_old_new_or_refused(tmp_path: Path, seed: int) -> None:
    """A fresh run killed while replacing another leaves the old run, the new run, or a refusal."""
    rng = random.Random(seed)
    paths = RunPaths.for_output(tmp_path / "out.jsonl")
    outcomes = {"old": 0, "new": 0, "refused": 0}
    for _ in range(6):
        old = create(paths)
        old.reconcile()
        old.append_result(0, old.reserve(0), {"reward": 1.0})
        old.close()
        command = [sys.executable, "-c", REPLACER, str(paths.output)]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, env=child_env())
        assert child.stdout is not None and child.stdout.readline() == b"start\n"
        time.sleep(rng.random() * 0.12)
        child.kill()
        child.wait()
        try:
            store = RunStore.open(paths, writable=False)
        except InconsistentHistoryError:
            outcomes["refused"] += 1
            continue
        recon = store.reconcile()
        store.close()
        if store.manifest.run_id == old.run_id:
            assert recon.attempts == 1 and store.manifest.rollout_count == ROLLOUTS
            outcomes["old"] += 1
        else:
            assert recon.attempts == 0 and store.manifest.rollout_count == REPLACEMENT_ROLLOUTS
            outcomes["new"] += 1
    print(f"seed {seed}: {outcomes}")
