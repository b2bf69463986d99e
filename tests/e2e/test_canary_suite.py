"""The canary suite: no secret on disk, on a command line, or in a log (issue 10, section 2).

One distinct canary per credential form of spec 001 is planted in every input channel a user has —
the benchmark file (collector env, collector overrides, server URLs and env), submit overrides, an
interpolated environment variable, the collector's overrides and URLs — then real commands run
(``submit`` on the local backend with the real collector and the demo server, ``--dry-run``,
``status``, ``health`` on the merged output, ``collect`` refused and failing, error paths). Every file
written, every command's stdout/stderr, and the command line of every process seen while they ran
(``/proc/*/cmdline``) are grepped: 0 hits. The real-Slurm submit is in tests/slurm.

One exception is by design and asserted separately: a credential written into a server's own
``command`` is on that server's command line (gymslurm cannot make a program read an argument from
elsewhere); ``submit`` warns about it, and it still reaches no file, log or message.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.helpers import collect, gymslurm, write_tasks

pytestmark = [pytest.mark.e2e, pytest.mark.every_process]  # a neighbour's argv would be sampled

CANARIES = {
    "credential-named key": "CNRY-KEY-a11",
    "secrets mapping": "CNRY-SECRETS-b22",
    "Authorization header": "CNRY-AUTHZ-c33",
    "x-api-key header": "CNRY-XAPI-d44",
    "name/value entry": "CNRY-NAMED-e55",
    "NAME=V string": "CNRY-ASSIGN-f66",
    "--api-key V pair": "CNRY-FLAG-g77",
    "Bearer under a plain key": "CNRY-BEARER-h88",
    "Basic credential": "CNRY-BASIC-i99",
    "server URL password": "CNRY-URLPW-j10",
    "DSN password in env": "CNRY-DSN-k11",
    "oc.env interpolation": "CNRY-ENVVAR-l12",
    "submit override": "CNRY-SUBMIT-m13",
    "submit override URL": "CNRY-SUBURL-n14",
}
BASIC = base64.b64encode(f"alice:{CANARIES['Basic credential']}".encode()).decode()
ENV = {"CANARY_JUDGE_TOKEN": CANARIES["oc.env interpolation"]}


def _environment_config_override() -> str:
    """A collector override carrying most forms inside the environment configuration."""
    c = CANARIES
    return (
        "+environment_config={judge: {api_key: "
        + c["credential-named key"]
        + ", secrets: {anything: "
        + c["secrets mapping"]
        + "}, headers: {Authorization: 'Bearer "
        + c["Authorization header"]
        + "', x-api-key: "
        + c["x-api-key header"]
        + "}, env: [{name: JUDGE_TOKEN, value: "
        + c["name/value entry"]
        + "}], cmd: 'run JUDGE_TOKEN="
        + c["NAME=V string"]
        + " --api-key "
        + c["--api-key V pair"]
        + "', note: 'Bearer "
        + c["Bearer under a plain key"]
        + "', basic: 'Basic "
        + BASIC
        + "', token_ref: '${oc.env:CANARY_JUDGE_TOKEN}'}}"
    )


def _benchmark(tmp_path: Path, server_url: str) -> Path:
    """A benchmark whose collector reaches ``server_url`` (with a password) and carries every form."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}, {}, {}])
    py = sys.executable
    bench = tmp_path / "canary.yaml"
    bench.write_text(
        json.dumps(
            {
                "dataset": str(dataset),
                "shards": 2,
                "run_root": str(tmp_path / "runs"),
                "backend": "local",
                "servers": [{"name": "env", "url": server_url}],
                "collector": {
                    "command": [py, "-m", "gymslurm", "collect"],
                    "overrides": ["+progress=plain", "+summary=false", _environment_config_override()],
                    "env": {"DATABASE_URL": f"postgres://app:{CANARIES['DSN password in env']}@db:5432/x"},
                },
                "slurm": {"python": py},
                "aggregation": {
                    "command": [py, "-m", "gymslurm", "aggregate", "{inputs}", "+output_jsonl_fpath={output}"]
                },
            }
        )
    )
    return bench


@contextmanager
def watching_command_lines() -> Iterator[list[str]]:
    """Every distinct ``/proc/*/cmdline`` seen (polled) while the block runs."""
    seen: set[str] = set()
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        seen.add(
                            (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                        )
                    except OSError:
                        continue
            time.sleep(0.02)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    lines: list[str] = []
    try:
        yield lines
    finally:
        stop.set()
        thread.join()
        lines.extend(sorted(seen))


def _leaks(canaries: dict[str, str], texts: dict[str, str]) -> list[str]:
    return [
        f"{form} in {where}"
        for form, canary in canaries.items()
        for where, text in texts.items()
        if canary in text
    ]


def _files(folder: Path) -> dict[str, str]:
    return {str(p): p.read_bytes().decode(errors="replace") for p in folder.rglob("*") if p.is_file()}


def test_no_canary_reaches_files_logs_messages_or_command_lines_of_a_local_submit(
    tmp_path: Path, shared_demo_server
) -> None:
    """submit --wait (real collector), --dry-run, status and health leak no canary anywhere, ps included."""
    url = shared_demo_server.url.replace("http://", f"http://judge:{CANARIES['server URL password']}@")
    bench = _benchmark(tmp_path, url)
    mirror = f"https://u:{CANARIES['submit override URL']}@mirror/x"
    key = CANARIES["submit override"]
    overrides = [
        f"collector.env.OTHER_API_KEY={key}",
        f"+collector.env.MIRROR_URL={mirror}",
        "report.share=group",
    ]
    outputs: dict[str, str] = {}
    with watching_command_lines() as command_lines:
        dry = gymslurm("submit", str(bench), "--dry-run", *overrides, env=ENV)
        done = gymslurm("submit", str(bench), "--wait", *overrides, env=ENV)
        (run,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
        status = gymslurm("status", str(run), env=ENV)
        health = gymslurm("health", str(run / "output" / "merged" / "rollouts.jsonl"), env=ENV)
    for name, result in {"dry-run": dry, "submit": done, "status": status, "health": health}.items():
        outputs[f"{name} stdout"], outputs[f"{name} stderr"] = result.stdout, result.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert (run / "output" / "merged" / "rollouts.jsonl").read_text().count("\n") == 4
    assert (run / "report.html").stat().st_mode & 0o777 == 0o640, "report.share: group shares the page alone"
    assert "mean/reward" in (run / "report.html").read_text(), "the shared page holds the result"
    # What the user typed stays theirs: the benchmark file, and the command lines of the submit
    # commands this test ran (docs/security.md: pass such a value as ${oc.env:...} instead).
    typed = [line for line in command_lines if f" -m gymslurm submit {bench} " in line]
    assert len(typed) == 2
    processes = {f"cmdline {i}": line for i, line in enumerate(command_lines) if line not in typed}
    texts = {**_files(tmp_path), **outputs, **processes}
    del texts[str(bench)]
    assert any("chain-step" in line for line in command_lines), "the watcher saw the jobs run"
    leaks = _leaks(CANARIES, texts)
    assert not leaks, "\n".join(leaks)


def test_run_files_are_private(tmp_path: Path, shared_demo_server) -> None:
    """The run directory is 0700 and the collector's files 0600, under a permissive umask."""
    bench = _benchmark(tmp_path, shared_demo_server.url)
    previous = os.umask(0o002)
    try:
        done = gymslurm("submit", str(bench), "--wait", env=ENV)
    finally:
        os.umask(previous)
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
    assert run.stat().st_mode & 0o777 == 0o700
    for path in [run / "run.json", run / "benchmark.yaml", *(run / "output").rglob("*.json*")]:
        assert path.stat().st_mode & 0o077 == 0, path


def test_a_server_that_never_gets_healthy_leaks_no_canary_in_ledger_log_or_status(tmp_path: Path) -> None:
    """A server command with ``--api-key V`` that never answers: no canary in ledger, log, status, --wait."""
    # Values of its own: this server's argv is the user's command (ps may show it), so a canary the
    # other tests also look for would be found there by a neighbour's command-line watcher.
    canary = CANARIES["--api-key V pair"].replace("CNRY", "OWNC")
    env_canary = CANARIES["credential-named key"].replace("CNRY", "OWNC")
    py = sys.executable
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}])
    bench = tmp_path / "never.yaml"
    bench.write_text(
        json.dumps(
            {
                "dataset": str(dataset),
                "run_root": str(tmp_path / "runs"),
                "backend": "local",
                "servers": [
                    {
                        "name": "stuck",
                        "command": [py, "-c", "import time; time.sleep(30)", "--api-key", canary],
                        "startup_timeout_s": 1,
                        "env": {"STUCK_API_KEY": env_canary},
                    }
                ],
                "collector": {"command": [py, "-m", "gymslurm", "collect"]},
                "slurm": {"python": py, "infra_retry_limit": 0},
                "aggregation": {"enabled": False},
            }
        )
    )
    done = gymslurm("submit", str(bench), "--wait")
    (run,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
    status = gymslurm("status", str(run))
    assert "carries a credential on its command line" in done.stderr, "submit warns that ps would show it"
    ledger = (run / "shards" / "000" / "ledger.jsonl").read_text()
    assert "server start failed" in ledger
    texts = {**_files(tmp_path), "submit": done.stdout + done.stderr, "status": status.stdout + status.stderr}
    del texts[str(bench)]
    assert _leaks({"flag": canary, "env": env_canary}, texts) == []


@pytest.mark.parametrize(
    ("overrides", "what"),
    [
        (["+policy_api_key=CNRY-HYDRA-o15", "+limit=[unclosed"], "a Hydra grammar error"),
        (["+concurrency=${oc.env:CANARY_JUDGE_TOKEN}"], "a pydantic error of an interpolated value"),
        (["+environment_server_url=ftp://u:CNRY-BADURL-p16@h"], "a refused URL"),
    ],
)
def test_error_messages_carry_no_secret(tmp_path: Path, overrides: list[str], what: str) -> None:
    """Configuration errors name what is wrong without printing the secret they were given."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}])
    done = collect(dataset, tmp_path / "out" / "o.jsonl", None, *overrides, env=ENV)
    assert done.returncode == 2, what
    text = done.stdout + done.stderr
    assert "error" in text
    assert not [
        c for c in ("CNRY-HYDRA-o15", "CNRY-BADURL-p16", CANARIES["oc.env interpolation"]) if c in text
    ]


def test_transport_failures_and_config_fetch_errors_redact_the_url_password(tmp_path: Path) -> None:
    """Refused connections: failure records, health and the config-fetch error hold no URL password."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}])
    url = "http://judge:CNRY-DEAD-q17@127.0.0.1:9"  # discard port: connection refused
    output = tmp_path / "out" / "o.jsonl"
    failing = collect(  # the circuit breaker stops it 2 s after it opens (its default: a minute)
        dataset,
        output,
        url,
        "+environment_config={model: x}",
        "+dispatch_breaker_wait_s=2",
        env={"NEMO_GYM_MAX_ROLLOUT_ATTEMPTS": "1"},
    )
    fetch = collect(dataset, tmp_path / "out2" / "o.jsonl", url)
    assert fetch.returncode != 0, "an unreachable server cannot give its configuration"
    assert (output.parent / "o_failures.jsonl").read_text().count("transport_unreachable") >= 1
    texts = {
        **_files(tmp_path),
        "failing": failing.stdout + failing.stderr,
        "fetch": fetch.stdout + fetch.stderr,
    }
    assert _leaks({"url": "CNRY-DEAD-q17"}, texts) == []


def test_the_collector_takes_an_override_from_its_environment(tmp_path: Path, shared_demo_server) -> None:
    """``GYMSLURM_COLLECT_OVERRIDES`` is a real channel: the server URL given only there is used."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}])
    output = tmp_path / "out" / "o.jsonl"
    url = shared_demo_server.url.replace("http://", "http://judge:CNRY-CHANNEL-r18@")
    done = collect(
        dataset,
        output,
        None,
        env={"GYMSLURM_COLLECT_OVERRIDES": json.dumps([f"+environment_server_url={url}"])},
    )
    assert done.returncode == 0, done.stderr
    assert output.read_text().count("\n") == 2
    assert (
        _leaks({"channel": "CNRY-CHANNEL-r18"}, {**_files(tmp_path), "out": done.stdout + done.stderr}) == []
    )
