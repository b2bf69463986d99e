"""How configuration and secrets travel to the processes of a job: environment, never argv.

Issue 10, section 2 and issue 20, sections 1 and 3: every collector override goes in the
collector's environment (``GYMSLURM_COLLECT_OVERRIDES``), never on its command line, whatever it
looks like; neither the collector nor a server receives the benchmark's whole secrets bundle
(``GYMSLURM_SECRETS``); ``${oc.env:NAME}`` in an ``env`` mapping is resolved inside the job, and a
credential-named variable named so reaches only the process that names it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gymslurm.commands.overrides import secret_overrides
from gymslurm.errors import ConfigError
from gymslurm.job import servers as server_mod
from gymslurm.job.collector_process import child_environment, run_collector, split_command
from gymslurm.job.heartbeat import Signals
from gymslurm.launcher.environment import withheld_variables
from gymslurm.launcher.rundir import SECRETS_ENV
from gymslurm.launcher.settings import ServerSettings
from gymslurm.process_env import SECRET_OVERRIDES_ENV
from tests.support import wait_until

COMMAND = ["python", "-m", "gymslurm", "collect"]


@pytest.mark.parametrize(
    "override",
    [
        "+policy_api_key=sk-1",
        "+environment_server_url=http://u:pw@h:1",
        "+environment_config={judge: {api_key: v}}",
        "+x=Bearer abc",
        "+environment_config.policy.base_url=http://h/v1?api_key=CANARY-NESTED",
        "+environment_server_url=http://h:1",
        "+limit=3",
        "+max_tokens=5",
        "+output_jsonl_fpath=/r/o.jsonl",
    ],
)
def test_every_override_leaves_the_command_line(override: str) -> None:
    """Whatever an override looks like, it goes to the environment; the command line is the command."""
    public, hidden = split_command([*COMMAND, override], first_override=len(COMMAND))
    assert public == COMMAND and hidden == [override]


def test_children_never_get_the_secrets_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child's environment is the job's without GYMSLURM_SECRETS (nor a stale override list), + its own."""
    monkeypatch.setenv(SECRETS_ENV, '{"servers[0].env.X_TOKEN": "v"}')
    monkeypatch.setenv(SECRET_OVERRIDES_ENV, '["+a_token=old"]')
    monkeypatch.setenv("HOME_LIKE", "kept")
    env = child_environment({"OWN_API_KEY": "mine"})
    assert SECRETS_ENV not in env and SECRET_OVERRIDES_ENV not in env
    assert env["HOME_LIKE"] == "kept" and env["OWN_API_KEY"] == "mine"


def _dump_program(dump: Path) -> list[str]:
    program = (
        "import json, os, sys; json.dump({'argv': sys.argv, 'env': dict(os.environ)}, open(sys.argv[1], 'w'))"
    )
    return [sys.executable, "-c", program, str(dump)]


def test_the_collector_gets_its_overrides_in_its_environment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real child: its argv is the command alone; every override is in its environment."""
    monkeypatch.setenv(SECRETS_ENV, '{"x": "bundle"}')
    dump = tmp_path / "seen.json"
    command = _dump_program(dump)
    nested = "+environment_config.policy.base_url=http://h/v1?api_key=CANARY-ARGV-2"
    argv = [*command, "+limit=2", "+policy_api_key=CANARY-ARGV-1", nested]
    code, _ = run_collector(argv, Signals(), {"OWN": "1"}, None, first_override=len(command))
    assert code == 0
    seen = json.loads(dump.read_text())
    assert seen["argv"][1:] == command[3:]  # python -c drops the program text from sys.argv
    assert json.loads(seen["env"][SECRET_OVERRIDES_ENV]) == [
        "+limit=2",
        "+policy_api_key=CANARY-ARGV-1",
        nested,
    ]
    assert SECRETS_ENV not in seen["env"] and seen["env"]["OWN"] == "1"


def test_an_env_mapping_takes_a_variable_from_the_job_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``collector.env: {X_API_KEY: ${oc.env:MY_KEY}}``: the collector gets MY_KEY's value, not the text."""
    monkeypatch.setenv("MY_KEY", "from-the-job")
    dump = tmp_path / "seen.json"
    command = _dump_program(dump)
    env = {"X_API_KEY": "${oc.env:MY_KEY}", "MODE": "${oc.env:UNSET_MODE,fast}"}
    code, _ = run_collector(command, Signals(), env, None, first_override=len(command))
    assert code == 0
    seen = json.loads(dump.read_text())["env"]
    assert seen["X_API_KEY"] == "from-the-job" and seen["MODE"] == "fast"


def test_a_variable_named_by_one_process_is_withheld_from_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A credential-named variable a server's env names is not inherited by the collector."""
    monkeypatch.setenv("JUDGE_API_KEY", "only-the-judge")
    withheld = withheld_variables([{}, {"OPENAI_API_KEY": "${oc.env:JUDGE_API_KEY}"}])
    assert withheld == {"JUDGE_API_KEY"}
    dump = tmp_path / "seen.json"
    command = _dump_program(dump)
    code, _ = run_collector(command, Signals(), {}, None, first_override=len(command), withheld=withheld)
    assert code == 0
    assert "JUDGE_API_KEY" not in json.loads(dump.read_text())["env"]


def test_a_missing_variable_is_a_clear_error() -> None:
    """``${oc.env:NAME}`` of a variable the job lacks is refused, naming the variable and what to do."""
    with pytest.raises(ConfigError, match=r"X_API_KEY.*oc.env:NOT_SET_ANYWHERE.*export"):
        child_environment({"X_API_KEY": "${oc.env:NOT_SET_ANYWHERE}"})


def test_a_server_gets_its_own_env_and_not_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A started server sees its ``env`` (``${oc.env:...}`` resolved) and the job's environment, never
    GYMSLURM_SECRETS nor a variable withheld for another process."""
    monkeypatch.setenv(SECRETS_ENV, '{"collector.env.OTHER_API_KEY": "not-yours"}')
    dump = tmp_path / "server-env.json"
    program = (
        "import json, os, socket, sys, time; json.dump(dict(os.environ), open(sys.argv[1], 'w')); "
        "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[2]))); s.listen(); time.sleep(30)"
    )
    settings = ServerSettings(
        name="dump",
        command=[sys.executable, "-c", program, str(dump), "{port}"],
        env={"SRV_TOKEN": "own", "OPENAI_API_KEY": "${oc.env:JUDGE_API_KEY}"},
        startup_timeout_s=20,
    )
    monkeypatch.setenv("JUDGE_API_KEY", "for-this-server")
    monkeypatch.setenv("OTHER_API_KEY", "for-another")
    withheld = frozenset({"JUDGE_API_KEY", "OTHER_API_KEY"})
    server = server_mod.start(settings, tmp_path / "server.log", withheld=withheld)
    try:
        seen = json.loads(dump.read_text())
    finally:
        server_mod.stop(server)
    assert SECRETS_ENV not in seen and seen["SRV_TOKEN"] == "own"
    assert (
        seen["OPENAI_API_KEY"] == seen["JUDGE_API_KEY"] == "for-this-server" and "OTHER_API_KEY" not in seen
    )


def test_overrides_from_the_environment_are_a_json_list() -> None:
    """GYMSLURM_COLLECT_OVERRIDES is read as a JSON list of strings; anything else is a clear error."""
    assert secret_overrides({SECRET_OVERRIDES_ENV: '["+a=1", "+b_token=x"]'}) == ["+a=1", "+b_token=x"]
    assert secret_overrides({}) == []
    with pytest.raises(ConfigError, match=SECRET_OVERRIDES_ENV) as refused:
        secret_overrides({SECRET_OVERRIDES_ENV: "+policy_api_key=CANARY-BAD"})
    assert "CANARY-BAD" not in str(refused.value)


def test_a_variable_named_under_a_credential_key_is_withheld_whatever_its_name() -> None:
    """``VLLM_API_KEY: ${oc.env:POLICY}``: POLICY holds a key, so no other process inherits it."""
    withheld = withheld_variables([{"MODE": "${oc.env:FAST}"}, {"VLLM_API_KEY": "${oc.env:POLICY}"}])
    assert withheld == {"POLICY"}


def test_the_link_learns_a_server_env_value_read_from_a_plainly_named_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server printing the key it got as ``VLLM_API_KEY: ${oc.env:POLICY}`` leaves no trace of it in
    its log: the link learned the resolved value (scrubbed by value, no shape needed)."""
    key = "POLICY-VALUE-CANARY-5b1e"
    monkeypatch.setenv("POLICY", key)
    program = (
        "import os, socket, sys, time; print('serving with', os.environ['VLLM_API_KEY'], flush=True); "
        "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(30)"
    )
    settings = ServerSettings(
        name="echo",
        command=[sys.executable, "-c", program, "{port}"],
        env={"VLLM_API_KEY": "${oc.env:POLICY}"},
        startup_timeout_s=20,
    )
    log = tmp_path / "server.log"
    server = server_mod.start(settings, log, withheld=frozenset({"POLICY"}))
    try:
        wait_until(
            lambda: "serving with" in log.read_text(), 20, f"the server's first line in {log}", every_s=0.05
        )
    finally:
        server_mod.stop(server)
    text = log.read_text()
    assert "serving with <redacted>" in text and key not in text
