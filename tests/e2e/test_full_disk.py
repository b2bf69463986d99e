"""A run that survives a full disk (issue 9 §4), on a real size-limited tmpfs mounted as root.

One collection per amount of free space, from none to enough for the whole run, one page (4 KiB) more
each time: the disk runs out at start-up (the lock), during preparation (identity, inputs,
reservations, manifest), during dispatch (an append) and while reporting (coverage, metrics, health).
Every case must end with exit 0, or exit 1 and a clear "disk full" error naming the file that could
not be written, without a traceback; then, with space freed, a resume (what a Slurm chain runs)
finishes the run and every outcome saved before is still there, byte for byte.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.helpers import collect, companion, coverage_of, write_tasks
from tests.full_disk import PAGE, fill, free, free_bytes, small_filesystem

pytestmark = pytest.mark.e2e

TASKS = 12
PHASES = {
    "_run.lock": "lock",
    "_identity.json": "preparation",
    "_materialized_inputs.jsonl": "preparation",
    "_gymslurm_inputs.jsonl": "preparation",
    "_adoptions.jsonl": "preparation",
    "_reservations.bin": "preparation",
    "_manifest.json": "preparation",
    "out.jsonl": "dispatch",
    "_failures.jsonl": "dispatch",
    "_coverage.json": "reporting",
    "_aggregate_metrics.json": "reporting",
    "_gymslurm_metrics.json": "reporting",
    "_health.json": "reporting",
}


def _phase(stderr: str, folder: Path) -> str:
    """The phase of the file the disk-full *error* names (warnings about reports may come first)."""
    line = next(line for line in stderr.splitlines() if "error: disk full: " in line)
    named = line.split(" (", 1)[0]  # "... could not append to /path/out.jsonl (No space left ...)"
    phase = next(
        (
            phase
            for suffix, phase in PHASES.items()
            if named.endswith(f"{folder}/{suffix}") or named.endswith(f"{folder}/out{suffix}")
        ),
        None,
    )
    assert phase, f"the disk-full error names no run file: {line}"
    return phase


def _saved(output: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (output, companion(output, "_failures.jsonl")) if p.exists()}


def test_full_disk_at_every_phase_then_resume_finishes(tmp_path: Path, shared_demo_server) -> None:
    """Each amount of free space ends in exit 0 or a named disk-full error; a resume then finishes
    with nothing saved lost; the phases start-up/lock, preparation, dispatch and reporting all occur."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{"pad": "x" * 600} for _ in range(TASKS)])
    seen: dict[str, int] = {}
    url = shared_demo_server.url
    with small_filesystem(tmp_path / "fs", 1024) as disk:
        for pages in range(0, 40):
            folder = disk / f"case{pages}"
            folder.mkdir()
            output = folder / "out.jsonl"
            fill(disk, leave=pages * PAGE)
            run = collect(dataset, output, url, "+resume_from_cache=true", "+concurrency=3")
            assert "Traceback" not in run.stderr, run.stderr
            assert run.returncode in (0, 1), run.stderr
            if run.returncode == 1:
                phase = _phase(run.stderr, folder)
                seen[phase] = seen.get(phase, 0) + 1
            saved = _saved(output)
            free(disk)
            resumed = collect(dataset, output, url, "+resume_from_cache=true")
            assert resumed.returncode == 0, resumed.stderr
            cov = coverage_of(output)
            assert cov["complete"] is True and cov["expected"] == TASKS, cov
            for name, before in saved.items():
                assert (folder / name).read_bytes().startswith(before), f"{name} lost saved bytes"
            if run.returncode == 0 and "disk full" not in run.stderr:
                break  # enough room for the whole run: every phase has been seen before this
            shutil.rmtree(folder)
        assert free_bytes(disk) > 0
        fill(disk, leave=0)
        again = collect(dataset, output, url, "+resume_from_cache=true")
        assert again.returncode == 0, again.stderr  # a finished run resumed on a full disk is done
        assert "Traceback" not in again.stderr
    assert {"lock", "preparation", "dispatch", "reporting"} <= set(seen), seen
