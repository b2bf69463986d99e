"""Helpers shared by the end-to-end tests: datasets, the CLI as a subprocess, and reading a run's files.

One copy here instead of one per test module, so the tests agree on how a dataset looks, how the
collector is invoked and where a companion file lives. Trade-off: the helpers read run files with
plain ``json`` (not gymslurm's own readers), so the tests check the on-disk format independently.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def write_tasks(path: Path, specs: list[dict[str, Any]]) -> Path:
    """A native dataset: one arithmetic task per spec; spec keys are extra task_input fields (demo faults)."""
    with path.open("w") as handle:
        for number, extra in enumerate(specs):
            task_input = {"question": f"What is {number} + 1?", "a": number, "b": 1, "op": "+", **extra}
            row = {"task_id": {"taskset": "arith", "task_id": str(number)}, "task_input": task_input}
            handle.write(json.dumps(row) + "\n")
    return path


def gymslurm(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m gymslurm ARGS`` from the worktree root to its end (text output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "gymslurm", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def collect_args(dataset: Path, output: Path, url: str | None, *overrides: str) -> list[str]:
    """The ``collect`` arguments of one run (plain progress, no summary table)."""
    server = [f"+environment_server_url={url}"] if url else []
    return [
        "collect",
        f"+input_jsonl_fpath={dataset}",
        f"+output_jsonl_fpath={output}",
        *server,
        "+progress=plain",
        "+summary=false",
        *overrides,
    ]


def collect_command(dataset: Path, output: Path, url: str | None, *overrides: str) -> list[str]:
    """The full ``python -m gymslurm collect ...`` command line, for a process started by the test."""
    return [sys.executable, "-m", "gymslurm", *collect_args(dataset, output, url, *overrides)]


def collect(
    dataset: Path, output: Path, url: str | None, *overrides: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one collection to its end."""
    return gymslurm(*collect_args(dataset, output, url, *overrides), env=env)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every row of a JSONL file; none when it does not exist."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load(path: Path) -> Any:
    """A JSON file's content."""
    return json.loads(path.read_text())


def companion(output: Path, suffix: str) -> Path:
    """``<dir>/<stem><suffix>`` beside an output."""
    return output.with_name(output.stem + suffix)


def coverage_of(output: Path) -> dict[str, Any]:
    """The collector's ``<stem>_coverage.json``."""
    coverage: dict[str, Any] = load(companion(output, "_coverage.json"))
    return coverage


def reservations_of(output: Path) -> list[int]:
    """The per-rollout reservation counts (docs/formats.md layout)."""
    data = companion(output, "_reservations.bin").read_bytes()
    (count,) = struct.unpack_from("<Q", data, 16)
    return list(struct.unpack_from(f"<{count}I", data, 64))


def snapshot(folder: Path) -> dict[str, str]:
    """Digest of every run file except the lock (its holder line is rewritten by every opener)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if not path.name.endswith("_run.lock")
    }
