"""gym eval run's command line under gymslurm collect: flags translated, settings without meaning refused."""

from __future__ import annotations

import pytest

from gymslurm.commands.collect import split_options
from gymslurm.errors import ConfigError
from gymslurm.settings import load_settings

BASE = [
    "+input_jsonl_fpath=/data/in.jsonl",
    "+output_jsonl_fpath=/runs/out.jsonl",
    "+environment_server_url=http://127.0.0.1:1",
]


def test_gym_eval_runs_flags_become_their_settings() -> None:
    """--no-serve is accepted (no effect); --input/-o/--limit/--concurrency/--resume set their settings."""
    _, _, overrides = split_options(
        [
            "--no-serve",
            "--input",
            "/d/in.jsonl",
            "-o=/r/out.jsonl",
            "--limit",
            "3",
            "--concurrency",
            "4",
            "--resume",
            "+environment_server_name=relay",
        ]
    )
    settings = load_settings(overrides)[0]
    assert (str(settings.input_jsonl_fpath), str(settings.output_jsonl_fpath)) == (
        "/d/in.jsonl",
        "/r/out.jsonl",
    )
    assert (settings.limit, settings.concurrency, settings.resume_from_cache) == (3, 4, True)


def test_a_flag_without_meaning_here_is_refused_by_name() -> None:
    """--temperature (a sampling override) is refused naming the flag and why."""
    with pytest.raises(ConfigError, match=r"--temperature is not supported.*dataset rows"):
        split_options(["--temperature", "0.5"])


@pytest.mark.parametrize(
    "setting",
    [
        "+fan_out={a: [b]}",
        "+responses_create_params.temperature=0.1",
        "+wandb_project=p",
        "+drain_margin_s=30",
    ],
)
def test_a_nemo_gym_setting_without_meaning_here_is_refused_by_name(setting: str) -> None:
    """A NeMo Gym collection setting gymslurm does not implement is refused with its name and the reason."""
    name = setting.split("=", maxsplit=1)[0].split(".", maxsplit=1)[0]
    with pytest.raises(ConfigError, match=rf"(?s)NeMo Gym setting.*\{name}:"):
        load_settings([*BASE, setting])


def test_disable_aggregation_and_health_check_are_accepted() -> None:
    """NeMo Gym's +disable_aggregation / +disable_health_check (and --no-health-check) have a meaning here."""
    _, _, overrides = split_options([*BASE, "--no-health-check", "+disable_aggregation=true"])
    settings = load_settings(overrides)[0]
    assert settings.disable_health_check and settings.disable_aggregation
