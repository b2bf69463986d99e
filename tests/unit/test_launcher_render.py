"""Rendering of sbatch scripts, pinned by recorded scripts.

To accept an intended change of a template or of render.py, rerun with
``GYMSLURM_ACCEPT_RENDER=1 python -m pytest tests/unit/test_launcher_render.py`` and review the
diff of tests/unit/recorded/ before committing it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gymslurm.errors import ConfigError
from gymslurm.site.render import (
    AGGREGATE_TEMPLATE,
    LINK_TEMPLATE,
    ScriptValues,
    command_line,
    directives_block,
    env_setup_block,
    load_template,
    render,
)

RECORDED = Path(__file__).parent / "recorded"

VALUES = ScriptValues(
    run_name="demo-20260101T000000Z",
    shard="000",
    job_name="gs-demo-20260101T000000Z-s000",
    script_path="/runs/demo-20260101T000000Z/scripts/shard-000.sbatch",
    log_path="/runs/demo-20260101T000000Z/logs/shard-000-%j.out",
    ledger_path="/runs/demo-20260101T000000Z/shards/000/ledger.jsonl",
    signal_lead=90,
    time_limit="00:30:00",
    directives=directives_block("low", "proj", None, ["--mem=4G", "#SBATCH --gres=gpu:1"]),
    env_setup=env_setup_block(["source /opt/venv/bin/activate"]),
    workdir="/home/u/eval",
    command=command_line(
        ["python", "-m", "gymslurm", "chain-step", "--run-dir", "/runs/x y", "--shard", "0"]
    ),
)


@pytest.mark.parametrize("template", [LINK_TEMPLATE, AGGREGATE_TEMPLATE])
def test_rendering_matches_recorded_script(template: str) -> None:
    """The rendered script equals the recorded one (see the module docstring to accept a change)."""
    text = render(load_template(template), VALUES)
    recorded = RECORDED / template
    if os.environ.get("GYMSLURM_ACCEPT_RENDER") == "1":
        recorded.write_text(text)
    assert text == recorded.read_text(), (
        f"{template} renders differently from {recorded}. If the change is intended, rerun with "
        "GYMSLURM_ACCEPT_RENDER=1 and review the recorded diff."
    )


@pytest.mark.parametrize(
    "line",
    ["#SBATCH --open-mode=append", "#SBATCH --signal=B:USR1@90"],
)
@pytest.mark.parametrize("template", [LINK_TEMPLATE, AGGREGATE_TEMPLATE])
def test_script_has_safety_directive(template: str, line: str) -> None:
    """Every script appends output, drops invalid dependencies and signals the batch shell."""
    assert line in render(load_template(template), VALUES).splitlines()


@pytest.mark.parametrize("template", [LINK_TEMPLATE, AGGREGATE_TEMPLATE])
def test_script_is_valid_bash(template: str) -> None:
    """The rendered script parses as bash."""
    text = render(load_template(template), VALUES)
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_script_forwards_signals_and_waits(tmp_path: Path) -> None:
    """USR1 sent to the batch shell reaches its child, and the shell exits with the child's code."""
    child = "python3 -c 'import signal,sys,time; signal.signal(signal.SIGUSR1, lambda *a: sys.exit(75)); "
    child += 'print("ready", flush=True); time.sleep(60)\''
    values = ScriptValues(**{**VALUES.__dict__, "command": child, "workdir": str(tmp_path), "env_setup": ""})
    script = tmp_path / "s.sh"
    script.write_text(render(load_template(LINK_TEMPLATE), values))
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(10)
    assert proc.wait(timeout=30) == 75


def test_directives_skip_unset_values() -> None:
    """Partition, account and qos appear only when set; extra lines get an #SBATCH prefix."""
    assert directives_block(None, "acc", "", ["--exclusive"]) == "#SBATCH --account=acc\n#SBATCH --exclusive"


def test_unknown_variable_is_a_config_error() -> None:
    """A template naming a variable render does not know fails with a pointer to the README."""
    with pytest.raises(ConfigError, match="README"):
        render("#!/bin/bash\necho $nope\n", VALUES)


def test_no_secret_reaches_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """A canary secret in the submitting environment never appears in a rendered script."""
    monkeypatch.setenv("OPENAI_API_KEY", "canary-sk-4f2a")
    for template in (LINK_TEMPLATE, AGGREGATE_TEMPLATE):
        assert "canary-sk-4f2a" not in render(load_template(template), VALUES)


def test_the_link_script_lists_every_server_command_with_credentials_redacted() -> None:
    """The script header names each server a link starts, in order, as it will run; no secret."""
    from gymslurm.site.render import servers_block

    block = servers_block(
        [
            ("policy", ["vllm", "serve", "m", "--port", "{port}", "--api-key", "sk-live-0123456789"], None),
            ("env", None, "http://10.0.0.5:8000"),
        ]
    )
    assert block.splitlines()[0].startswith("#   policy: vllm serve m --port '{port}' --api-key ")
    assert "sk-live-0123456789" not in block
    assert block.splitlines()[1] == "#   env: already running at http://10.0.0.5:8000"
