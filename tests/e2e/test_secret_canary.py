"""Secrets in a collector's configuration never reach any file the run store writes.

Canary values of every credential form of spec 001 go into the configuration (and one into the
environment, read through an interpolation); after a real collection and a resume, no file beside
the output — nor the collector's own output — contains any of them.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tests.e2e.helpers import collect, write_tasks

pytestmark = pytest.mark.e2e

CANARIES = {
    "key": "CANARY-KEY-1f3a",
    "secrets": "CANARY-SECRETS-MAP-77c2",
    "header": "CANARY-AUTH-HEADER-9d0e",
    "named": "CANARY-NAMED-VALUE-2b6f",
    "assignment": "CANARY-ASSIGNMENT-5e81",
    "bearer": "CANARY-BEARER-c4d7",
    "basic": "CANARY-BASIC-PW-0a9b",
    "url": "CANARY-URL-PW-6f12",
    "env": "CANARY-ENV-TOKEN-8e3d",
}
BASIC = base64.b64encode(f"alice:{CANARIES['basic']}".encode()).decode()


def write_config(folder: Path) -> Path:
    """A collect config (on top of the shipped defaults) with every credential form in it."""
    folder.mkdir()
    (folder / "canary.yaml").write_text(
        f"""defaults:
  - collect
  - _self_
environment_config:
  model: demo-arith
  judge:
    api_key: {CANARIES["key"]}
    secrets:
      anything: {CANARIES["secrets"]}
    headers:
      Authorization: Bearer {CANARIES["header"]}
    env:
      - name: JUDGE_TOKEN
        value: {CANARIES["named"]}
    command: "run-judge OPENAI_API_KEY={CANARIES["assignment"]} --fast"
    note: "call with Bearer {CANARIES["bearer"]} or Basic {BASIC}"
    dsn: "https://judge:{CANARIES["url"]}@judge.example/v1"
    hf_token: ${{oc.env:GYMSLURM_CANARY_HF_TOKEN}}
"""
    )
    return folder


def test_no_canary_reaches_any_run_file(tmp_path: Path, demo_server) -> None:
    """Every credential form is redacted from every file the store writes, fresh and on resume."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}, {}])
    config = write_config(tmp_path / "conf")
    output = tmp_path / "run" / "out.jsonl"
    env = {"GYMSLURM_CANARY_HF_TOKEN": CANARIES["env"]}
    options = ("--config-dir", str(config), "--config-name", "canary")
    runs = [collect(dataset, output, demo_server.url, *options, env=env)]
    runs.append(collect(dataset, output, demo_server.url, *options, "+resume_from_cache=true", env=env))
    assert [run.returncode for run in runs] == [0, 0], [run.stderr for run in runs]
    written = {path: path.read_bytes() for path in output.parent.iterdir() if path.is_file()}
    assert output.with_name("out_identity.json") in written
    for name, canary in CANARIES.items():
        leaks = [str(path) for path, data in written.items() if canary.encode() in data]
        logs = [run.stdout + run.stderr for run in runs if canary in run.stdout + run.stderr]
        assert not leaks and not logs, f"{name} canary leaked into {leaks or 'the collector output'}"
