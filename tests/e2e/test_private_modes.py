"""Every file gymslurm creates is 0600 and every folder 0700, whatever the umask (issue 20, section 5).

Under umask 000 (the worst a user can have), a collection into a fresh nested folder and a local
submit into a fresh ``run_root`` leave nothing another user could read: the run lock, the
companions, the folders, the job logs and the local backend's queue files included.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.helpers import collect, gymslurm, write_tasks

pytestmark = pytest.mark.e2e


@contextmanager
def umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _loose(top: Path) -> list[str]:
    """Everything at or below ``top`` that a group or another user may read, write or enter."""
    paths = [top, *top.rglob("*")]
    return [
        f"{p} {p.stat().st_mode & 0o777:o}" for p in paths if not p.is_symlink() and p.stat().st_mode & 0o077
    ]


def test_a_collection_under_umask_000_leaves_only_private_files(tmp_path: Path, demo_server) -> None:
    """The lock, the outputs and the folders collect creates are 0600/0700 under umask 000."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}])
    output = tmp_path / "new" / "deeper" / "o.jsonl"
    with umask(0):
        done = collect(dataset, output, demo_server.url)
    assert done.returncode == 0, done.stderr
    assert (output.parent / "o_run.lock").exists()
    assert _loose(tmp_path / "new") == []


def test_a_local_submit_under_umask_000_leaves_only_private_files(tmp_path: Path, shared_demo_server) -> None:
    """run_root, the run directory, job logs and the local queue are private under umask 000."""
    py = sys.executable
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}])
    bench = tmp_path / "b.yaml"
    bench.write_text(
        json.dumps(
            {
                "dataset": str(dataset),
                "run_root": str(tmp_path / "fresh" / "runs"),
                "backend": "local",
                "servers": [{"name": "env", "url": shared_demo_server.url}],
                "collector": {"command": [py, "-m", "gymslurm", "collect"]},
                "slurm": {"python": py},
                "aggregation": {
                    "command": [py, "-m", "gymslurm", "aggregate", "{inputs}", "+output_jsonl_fpath={output}"]
                },
            }
        )
    )
    with umask(0):
        done = gymslurm("submit", str(bench), "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((tmp_path / "fresh").rglob("*.out")), "the job logs are there"
    assert _loose(tmp_path / "fresh") == []
