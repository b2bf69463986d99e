"""Benchmark configs: Hydra composition, validation, Slurm times, and keeping secrets out of saved files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gymslurm.commands.new_run import render_scripts
from gymslurm.errors import ConfigError
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import (
    REDACTED,
    ServerSettings,
    SlurmSettings,
    early_signal_warning,
    load_benchmark,
    merge_secrets,
    split_secrets,
)
from gymslurm.site.slurm import slurm_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("1:30", 90),
        ("01:00:00", 3600),
        ("2-00", 172800),
        ("1-01:02", 90120),
        ("1-00:00:05", 86405),
    ],
)
def test_slurm_seconds(text: str, seconds: int) -> None:
    """Every Slurm time format converts to seconds."""
    assert slurm_seconds(text) == seconds


def test_bad_slurm_time_is_refused() -> None:
    """A time Slurm would not accept is an error naming the formats."""
    with pytest.raises(ValueError, match="HH:MM:SS"):
        slurm_seconds("1h")


def test_demo_benchmark_composes_with_overrides() -> None:
    """The shipped demo benchmark loads, and Hydra overrides change it."""
    settings, _ = load_benchmark("demo", ["shards=3", "slurm.partition=low"])
    assert (settings.name, settings.shards, settings.slurm.partition) == ("demo", 3, "low")
    assert settings.servers[0].command is not None


def test_unknown_key_is_refused(tmp_path: Path) -> None:
    """A misspelt key is an error naming it, never silently ignored."""
    path = tmp_path / "b.yaml"
    path.write_text("dataset: d.jsonl\nslurm:\n  partiton: low\n")
    with pytest.raises(ConfigError, match=r"slurm\.partiton"):
        load_benchmark(str(path), [])


def test_unknown_benchmark_lists_known_ones() -> None:
    """An unknown benchmark name says which benchmarks exist."""
    with pytest.raises(ConfigError, match="demo"):
        load_benchmark("no-such-benchmark", [])


def test_server_needs_exactly_one_of_url_and_command() -> None:
    """A server with both url and command (or neither) is refused."""
    with pytest.raises(ValueError, match="exactly one"):
        ServerSettings(url="http://x", command=["srv"])
    with pytest.raises(ValueError, match="exactly one"):
        ServerSettings()


def test_secrets_are_split_out_and_merged_back() -> None:
    """Credential-named values and KEY=VALUE overrides leave the saved config and come back in the job."""
    data = {
        "servers": [{"env": {"OPENAI_API_KEY": "canary-1", "LOG": "x"}}],
        "collector": {
            "overrides": ["+api_key=canary-2", "+limit=3"],
            "env": {"HF_TOKEN": "${oc.env:HF_TOKEN}"},
        },
    }
    clean, secrets = split_secrets(data)
    assert "canary" not in repr(clean)
    assert clean["servers"][0]["env"]["OPENAI_API_KEY"] == REDACTED
    assert clean["collector"]["env"]["HF_TOKEN"] == REDACTED  # a credential-named interpolation too
    assert merge_secrets(clean, secrets) == data


def test_missing_secret_in_job_is_a_clear_error() -> None:
    """A job whose environment lacks a secret says which one and what to do."""
    clean, _ = split_secrets({"token": "canary"})
    with pytest.raises(ConfigError, match="token"):
        merge_secrets(clean, {})


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("OPENAI_API_KEY", True),
        ("+db_password", True),
        ("HF_TOKEN", True),
        ("max_tokens", False),
        ("eos_token", False),
        ("sort_key", False),
    ],
)
def test_secret_keys_follow_identitys_credential_rule(key: str, secret: bool) -> None:
    """A key is a secret exactly when identity.is_credential_name says it names a credential."""
    _, secrets = split_secrets({key: "v", "overrides": [f"{key}=v"]})
    assert bool(secrets) is secret


@pytest.mark.parametrize(
    ("time", "lead", "warns"),
    [
        ("01:00:00", 90, False),
        ("3", 90, False),
        ("2", 30, False),
        ("1", 60, True),
        ("1", 20, True),
        ("2", 31, True),
    ],
)
def test_early_signal_warning_when_usr1_may_come_before_a_minute_of_work(
    time: str, lead: int, warns: bool
) -> None:
    """A job whose USR1 may come < 60 s in (Slurm signals up to a 30 s tick early) is warned about."""
    warning = early_signal_warning(SlurmSettings(time=time, signal_lead_s=lead))
    assert (warning is not None) == warns
    if warning:
        assert f"slurm.time={time}" in warning and "signal_lead_s" in warning


def test_a_server_may_name_only_an_earlier_server_s_address() -> None:
    """``{servers.NAME.url}`` must name a server listed before (servers start in order)."""
    from gymslurm.errors import ConfigError
    from gymslurm.launcher.settings import validate

    def bench(servers: list[dict[str, object]]) -> dict[str, object]:
        return {"name": "b", "dataset": "d.jsonl", "servers": servers}

    policy = {"name": "policy", "command": ["m", "{port}"], "collector_override": None}
    env = {"name": "env", "command": ["e", "--policy-url", "{servers.policy.url}"]}
    assert [s.name for s in validate(bench([policy, env]), "b").servers] == ["policy", "env"]
    with pytest.raises(
        ConfigError, match=r"refers to \{servers.policy...\}, which is not a server listed before"
    ):
        validate(bench([env, policy]), "b")
    with pytest.raises(ConfigError, match="two servers are named"):
        validate(bench([policy, policy]), "b")


def test_demo_commands_run_with_the_interpreter_that_runs_gymslurm() -> None:
    """slurm.python unset: the demo dataset, server, collector and aggregation commands run sys.executable."""
    settings, _ = load_benchmark("demo", [])
    commands = [
        settings.dataset_command,
        settings.servers[0].command,
        settings.collector.command,
        settings.aggregation.command,
    ]
    assert [command[0] if command else None for command in commands] == [sys.executable] * 4
    assert settings.slurm.interpreter == sys.executable


def test_slurm_python_overrides_the_interpreter_of_every_command() -> None:
    """slurm.python=/opt/py/bin/python: every ``{python}`` item, defaults included, becomes that path."""
    settings, _ = load_benchmark("demo", ["slurm.python=/opt/py/bin/python", "~collector.command"])
    assert settings.collector.command == ["/opt/py/bin/python", "-m", "gymslurm", "collect"]
    assert settings.servers[0].command is not None and settings.servers[0].command[0] == "/opt/py/bin/python"
    assert settings.slurm.interpreter == "/opt/py/bin/python"


def test_a_command_naming_its_own_program_is_kept() -> None:
    """A command that names a program (not ``{python}``) runs exactly as written."""
    settings, _ = load_benchmark("demo", ["collector.command=[python,-m,gymslurm,collect]"])
    assert settings.collector.command == ["python", "-m", "gymslurm", "collect"]


def test_chain_step_lines_use_the_interpreter(tmp_path: Path) -> None:
    """Every rendered script runs ``chain-step`` with slurm.interpreter (sys.executable by default)."""
    settings, _ = load_benchmark("demo", [])
    scripts = render_scripts(RunDir(tmp_path / "run"), settings, tmp_path)
    assert len(scripts) == 3
    assert all(f"{sys.executable} -m gymslurm chain-step" in text for text in scripts.values())


def test_the_nemo_gym_benchmark_config_validates() -> None:
    """configs/benchmarks/nemo_gym_weather.yaml validates: the stack script on a per-job port (no fixed
    ports), the head server given to the collector, the relay named as NeMo Gym names it."""
    settings, _ = load_benchmark("nemo_gym_weather", [])
    (server,) = settings.servers
    assert server.command == ["sh", "configs/nemo_gym/start_stack.sh", "{port}"]
    assert (server.port, server.collector_override, server.health_path) == (0, "+head_server_url", "/readyz")
    assert "+environment_server_name=weather_legacy_env" in settings.collector.overrides
    assert "${" not in " ".join([settings.dataset, *server.command])  # benchmarks are not interpolated


def test_a_servers_command_may_not_carry_an_earlier_servers_url_with_a_password() -> None:
    """``{servers.NAME.url}`` of a URL with a user or password on a command line (every user's ``ps``)
    is refused before anything is written, naming env as the way; in env it is accepted."""
    from gymslurm.errors import ConfigError
    from gymslurm.launcher.settings import validate

    url = "https://svc:hunter2pass@models.example/v1"
    policy = {"name": "policy", "url": url, "collector_override": None}
    on_argv = {"name": "env", "command": ["e", "--policy-url", "{servers.policy.url}"]}
    in_env = {"name": "env", "command": ["e"], "env": {"POLICY_URL": "{servers.policy.url}"}}
    with pytest.raises(ConfigError, match=r"carries a user or password.*env") as refused:
        validate({"name": "b", "dataset": "d.jsonl", "servers": [policy, on_argv]}, "b")
    assert "hunter2pass" not in str(refused.value)
    settings = validate({"name": "b", "dataset": "d.jsonl", "servers": [policy, in_env]}, "b")
    assert [s.name for s in settings.servers] == ["policy", "env"]
