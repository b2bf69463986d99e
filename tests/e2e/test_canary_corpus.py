"""The canary corpus through a real local submit: 0 leaks on every channel (issue 20).

Every form of tests/canary_corpus.py goes into one run twice over — as a ``collector.env`` value
and as a collector override (``+environment_config.corpus.fNN='...'``) — once written in the
benchmark file and once typed as ``submit`` overrides. The jobs start a demo server by command and
run the real collector. While they run, every ``/proc/*/cmdline`` is sampled, and the
``/proc/*/environ`` of the server and of the aggregation (when the sampler catches it);
afterwards every file under the test's folder (run directory: scripts, logs, ledgers, outputs,
benchmark.yaml, run.json), the stdout/stderr of ``submit``,
``status``, ``logs`` and ``health`` are searched. What the user typed stays theirs (the benchmark
file and the typed ``submit`` command line); everything else holds no needle.

The second test asks the same samples one more thing: no gymslurm process that gymslurm started
carries configuration on its command line — the collector's argv is its command, the chain step's
is ``--run-dir RUN --shard N`` (or ``--aggregate``). The third asks it of ``submit --reverify``: the
re-grading process's argv is ``reverify --judge-failed-only``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.canary_corpus import FORMS
from tests.e2e.helpers import gymslurm, write_tasks

pytestmark = [pytest.mark.e2e, pytest.mark.every_process]  # a neighbour's argv would be sampled


def _hydra_quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _benchmark(tmp_path: Path, in_file: bool) -> Path:
    py = sys.executable
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}])
    server = [py, "-m", "gymslurm", "demo-server", "--host", "{host}", "--port", "{port}"]
    collector: dict[str, object] = {
        "command": [py, "-m", "gymslurm", "collect"],
        "overrides": ["+progress=plain", "+summary=false"],
    }
    if in_file:
        collector["env"] = {f"CORPUS_{i:02d}": form.text for i, form in enumerate(FORMS)}
        collector["overrides"] += [  # type: ignore[operator]
            f"+environment_config.corpus.f{i:02d}={_hydra_quoted(form.text)}" for i, form in enumerate(FORMS)
        ]
    bench = tmp_path / "corpus.yaml"
    bench.write_text(
        json.dumps(
            {
                "dataset": str(dataset),
                "shards": 1,
                "run_root": str(tmp_path / "runs"),
                "backend": "local",
                "servers": [{"name": "env", "command": server, "health_path": "/health"}],
                "collector": collector,
                "slurm": {"python": py},
                "aggregation": {
                    "command": [py, "-m", "gymslurm", "aggregate", "{inputs}", "+output_jsonl_fpath={output}"]
                },
            }
        )
    )
    return bench


def _typed_overrides() -> list[str]:
    env = [f"++collector.env.CORPUS_{i:02d}={_hydra_quoted(form.text)}" for i, form in enumerate(FORMS)]
    return env


@contextmanager
def sampling_processes(folder: Path) -> Iterator[tuple[set[str], set[str], set[str]]]:
    """While the block runs: every distinct command line seen, the environments of the demo servers
    and of the aggregation, and the command lines of gymslurm processes of this test (their
    environment names ``folder``)."""
    lines: set[str] = set()
    servers: set[str] = set()
    ours: set[str] = set()
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    lines.add(line)
                    if " -m gymslurm " in line and line not in ours:
                        environ = (entry / "environ").read_bytes().decode(errors="replace")
                        if " demo-server " in line or " gymslurm aggregate " in line:
                            servers.add(environ)  # neither may hold the collector's variables
                        if str(folder) in environ or str(folder) in line:
                            ours.add(line)
                except OSError:
                    continue
            time.sleep(0.02)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield lines, servers, ours
    finally:
        stop.set()
        thread.join()


def _run(tmp_path: Path, in_file: bool) -> tuple[dict[str, str], set[str], Path]:
    bench = _benchmark(tmp_path, in_file)
    typed = [] if in_file else _typed_overrides()
    outputs: dict[str, str] = {}
    with sampling_processes(tmp_path) as (lines, servers, ours):
        done = gymslurm("submit", str(bench), "--wait", *typed)
        (run,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
        for name, result in {
            "submit": done,
            "status": gymslurm("status", str(run)),
            "logs": gymslurm("logs", str(run), "0"),
            "health": gymslurm("health", str(run / "output" / "merged" / "rollouts.jsonl")),
        }.items():
            outputs[f"{name} stdout"], outputs[f"{name} stderr"] = result.stdout, result.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert servers, "the sampler saw the demo server run"
    files = {str(p): p.read_bytes().decode(errors="replace") for p in tmp_path.rglob("*") if p.is_file()}
    del files[str(bench)]  # what the user wrote
    mine = {line for line in lines if " -m gymslurm submit " in line}
    processes = {f"cmdline {i}": line for i, line in enumerate(sorted(lines - mine))}
    environs = {f"server environ {i}": text for i, text in enumerate(sorted(servers))}
    return {**files, **outputs, **processes, **environs}, ours - mine, run


def _leaks(texts: dict[str, str]) -> list[str]:
    return [
        f"{form.label!r} in {where}" for form in FORMS for where, text in texts.items() if form.needle in text
    ]


@pytest.mark.parametrize(
    "in_file", [True, False], ids=["in the benchmark file", "on the submit command line"]
)
def test_no_form_of_the_corpus_leaks_on_any_channel(tmp_path: Path, in_file: bool) -> None:
    """Files, logs, stdout/stderr, every process's argv and the server's environment: 0 needles."""
    texts, ours, _ = _run(tmp_path, in_file)
    assert any(" chain-step " in line for line in ours), "the sampler saw the chain step"
    assert any(" gymslurm collect" in line for line in ours), "the sampler saw the collector"
    leaks = _leaks(texts)
    assert not leaks, f"{len(leaks)} leaks:\n" + "\n".join(leaks)


def test_no_process_gymslurm_starts_carries_configuration_on_its_command_line(tmp_path: Path) -> None:
    """The collector's argv is its command; the chain step's is the run dir and the shard, nothing more."""
    _, lines, run = _run(tmp_path, in_file=True)
    py = sys.executable
    collectors = [line.split() for line in lines if " -m gymslurm collect" in line]
    steps = [line.split() for line in lines if " -m gymslurm chain-step " in line]
    assert collectors and steps
    assert all(argv == [py, "-m", "gymslurm", "collect"] for argv in collectors), collectors
    allowed = ({"--shard", "0"}, {"--aggregate"})
    head = [py, "-m", "gymslurm", "chain-step", "--run-dir", str(run)]
    assert all(argv[:6] == head and set(argv[6:]) in allowed for argv in steps), steps


def test_no_reverify_process_carries_configuration_on_its_command_line(tmp_path: Path) -> None:
    """``submit --reverify``: the re-grading process's argv is its command (``reverify
    --judge-failed-only``), its overrides in its environment; the chain step's is the run dir and shard."""
    from tests.e2e.launcher_chains_helpers import wait_until_final
    from tests.e2e.test_submit_reverify import TASKS, benchmark

    write_tasks(tmp_path / "data.jsonl", TASKS)  # two judge failures left when the walltime stops it
    first = gymslurm("submit", str(benchmark(tmp_path)), "--wait")
    assert first.returncode != 0, first.stdout
    (source,) = [p.parent for p in (tmp_path / "runs").glob("*/run.json")]
    with sampling_processes(tmp_path) as (_, _, ours):
        done = gymslurm("submit", "--reverify", str(source), "--wait")
        run = Path(done.stdout.split("gymslurm status ", 1)[1].split()[0])
        wait_until_final(run)
    py = sys.executable
    graders = [line.split() for line in ours if " -m gymslurm reverify" in line]
    steps = [line.split() for line in ours if " -m gymslurm chain-step " in line]
    assert graders and steps, ours
    assert all(argv == [py, "-m", "gymslurm", "reverify", "--judge-failed-only"] for argv in graders), graders
    head = [py, "-m", "gymslurm", "chain-step", "--run-dir", str(run)]
    allowed = ({"--shard", "0"}, {"--shard", "1"}, {"--aggregate"})
    assert all(argv[:6] == head and set(argv[6:]) in allowed for argv in steps), steps
