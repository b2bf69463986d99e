"""NeMo Gym 0.7.0's own servers, unchanged, on loopback: install, start, stop (the compat suite's harness).

What it does and why:

- :func:`ensure_nemo_gym` installs ``nemo-gym==0.7.0`` from PyPI into its own venv (it needs Python
  >= 3.13; pyenv's 3.13.0 works with ``--ignore-requires-python``; about 75 s and 1.4 GB), under a
  cache directory kept between runs: ``$GYMSLURM_NEMOGYM_CACHE``, else ``/var/cache/gymslurm-nemogym``
  when writable, else ``~/.cache/gymslurm-nemogym``. A venv is complete only once its marker file is
  written (a half-finished install is removed and redone); concurrent test runs serialize on a lock
  file. Nothing is skipped: no Python 3.13 or a failed install is a test **failure** naming the fix.
- :func:`start_stack` writes a stack config (the head server, the weather resources server of
  ``example_single_tool_call``, ``simple_agent``, ``openai_model`` in front of :mod:`fake_openai`, and the
  three Environment Servers: typed ``single_agent_turn``, the ``legacy_agent`` relay and the
  ``single_agent_turn_legacy`` adapter), and a second ``openai_model`` (``demo_policy``) in front of
  ``gymslurm demo-model-server``, and starts it with NeMo Gym's own launcher, ``gym env start``,
  in a session of its own. The head server listens at NeMo Gym's default address (127.0.0.1:11000)
  so that gymslurm's default config source is exercised; the other ports are free ports.
- :meth:`Stack.stop` sends SIGINT to ``gym env start`` and then stops **every process of its session**
  by pid (SIGTERM, then SIGKILL): NeMo Gym leaves Ray helper processes running otherwise.

NeMo Gym's code is only run here, never imported or copied into gymslurm.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from gymslurm.demo.model import DEFAULT_MODEL

NEMO_GYM_VERSION = "0.7.0"
HEAD_PORT = 11000  # NeMo Gym's DEFAULT_HEAD_SERVER_PORT
START_TIMEOUT_S = 240.0
SHIPPED_START_CAP_S = 1200.0  # the shipped configs' 34 servers, however slowly they come up
INSTALL_TIMEOUT_S = 1200.0
MARKER = ".gymslurm-complete"
SERVER_DIRS = (
    "responses_api_models/openai_model",
    "resources_servers/example_single_tool_call",
    "responses_api_agents/simple_agent",
    "environment_servers/single_agent_turn",
    "environment_servers/legacy_agent",
    "environment_servers/single_agent_turn_legacy",
)
# Server names of the stack (the keys of its config) → the Environment Server type each runs.
TYPED, RELAY, ADAPTER = "weather_env", "weather_legacy_env", "weather_sat_legacy_env"
DEMO_POLICY = "demo_policy"  # NeMo Gym's openai_model in front of gymslurm's demo model server
HERE = Path(__file__).resolve().parent


class NemoGymSetupError(RuntimeError):
    """NeMo Gym could not be installed or started; the message says what to do."""


class StackExitedError(NemoGymSetupError):
    """``gym env start`` exited before every server answered (:func:`start_stack` tries once more)."""


# --- install ------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where the NeMo Gym venv is kept between runs (see the module docstring)."""
    configured = os.environ.get("GYMSLURM_NEMOGYM_CACHE")
    if configured:
        return Path(configured)
    system = Path("/var/cache/gymslurm-nemogym")
    with contextlib.suppress(OSError):
        system.mkdir(parents=True, exist_ok=True)
    if os.access(system, os.W_OK):
        return system
    return Path.home() / ".cache" / "gymslurm-nemogym"


def python313() -> str:
    """A Python >= 3.13 to build NeMo Gym's venv: $GYMSLURM_PYTHON313, pyenv's 3.13, or python3.13 on PATH."""
    candidates = [os.environ.get("GYMSLURM_PYTHON313")]
    candidates += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.13*/bin/python")), reverse=True)
    candidates.append(shutil.which("python3.13"))  # may be a pyenv shim that refuses to run
    check = "import sys; sys.exit(sys.version_info < (3, 13))"
    for candidate in filter(None, candidates):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            probe = subprocess.run([candidate, "-c", check], capture_output=True, timeout=30, check=False)
            if probe.returncode == 0:
                return candidate
    raise NemoGymSetupError(
        "NeMo Gym 0.7.0 needs Python >= 3.13 and none was found (tried $GYMSLURM_PYTHON313, "
        "~/.pyenv/versions/3.13*, python3.13 on PATH): install one (pyenv install 3.13) or set "
        "GYMSLURM_PYTHON313=/path/to/python3.13"
    )


def ensure_nemo_gym() -> Path:
    """The venv holding nemo-gym 0.7.0 (installed on first use); returns its directory."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / f"nemo-gym-{NEMO_GYM_VERSION}"
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = venv / MARKER
        if marker.exists() and marker.read_text().strip() == NEMO_GYM_VERSION:
            return venv
        shutil.rmtree(venv, ignore_errors=True)  # an interrupted install: start again
        _install(venv, root / "download")
        marker.write_text(NEMO_GYM_VERSION + "\n")
    return venv


def _install(venv: Path, download: Path) -> None:
    python = python313()
    wheel = download / f"nemo_gym-{NEMO_GYM_VERSION}-py3-none-any.whl"
    steps = []
    if not wheel.exists():
        steps.append(
            [
                python,
                "-m",
                "pip",
                "download",
                "--no-deps",
                f"nemo-gym=={NEMO_GYM_VERSION}",
                "--python-version",
                "3.13.14",
                "--only-binary=:all:",
                "-d",
                str(download),
            ]
        )
    steps.append([python, "-m", "venv", str(venv)])
    steps.append(
        [
            str(venv / "bin/pip"),
            "install",
            "-q",
            "--disable-pip-version-check",
            "--ignore-requires-python",
            str(wheel),
        ]
    )
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise NemoGymSetupError(
                f"installing NeMo Gym {NEMO_GYM_VERSION} failed at `{' '.join(argv)}` "
                f"(exit {done.returncode}):\n"
                f"{done.stderr[-3000:]}\nCheck network access to PyPI, or set GYMSLURM_NEMOGYM_CACHE to a "
                "directory holding a finished install"
            )


def site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python3.*/site-packages")
    return found


# --- the stack ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# NeMo Gym picks its servers' ports in 10001-20000 and Ray (which ``gym env start`` starts before the
# servers) its workers' there too and its own daemons' in the kernel's ephemeral range, where every
# outgoing connection also takes one: a port chosen there before the stack starts may be taken by
# the time a server binds it. The stack's own ports come from the gap between the two.
STACK_PORTS_LOW = 20_001


def ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (32768 when it cannot be read)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32_768


def stack_ports(names: Iterable[str]) -> dict[str, int]:
    """A free port for each name, all distinct, from the gap above NeMo Gym's and Ray's ranges and
    below the ephemeral one (see :data:`STACK_PORTS_LOW`)."""
    candidates = list(range(STACK_PORTS_LOW, ephemeral_low()))
    random.shuffle(candidates)
    free = (port for port in candidates if port_is_free(port))
    return {name: next(free) for name in names}


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Stack:
    """A running NeMo Gym stack; ``urls`` maps each server name to its base URL."""

    venv: Path
    workdir: Path
    urls: dict[str, str]
    gym: subprocess.Popen[bytes]
    fake: subprocess.Popen[bytes]
    dataset: Path
    log: Path
    demo_model: subprocess.Popen[bytes] | None = None  # gymslurm demo-model-server behind demo_policy
    stopped: list[int] = field(default_factory=list)

    @property
    def head_url(self) -> str:
        return self.urls["head"]

    def gym_command(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run NeMo Gym's own ``gym`` CLI against this stack (text output captured)."""
        return subprocess.run(
            [str(self.venv / "bin/gym"), *args],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop(self) -> list[int]:
        """SIGINT to ``gym env start``, then every process of its session by pid; returns the pids stopped."""
        with contextlib.suppress(ProcessLookupError):
            self.gym.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.gym.wait(timeout=15)
        self.stopped = stop_session(self.gym.pid) + stop_session(self.fake.pid)
        if self.demo_model is not None:
            self.stopped += stop_session(self.demo_model.pid)
        return self.stopped

    def leftovers(self) -> list[psutil.Process]:
        """Processes of the stack's sessions still alive (zombies excluded)."""
        sessions = [self.gym.pid, self.fake.pid, *([self.demo_model.pid] if self.demo_model else [])]
        return [p for sid in sessions for p in _session_members(sid) if _alive(p)]


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _session_members(sid: int) -> list[psutil.Process]:
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(process.pid) == sid:
                members.append(process)
    return members


def stop_session(sid: int, grace_s: float = 10.0) -> list[int]:
    """Terminate every process of session ``sid`` by pid, SIGKILL what is left after ``grace_s``."""
    members = _session_members(sid)
    for process in members:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(members, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=5)
    return [process.pid for process in members]


def stack_config(ports: dict[str, int]) -> str:
    """The stack's NeMo Gym config (JSON is YAML): every server on loopback at its port."""
    loop = {"entrypoint": "app.py", "host": "127.0.0.1"}
    resources = {"type": "resources_servers", "name": "weather"}
    agent = {"type": "responses_api_agents", "name": "weather_agent"}
    session = {
        "resources_server": resources,
        "agent_server": agent,
        "resources_tool_transports": ["direct_http"],
        "max_concurrent_episodes": None,
        "queue_timeout_seconds": None,
        "default_episode_timeout_seconds": 600,
        "cleanup_timeout_seconds": 30,
    }
    config = {
        "head_server": {"host": "127.0.0.1", "port": ports["head"]},
        "policy_model": {
            "responses_api_models": {
                "openai_model": {
                    **loop,
                    "port": ports["model"],
                    "openai_base_url": f"http://127.0.0.1:{ports['fake']}/v1",
                    "openai_api_key": "dummy",
                    "openai_model": "fake",
                    "openai_default_headers": {},
                }
            }
        },
        DEMO_POLICY: {
            "responses_api_models": {
                "openai_model": {
                    **loop,
                    "port": ports[DEMO_POLICY],
                    "openai_base_url": f"http://127.0.0.1:{ports['demo_model']}/v1",
                    "openai_api_key": "dummy",
                    "openai_model": DEFAULT_MODEL,
                    "openai_default_headers": {},
                }
            }
        },
        "weather": {
            "resources_servers": {
                "example_single_tool_call": {
                    **loop,
                    "port": ports["weather"],
                    "domain": "agent",
                    "verified": False,
                }
            }
        },
        "weather_agent": {
            "responses_api_agents": {
                "simple_agent": {
                    **loop,
                    "port": ports["agent"],
                    "resources_server": resources,
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                }
            }
        },
        TYPED: {"environment_servers": {"single_agent_turn": {**loop, "port": ports[TYPED], **session}}},
        RELAY: {
            "environment_servers": {"legacy_agent": {**loop, "port": ports[RELAY], "agent_server": agent}}
        },
        ADAPTER: {
            "environment_servers": {"single_agent_turn_legacy": {**loop, "port": ports[ADAPTER], **session}}
        },
    }
    return json.dumps(config, indent=2)


def start_stack(venv: Path, workdir: Path, attempts: int = 2, *, head_port: int | None = HEAD_PORT) -> Stack:
    """Start the fake model and ``gym env start`` on the stack config; wait until every server answers.

    A stack that ``gym env start`` ends before it is up is started once more, on fresh ports, in a
    fresh folder (NeMo Gym starts a Ray cluster and a dozen processes first, so a port or start-up
    race outside gymslurm can end it); the first attempt's reason is kept in ``first-attempt.txt``
    and printed. A second failure fails the tests with both reasons. ``head_port=None``: the head
    server on a free port too (a module whose commands name the head server explicitly)."""
    reasons: list[str] = []
    for attempt in range(1, attempts + 1):
        try:
            return _start_stack_once(venv, workdir / f"attempt-{attempt}", head_port)
        except StackExitedError as error:
            reasons.append(f"attempt {attempt}: {error}")
            if attempt == 1:
                (workdir / "first-attempt.txt").write_text(reasons[0])
            print(f"NeMo Gym stack attempt {attempt} of {attempts} ended early:\n{error}", file=sys.stderr)
    raise NemoGymSetupError("\n\n".join(reasons))


def _start_stack_once(venv: Path, workdir: Path, head_port: int | None = HEAD_PORT) -> Stack:
    if head_port is not None and not port_is_free(head_port):
        raise NemoGymSetupError(
            f"port {HEAD_PORT} (NeMo Gym's default head server port) is in use on 127.0.0.1: the compat "
            "suite starts NeMo Gym's head server there to test the default; stop what listens on it"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    ports = {
        "head": head_port or stack_ports(["head"])["head"],
        **stack_ports(
            ("fake", "model", "weather", "agent", TYPED, RELAY, ADAPTER, DEMO_POLICY, "demo_model")
        ),
    }
    (workdir / "stack.yaml").write_text(stack_config(ports))
    venvs = workdir / "venvs"
    for server in SERVER_DIRS:  # skip_venv_if_present: every server runs in the one NeMo Gym venv
        (venvs / server).mkdir(parents=True, exist_ok=True)
        link = venvs / server / ".venv"
        if not link.exists():
            link.symlink_to(venv)
    log = workdir / "gym-env-start.log"
    python = str(venv / "bin/python")
    fake = subprocess.Popen(
        [python, str(HERE / "fake_openai.py"), str(ports["fake"])],
        cwd=workdir,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "fake_openai.log").open("wb"),
    )
    demo_model = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gymslurm",
            "demo-model-server",
            "--host",
            "127.0.0.1",
            "--port",
            str(ports["demo_model"]),
        ],
        cwd=workdir,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "demo_model.log").open("wb"),
    )
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    gym = subprocess.Popen(
        [
            str(venv / "bin/gym"),
            "env",
            "start",
            "+config_paths=[stack.yaml]",
            f"+uv_venv_dir={venvs}",
            "+skip_venv_if_present=true",
        ],
        cwd=workdir,
        start_new_session=True,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    dataset = site_packages(venv) / "resources_servers/example_single_tool_call/data/example.jsonl"
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    stack = Stack(venv, workdir, urls, gym, fake, dataset, log, demo_model)
    try:
        servers = (TYPED, RELAY, ADAPTER, "agent", "weather", DEMO_POLICY)
        probes = [
            urls["head"] + "/global_config_dict_yaml",
            urls["fake"] + "/v1/models",
            urls["demo_model"] + "/health",
        ]
        _wait_up(stack, probes + [urls[name] + "/docs" for name in servers])
    except BaseException:
        stack.stop()
        raise
    return stack


# Shipped resources-server configs of the wheel, collected unchanged (tests/compat/test_nemo_gym_shipped.py):
# the name NeMo Gym gives each one's Environment Server → its config under resources_servers/.
SHIPPED = {
    "lc_equivalence_rule_environment_server": "equivalence_rule/configs/lc.yaml",
    "gpqa_diamond_environment_server": "gpqa_diamond/configs/gpqa_diamond.yaml",
    "freeform_formatting_environment_server": "format_verification/configs/freeform_formatting.yaml",
    "example_session_state_mgmt_environment_server": "example_session_state_mgmt/configs/example_session_state_mgmt.yaml",  # noqa: E501
    "example_tool_call_multireward_environment_server": "example_tool_call_multireward/configs/example_tool_call_multireward.yaml",  # noqa: E501
    "circle_count_environment_server": "circle_count/configs/circle_count.yaml",
    "citation_if_environment_server": "citation_if/configs/citation_if.yaml",
    "arc_agi_environment_server": "arc_agi/configs/arc_agi.yaml",
    "math_advanced_calculations_environment_server": "math_advanced_calculations/configs/math_advanced_calculations.yaml",  # noqa: E501
    "example_multi_step_environment_server": "example_multi_step/configs/example_multi_step.yaml",
    "blackjack_environment_server": "blackjack/configs/blackjack.yaml",  # identical rows: one task
}
SERVER_CATEGORIES = (
    "resources_servers",
    "responses_api_agents",
    "environment_servers",
    "responses_api_models",
)


def shipped_dataset(venv: Path, environment_server: str) -> Path:
    """The example rows the wheel ships beside a config of :data:`SHIPPED`."""
    server_dir = SHIPPED[environment_server].split("/")[0]
    return site_packages(venv) / "resources_servers" / server_dir / "data" / "example.jsonl"


def start_shipped_stack(venv: Path, workdir: Path) -> Stack:
    """``gym env start`` on every config of :data:`SHIPPED`, as the wheel ships them, plus one file
    naming ``policy_model`` (``openai_model`` in front of :mod:`fake_openai`) and the head server;
    every server's own port is NeMo Gym's choice, from its range (10001-20000) less 11000, so that
    this stack runs beside the one on 11000 (tests/conftest.py, group ``nemogym``). Waits for NeMo
    Gym's own "servers ready" line."""
    workdir.mkdir(parents=True, exist_ok=True)
    ports = stack_ports(("head", "fake"))
    model = {
        "head_server": {"host": "127.0.0.1", "port": ports["head"]},
        "policy_model": {
            "responses_api_models": {
                "openai_model": {
                    "entrypoint": "app.py",
                    "host": "127.0.0.1",
                    "openai_base_url": f"http://127.0.0.1:{ports['fake']}/v1",
                    "openai_api_key": "dummy",
                    "openai_model": "fake",
                    "openai_default_headers": {},
                }
            }
        },
    }
    (workdir / "model.yaml").write_text(json.dumps(model, indent=2))
    packages, venvs = site_packages(venv), workdir / "venvs"
    for category in SERVER_CATEGORIES:  # every server type runs in the one NeMo Gym venv
        for server in (packages / category).iterdir():
            if server.is_dir() and not server.name.startswith("_"):
                (venvs / category / server.name).mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    (venvs / category / server.name / ".venv").symlink_to(venv)
    configs = ",".join(["model.yaml", *(str(packages / "resources_servers" / c) for c in SHIPPED.values())])
    log = workdir / "gym-env-start.log"
    fake = subprocess.Popen(
        [str(venv / "bin/python"), str(HERE / "fake_openai.py"), str(ports["fake"])],
        cwd=workdir,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "fake_openai.log").open("wb"),
    )
    gym = subprocess.Popen(
        [
            str(venv / "bin/gym"),
            "env",
            "start",
            f"+config_paths=[{configs}]",
            f"+uv_venv_dir={venvs}",
            "+skip_venv_if_present=true",
            f"+port_range_low={HEAD_PORT + 1}",  # never 11000: it runs beside the 11000 stack
        ],
        cwd=workdir,
        start_new_session=True,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    stack = Stack(venv, workdir, urls, gym, fake, shipped_dataset(venv, next(iter(SHIPPED))), log)
    try:
        _wait_ready_while_progressing(gym, log)
    except BaseException:
        stack.stop()
        raise
    return stack


READY_COUNT = re.compile(r"^(\d+) / \d+ servers ready", re.MULTILINE)


def _wait_ready_while_progressing(gym: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for "servers ready!" while servers keep coming up: START_TIMEOUT_S without one more
    ready ends the wait, and so does SHIPPED_START_CAP_S in all. 34 servers on 2 loaded cores start
    slowly but steadily (CI: 11 of 34 after 480 s beside a vLLM install); a stuck one stops."""
    start = last_progress = time.monotonic()
    seen = (0, -1)
    while "servers ready!" not in (text := log.read_text(errors="replace")):
        counts = [int(n) for n in READY_COUNT.findall(text)]
        # Before its first count, Ray and the servers starting (the log growing) is progress.
        progress = (1, counts[-1]) if counts else (0, len(text))
        if progress > seen:
            seen, last_progress = progress, time.monotonic()
        now, ready = time.monotonic(), seen[1] if seen[0] else 0
        if (
            gym.poll() is not None
            or now - last_progress > START_TIMEOUT_S
            or now - start > SHIPPED_START_CAP_S
        ):
            raise NemoGymSetupError(
                f"gym env start {'exited' if gym.poll() is not None else 'was not ready in time'} "
                f"with the shipped configs ({ready} servers ready after {now - start:.0f} s):\n"
                f"{text[-4000:]}"
            )
        time.sleep(1)


def _wait_up(stack: Stack, probes: list[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = list(probes)
    while waiting:
        if stack.gym.poll() is not None:
            raise StackExitedError(
                f"gym env start exited ({stack.gym.returncode}) before the stack was up:\n"
                f"{dead_servers_lines(stack.log.read_text(errors='replace'))}"
                f"the end of its log ({stack.log}):\n{stack.log.read_text(errors='replace')[-4000:]}"
            )
        if time.monotonic() > deadline:
            raise NemoGymSetupError(
                f"the NeMo Gym stack was not up within {START_TIMEOUT_S:.0f} s "
                f"(still waiting for {waiting}):\n"
                f"{stack.log.read_text()[-4000:]}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(waiting[0], timeout=5, trust_env=False).status_code < 500:
                waiting.pop(0)
                continue
        time.sleep(1)


def dead_servers_lines(log: str) -> str:
    """What each server ``gym env start`` saw finish said (its lines carry its name in parentheses):
    the cause sits above the shutdown lines that fill the end of the log."""
    said = []
    for name in re.findall(r"Process `([^`]+)` finished unexpectedly", log):
        own = [line for line in log.splitlines() if line.startswith(f"({name})")]
        said.append(f"what {name} said ({len(own)} lines, the last 40):\n" + "\n".join(own[-40:]) + "\n")
    return "".join(said)


if __name__ == "__main__":  # manual use: python -m tests.compat.nemogym WORKDIR (Ctrl-C stops it)
    running = start_stack(ensure_nemo_gym(), Path(sys.argv[1]).resolve())
    print(json.dumps(running.urls, indent=2), flush=True)
    try:
        signal.pause()
    finally:
        print(f"stopped {len(running.stop())} processes", flush=True)
