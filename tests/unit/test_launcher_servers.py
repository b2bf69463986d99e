"""Environment Servers started by a job: health check, and stopping the whole process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gymslurm.job.servers import ServerStartError, first_error_line, reap, start, stop
from gymslurm.launcher.settings import ServerSettings

pytestmark = pytest.mark.e2e


def test_server_started_on_a_free_port_is_healthy_then_stopped_with_its_tree(tmp_path: Path) -> None:
    """A command server gets {port}, answers its health path, and stop() leaves no process of its tree."""
    script = "sleep 300 & exec " + sys.executable + " -m http.server --bind 127.0.0.1 {port}"
    settings = ServerSettings(
        name="web", command=["bash", "-c", script], health_path="/", startup_timeout_s=30
    )
    server = start(settings, tmp_path / "server.log")
    assert server.url.startswith("http://127.0.0.1:") and server.process is not None
    tree = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children(recursive=True)]
    assert len(tree) >= 2
    stop(server, grace_s=2)
    assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_server_that_exits_is_a_start_error(tmp_path: Path) -> None:
    """A server command that dies before becoming healthy raises, pointing at its log."""
    settings = ServerSettings(name="bad", command=["bash", "-c", "echo boom; exit 3"], startup_timeout_s=10)
    with pytest.raises(ServerStartError, match=r"server\.log"):
        start(settings, tmp_path / "server.log")


def test_server_given_by_url_is_adopted() -> None:
    """A server given by url is used as it is, with nothing started."""
    server = start(ServerSettings(name="up", url="http://10.0.0.1:80"), Path("/nonexistent.log"))
    assert (server.url, server.process) == ("http://10.0.0.1:80", None)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


LINK = """
import sys, time
from pathlib import Path
from gymslurm.job.servers import start
from gymslurm.launcher.settings import ServerSettings
script = "sleep 300 & exec " + sys.executable + " -m http.server --bind 127.0.0.1 {port}"
server = start(ServerSettings(name="web", command=["bash", "-c", script], health_path="/"), Path(sys.argv[1]))
print(server.process.pid, server.create_time, flush=True)
time.sleep(300)
"""


def test_a_killed_link_leaves_no_server_and_its_successor_reaps_the_rest(tmp_path: Path) -> None:
    """SIGKILL of the process that started a server: the kernel kills the server (PDEATHSIG); what
    it had started itself (a grandchild in its session) is reaped by pid + create time."""
    link = subprocess.Popen(
        [sys.executable, "-c", LINK, str(tmp_path / "server.log")], stdout=subprocess.PIPE, text=True
    )
    assert link.stdout is not None
    pid_text, create_text = link.stdout.readline().split()
    pid, create_time = int(pid_text), float(create_text)
    session = [p.pid for p in psutil.process_iter() if _sid(p.pid) == pid]
    assert pid in session and len(session) >= 2
    link.kill()
    link.wait()
    assert pid not in _wait_gone([pid]), "the server died with its link"
    left = [p for p in session if _alive(p)]
    assert left, "a grandchild outlives the link until reaped (proctrack/linuxproc does not see it)"
    assert reap(pid, create_time)
    assert not _wait_gone(left)


def test_reap_leaves_a_process_whose_create_time_differs(tmp_path: Path) -> None:
    """A recorded pid now used by another process (another create time) is never killed."""
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        real = psutil.Process(other.pid).create_time()
        assert not reap(other.pid, real - 100.0)
        assert _alive(other.pid)
        assert reap(other.pid, real)
        assert not _wait_gone([other.pid])
    finally:
        other.kill()
        other.wait()


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def test_a_server_never_healthy_names_its_probes_and_log_tail_without_secrets(tmp_path: Path) -> None:
    """Not healthy in time: the error (the ledger's reason) carries the probes and the end of the
    server's log, with the key it was given and credential-shaped text redacted."""
    script = 'echo "starting with key $OPENAI_API_KEY"; echo "Authorization: Bearer sk-live-123456"; sleep 60'
    settings = ServerSettings(
        name="stuck",
        command=["bash", "-c", script],
        startup_timeout_s=1.5,
        env={"OPENAI_API_KEY": "sk-secret-abcdef123"},
    )
    with pytest.raises(ServerStartError) as caught:
        start(settings, tmp_path / "server.log")
    message = str(caught.value)
    assert "not healthy after 1.5s" in message and "probes:" in message and "starting with key" in message
    assert "sk-secret-abcdef123" not in message and "sk-live-123456" not in message


def test_interpolate_fills_this_server_s_port_and_an_earlier_server_s_address() -> None:
    """{host}/{port} are this server's; {servers.NAME.url|host|port} an earlier one's."""
    from gymslurm.job.servers import RunningServer, interpolate

    policy = RunningServer(ServerSettings(name="policy", url="http://10.1.2.3:8000"), "http://10.1.2.3:8000")
    text = "--port {port} --model {servers.policy.url}/v1 --on {servers.policy.host}:{servers.policy.port}"
    assert interpolate(text, {"policy": policy}, "127.0.0.1", 4242) == (
        "--port 4242 --model http://10.1.2.3:8000/v1 --on 10.1.2.3:8000"
    )


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        (
            {"runtime": "pyxis", "image": "nvcr.io/nvidia/vllm:25.01", "mounts": ["/data:/data:ro"]},
            [
                "srun",
                "--overlap",
                "--ntasks=1",
                "--nodes=1",
                "--container-image=nvcr.io/nvidia/vllm:25.01",
                "--container-mounts=/data:/data:ro",
                "--",
                "vllm",
                "serve",
                "m",
            ],
        ),
        (
            {"runtime": "apptainer", "image": "/images/sglang.sif", "gpus": True, "mounts": ["/data"]},
            ["apptainer", "exec", "--nv", "--bind", "/data", "/images/sglang.sif", "vllm", "serve", "m"],
        ),
        (None, ["vllm", "serve", "m"]),
    ],
    ids=["pyxis", "apptainer", "no container"],
)
def test_a_container_wraps_the_server_command(
    container: dict[str, object] | None, expected: list[str]
) -> None:
    """servers[].container renders the Pyxis (srun --container-image) or Apptainer (apptainer exec) line."""
    from gymslurm.job.servers import container_argv

    settings = ServerSettings.model_validate(
        {"name": "policy", "command": ["vllm", "serve", "m"], "container": container}
    )
    assert container_argv(settings, ["vllm", "serve", "m"]) == expected


def test_a_server_that_exits_at_start_up_is_retried_once_then_stops_the_chain(tmp_path: Path) -> None:
    """A server that exited during start-up (`uv: command not found`) is retried (exit 1): the same
    failure in the next link, nothing changed, stops the chain (exit 2); the message leads with the
    log's first error line either way."""
    from gymslurm.job.servers import REPEATED, start_failure_exit

    script = "echo 'starting servers'; echo 'sh: 1: uv: command not found' >&2; echo 'Traceback'; exit 127"
    settings = ServerSettings(name="gym", command=["bash", "-c", script], startup_timeout_s=30)
    with pytest.raises(ServerStartError) as raised:
        start(settings, tmp_path / "server.log")
    assert "exited with 127 during start-up: sh: 1: uv: command not found" in str(raised.value)
    assert start_failure_exit(raised.value) == (1, "")
    previous = f"server start failed: {raised.value}; collector exit 1: retrying"
    assert start_failure_exit(raised.value, previous) == (2, f" ({REPEATED})")


RAY = "RuntimeError: The current node timed out during startup. This could happen because ..."


@pytest.mark.parametrize(
    ("signature", "previous", "deterministic", "expected"),
    [
        (f"server 'gym' exited with 1 during start-up: {RAY}", None, False, 1),  # the first: retried
        (f"server 'gym' exited with 1 during start-up: {RAY}", "job ended by Slurm (TIMEOUT)", False, 1),
        (f"server 'gym' exited with 1 during start-up: {RAY}", "server start failed: server 'gym' exited "
         "with 1 during start-up: uv: command not found; see x", False, 1),  # another failure: retried
        (f"server 'gym' exited with 1 during start-up: {RAY}", f"server start failed: server 'gym' exited "
         f"with 1 during start-up: {RAY}; see x", False, 2),  # the same twice, nothing changed: stop
        (None, "server start failed: server 'web' exited with 1 during start-up: Address already in use",
         False, 1),  # a transient cause has no signature: the chain's budget decides
        (None, None, True, 2),  # a stack the job cannot hold: known before anything starts
    ],
)  # fmt: skip
def test_start_up_failures_are_classified_by_evidence(
    signature: str | None, previous: str | None, deterministic: bool, expected: int
) -> None:
    """Retryable unless the link before failed the same way (or the job cannot hold the stack)."""
    from gymslurm.job.servers import start_failure_exit

    error = ServerStartError("x", deterministic=deterministic, signature=signature)
    assert start_failure_exit(error, previous)[0] == expected


def test_the_first_error_is_a_tracebacks_exception_not_a_warning_before_it(tmp_path: Path) -> None:
    """A Ray warning ("[... W pid tid] ...: Failed to determine local IP") is passed over, and a
    traceback is named by its exception line (what NeMo Gym's launcher printed on the Slurm sandbox)."""
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-12-01 23:19:04,581 W 11937 11937] network_util.cc:330: Failed to determine local IP\n"
        "2026-12-01 23:19:04,570\tWARNING authentication_token_setup.py:85 -- token failed\n"
        'Traceback (most recent call last):\n  File "_venv_setup.py", line 33, in setup_environment\n'
        "    with venv.open() as lock:\n"
        "PermissionError: [Errno 13] Permission denied: '/tmp/v.setup.lock'\n"
        "RuntimeError: Process `policy_model` finished unexpectedly!\n"
    )
    first, transient = first_error_line(log, ServerSettings(name="gym", command=["true"]))
    assert first == "PermissionError: [Errno 13] Permission denied: '/tmp/v.setup.lock'" and not transient


def test_a_server_that_lost_its_port_at_start_up_is_retried(tmp_path: Path) -> None:
    """An exit whose log shows a transient cause (the port taken meanwhile) keeps the retry (exit 1)."""
    from gymslurm.job.servers import start_failure_exit

    script = "echo 'OSError: [Errno 98] Address already in use'; exit 1"
    settings = ServerSettings(name="web", command=["bash", "-c", script], startup_timeout_s=30)
    with pytest.raises(ServerStartError) as raised:
        start(settings, tmp_path / "server.log")
    assert raised.value.signature is None and start_failure_exit(raised.value, str(raised.value)) == (1, "")


def test_a_url_resolved_in_the_job_with_a_password_never_reaches_a_command_line(tmp_path: Path) -> None:
    """A URL known only in the job (``${oc.env:…}``) that carries a password, named by a later server's
    command: that server is not started (its argv would show the password in ``ps``), and says why."""
    from gymslurm.job.servers import RunningServer

    policy = RunningServer(ServerSettings(name="policy", url="x"), "https://svc:hunter2pass@h.example:8000")
    env = ServerSettings(name="env", command=["sleep", "30", "{servers.policy.url}"])
    with pytest.raises(ServerStartError, match="carries a user or password") as refused:
        start(env, tmp_path / "env.log", started={"policy": policy})
    assert "hunter2pass" not in str(refused.value)
    assert not (tmp_path / "env.log").exists() or "hunter2pass" not in (tmp_path / "env.log").read_text()
