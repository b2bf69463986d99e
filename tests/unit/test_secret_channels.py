"""How secrets travel to the processes of a job: environment, never argv; each process its own.

Issue 10, section 2: a collector override that carries a credential goes in the collector's
environment (``GYMSLURM_COLLECT_OVERRIDES``), not on its command line; neither the collector nor a
server receives the benchmark's whole secrets bundle (``GYMSLURM_SECRETS``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gymslurm.errors import ConfigError
from gymslurm.launcher.job import servers as server_mod
from gymslurm.launcher.job.collector_process import child_environment, run_collector, split_secret_arguments
from gymslurm.launcher.job.heartbeat import Signals
from gymslurm.launcher.rundir import SECRETS_ENV
from gymslurm.launcher.settings import ServerSettings
from gymslurm.settings import SECRET_OVERRIDES_ENV, secret_overrides

COMMAND = ["python", "-m", "gymslurm", "collect"]


@pytest.mark.parametrize(
    ("override", "secret"),
    [("+policy_api_key=sk-1", True), ("+environment_server_url=http://u:pw@h:1", True),
     ("+environment_config={judge: {api_key: v}}", True), ("+x=Bearer abc", True),
     ("+environment_server_url=http://h:1", False), ("+limit=3", False), ("+max_tokens=5", False),
     ("+output_jsonl_fpath=/r/o.jsonl", False)],
)  # fmt: skip
def test_an_override_carrying_a_credential_leaves_the_command_line(override: str, secret: bool) -> None:
    """Exactly the overrides the one redaction rule changes go to the environment; the command stays."""
    public, hidden = split_secret_arguments([*COMMAND, override], first_override=len(COMMAND))
    assert public[: len(COMMAND)] == COMMAND
    assert (hidden == [override]) is secret and (override in public) is not secret


def test_children_never_get_the_secrets_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child's environment is the job's without GYMSLURM_SECRETS (nor a stale override list), + its own."""
    monkeypatch.setenv(SECRETS_ENV, '{"servers[0].env.X_TOKEN": "v"}')
    monkeypatch.setenv(SECRET_OVERRIDES_ENV, '["+a_token=old"]')
    monkeypatch.setenv("HOME_LIKE", "kept")
    env = child_environment({"OWN_API_KEY": "mine"})
    assert SECRETS_ENV not in env and SECRET_OVERRIDES_ENV not in env
    assert env["HOME_LIKE"] == "kept" and env["OWN_API_KEY"] == "mine"


def test_the_collector_gets_credential_overrides_in_its_environment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real child: the credential override is absent from its argv and present in its environment."""
    monkeypatch.setenv(SECRETS_ENV, '{"x": "bundle"}')
    dump = tmp_path / "seen.json"
    program = (
        "import json, os, sys; json.dump({'argv': sys.argv, 'env': dict(os.environ)}, open(sys.argv[1], 'w'))"
    )
    command = [sys.executable, "-c", program, str(dump)]
    argv = [*command, "+limit=2", "+policy_api_key=CANARY-ARGV-1"]
    code, _ = run_collector(argv, Signals(), {"OWN": "1"}, None, first_override=len(command))
    assert code == 0
    seen = json.loads(dump.read_text())
    assert "CANARY-ARGV-1" not in " ".join(seen["argv"]) and "+limit=2" in seen["argv"]
    assert json.loads(seen["env"][SECRET_OVERRIDES_ENV]) == ["+policy_api_key=CANARY-ARGV-1"]
    assert SECRETS_ENV not in seen["env"] and seen["env"]["OWN"] == "1"


def test_a_server_gets_its_own_env_and_not_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A started server sees its ``env`` and the job's environment, never GYMSLURM_SECRETS."""
    monkeypatch.setenv(SECRETS_ENV, '{"collector.env.OTHER_API_KEY": "not-yours"}')
    dump = tmp_path / "server-env.json"
    program = (
        "import json, os, socket, sys, time; json.dump(dict(os.environ), open(sys.argv[1], 'w')); "
        "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[2]))); s.listen(); time.sleep(30)"
    )
    settings = ServerSettings(
        name="dump", command=[sys.executable, "-c", program, str(dump), "{port}"], env={"SRV_TOKEN": "own"},
        startup_timeout_s=20,
    )  # fmt: skip
    server = server_mod.start(settings, tmp_path / "server.log")
    try:
        seen = json.loads(dump.read_text())
    finally:
        server_mod.stop(server)
    assert SECRETS_ENV not in seen and seen["SRV_TOKEN"] == "own"


def test_overrides_from_the_environment_are_a_json_list() -> None:
    """GYMSLURM_COLLECT_OVERRIDES is read as a JSON list of strings; anything else is a clear error."""
    assert secret_overrides({SECRET_OVERRIDES_ENV: '["+a=1", "+b_token=x"]'}) == ["+a=1", "+b_token=x"]
    assert secret_overrides({}) == []
    with pytest.raises(ConfigError, match=SECRET_OVERRIDES_ENV) as refused:
        secret_overrides({SECRET_OVERRIDES_ENV: "+policy_api_key=CANARY-BAD"})
    assert "CANARY-BAD" not in str(refused.value)
