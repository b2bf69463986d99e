"""The resume of a finished run, answered from its seal: the same words and exit as the full resume,
without the run's server; any change to what it depends on takes the full path again.

Real processes: the demo Environment Server and ``gymslurm collect`` as subprocesses.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gymslurm.collector.seal import SAID_FROM_SEAL
from tests.e2e.helpers import collect, companion, gymslurm, write_tasks

pytestmark = pytest.mark.e2e

RESUME = "+resume_from_cache=true"
# One task of each ending a finished run can have: a result, a terminal failure, an omission, a
# masked result, an unscored one, and a retryable failure that spends its whole budget.
MIXED = [
    {},
    {"_demo_fault": "terminal"},
    {"_demo_fault": "omit"},
    {"_demo_fault": "masked"},
    {"_demo_fault": "unscored"},
    {"_demo_fault": "retryable"},
]


def said(done: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    """Exit status and both streams, without the one line a replay adds (where its answer came from)."""
    lines = done.stderr.splitlines(keepends=True)
    return (
        done.returncode,
        done.stdout,
        "".join(line for line in lines if not line.startswith(SAID_FROM_SEAL)),
    )


def from_seal(done: subprocess.CompletedProcess[str]) -> bool:
    return SAID_FROM_SEAL in done.stderr


def finished_run(
    server_url: str, tmp_path: Path, *overrides: str, tasks: list[dict[str, Any]] | None = None
) -> Path:
    dataset = write_tasks(tmp_path / "tasks.jsonl", tasks or [{}, {}, {}])
    output = tmp_path / "run" / "out.jsonl"
    done = collect(dataset, output, server_url, *overrides)
    assert done.returncode in (0, 76), done.stderr
    assert companion(output, "_finished.json").exists(), done.stderr
    return output


@pytest.mark.parametrize(
    "overrides",
    [
        ("+summary=true",),
        ("+require_complete=true",),
        ("+disable_health_check=true",),
        ("+disable_aggregation=true",),
    ],
)
def test_the_seal_answers_as_the_full_resume_does(
    start_demo_server: Callable[..., Any], tmp_path: Path, overrides: tuple[str, ...]
) -> None:
    """Words on both streams and exit status of a resume from the seal equal those of the full resume."""
    server = start_demo_server("--accuracy", "1.0")
    output = finished_run(server.url, tmp_path, *overrides, tasks=MIXED)
    dataset, seal = tmp_path / "tasks.jsonl", companion(output, "_finished.json")
    sealed = collect(dataset, output, server.url, *overrides, RESUME)
    seal.unlink()
    full = collect(dataset, output, server.url, *overrides, RESUME)
    assert seal.exists()  # the full resume sealed the run again
    assert from_seal(sealed) and not from_seal(full)
    assert said(sealed) == said(full)
    assert "exit " in full.stderr


def test_a_folder_others_can_write_is_warned_about_from_the_seal_too(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """The folder's mode is not sealed: its warning comes first from the seal as from the full path."""
    server = start_demo_server("--accuracy", "1.0")
    output = finished_run(server.url, tmp_path)
    output.parent.chmod(0o777)
    sealed = collect(tmp_path / "tasks.jsonl", output, server.url, RESUME)
    companion(output, "_finished.json").unlink()
    full = collect(tmp_path / "tasks.jsonl", output, server.url, RESUME)
    assert from_seal(sealed) and said(sealed) == said(full)
    assert "is writable by other users" in sealed.stderr.splitlines()[0]


def test_a_finished_run_whose_server_is_down_takes_the_full_path(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """The seal keeps the servers' side of the identity and asks for it again: with the server down it
    proves nothing, and the full path says why it cannot go on (never "complete" unasked)."""
    server = start_demo_server("--accuracy", "1.0")
    output = finished_run(server.url, tmp_path)
    server.stop()
    done = collect(tmp_path / "tasks.jsonl", output, server.url, RESUME)
    assert done.returncode != 0 and not from_seal(done)
    assert "cannot read the Environment Server's configuration" in done.stderr, done.stderr


def test_a_finished_run_whose_identity_names_no_server_resumes_without_one(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Given its Environment Server configuration in the command, a finished shard's resume needs no
    server up: nothing is asked, nothing is sent."""
    server = start_demo_server("--accuracy", "1.0")
    given = "+environment_config={demo: {verifier: exact}}"
    output = finished_run(server.url, tmp_path, given)
    server.stop()
    done = collect(tmp_path / "tasks.jsonl", output, server.url, given, RESUME)
    assert done.returncode == 0, done.stderr
    assert from_seal(done)
    assert done.stderr.splitlines()[-1] == "gymslurm collect: exit 0: complete"


def test_a_links_resume_is_answered_from_the_seal(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A chain's link gives its collector every override in GYMSLURM_COLLECT_OVERRIDES, a URL with a
    password among them: its finished shard is sealed and its resume answered from the seal (the
    server asked again through that URL), the password kept out of the seal."""
    server = start_demo_server("--accuracy", "1.0")
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}])
    output = tmp_path / "run" / "out.jsonl"
    url = server.url.replace("http://", "http://bench:pw-CANARY7@")  # a password inside a value
    overrides = [
        f"+input_jsonl_fpath={dataset}",
        f"+output_jsonl_fpath={output}",
        RESUME,
        f"+environment_server_url={url}",
        "+require_complete=true",
    ]
    env = {"GYMSLURM_COLLECT_OVERRIDES": json.dumps(overrides)}
    first = gymslurm("collect", env=env)
    assert first.returncode == 0, first.stderr
    again = gymslurm("collect", env=env)
    assert again.returncode == 0, again.stderr
    assert from_seal(again)
    assert again.stderr.splitlines()[-1] == "gymslurm collect: exit 0: complete"
    assert "CANARY7" not in companion(output, "_finished.json").read_text()


def _touch_dataset(output: Path) -> None:
    os.utime(output.parent.parent / "tasks.jsonl")


def _append_blank_line(output: Path) -> None:
    with output.open("a") as handle:
        handle.write("\n")


def _remove_health(output: Path) -> None:
    companion(output, "_health.json").unlink()


def _damage_seal(output: Path) -> None:
    companion(output, "_finished.json").write_text("{")


@pytest.mark.parametrize(
    ("change", "overrides", "env"),
    [
        (_touch_dataset, (), {}),  # the same bytes, touched
        (_append_blank_line, (), {}),
        (_remove_health, (), {}),
        (_damage_seal, (), {}),
        (None, ("+require_complete=true",), {}),
        (None, (), {"NEMO_GYM_MAX_ROLLOUT_ATTEMPTS": "5"}),
    ],
)
def test_any_change_takes_the_full_path(
    start_demo_server: Callable[..., Any],
    tmp_path: Path,
    change: Callable[[Path], None] | None,
    overrides: tuple[str, ...],
    env: dict[str, str],
) -> None:
    """A touched file, another override or another failure budget is not answered from the seal."""
    server = start_demo_server("--accuracy", "1.0")
    output = finished_run(server.url, tmp_path)
    if change is not None:
        change(output)
    done = collect(tmp_path / "tasks.jsonl", output, server.url, RESUME, *overrides, env=env)
    assert not from_seal(done), done.stderr


def test_a_run_with_rollouts_left_is_not_sealed(
    start_demo_server: Callable[..., Any], tmp_path: Path
) -> None:
    """A collection that leaves a retry for the next invocation leaves no seal: its resume dispatches."""
    server = start_demo_server("--accuracy", "1.0")
    dataset = write_tasks(
        tmp_path / "tasks.jsonl", [{}, {"_demo_fault": "retryable", "_demo_fault_attempts": 1}]
    )
    output = tmp_path / "run" / "out.jsonl"
    first = collect(dataset, output, server.url, "+retry_in_invocation=false")
    assert not companion(output, "_finished.json").exists(), first.stderr
    again = collect(dataset, output, server.url, "+retry_in_invocation=false", RESUME)
    assert again.returncode == 0, again.stderr
    assert "1 of 2 rollouts to dispatch" in again.stderr
    assert companion(output, "_finished.json").exists()


def test_the_seal_is_read_under_the_run_lock(start_demo_server: Callable[..., Any], tmp_path: Path) -> None:
    """A run another process holds is not answered from its seal: the resume is refused as the lock says."""
    server = start_demo_server("--accuracy", "1.0")
    output = finished_run(server.url, tmp_path)
    with companion(output, "_run.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = collect(tmp_path / "tasks.jsonl", output, server.url, RESUME)
    assert done.returncode == 1, done.stderr
    assert "another collector holds the run lock" in done.stderr
