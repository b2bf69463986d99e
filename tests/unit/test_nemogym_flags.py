"""NeMo Gym's ``gym eval run`` command lines under gymslurm collect: ``null`` where NeMo Gym documents it."""

from __future__ import annotations

import pytest

from gymslurm.errors import ConfigError
from gymslurm.nemogym_flags import translate_flags
from gymslurm.settings import load_settings, setting_names

BASE = [
    "+input_jsonl_fpath=d.jsonl",
    "+output_jsonl_fpath=o.jsonl",
    "+environment_server_url=http://127.0.0.1:1",
]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (["+num_repeats=null"], []),
        (["+num_samples_in_parallel=null"], []),
        (["--concurrency", "null"], []),
        (["--concurrency=null"], []),
        (["--num-repeats", "null"], []),
        (["+num_repeats=4"], ["+num_repeats=4"]),
        (["--concurrency", "8"], ["+num_samples_in_parallel=8"]),
        (["+limit=null"], ["+limit=null"]),  # not a setting whose null is the default: left to validation
    ],
)
def test_nemo_gyms_null_is_the_default(given: list[str], expected: list[str]) -> None:
    """+num_repeats=null, +num_samples_in_parallel=null, --concurrency null: NeMo Gym's default, dropped."""
    assert translate_flags(given, setting_names()) == expected


def test_a_null_override_gives_the_settings_of_no_override() -> None:
    """The run is the one the command without the null override makes (identity included)."""
    nulls = translate_flags([*BASE, "+num_repeats=null", "--concurrency", "null"], setting_names())
    assert load_settings(nulls) == load_settings(BASE)


def _refusal(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as refused:
        translate_flags(argv, setting_names())
    return str(refused.value)


def test_server_flags_under_no_serve_are_refused_as_the_collectors_own_config() -> None:
    """With --no-serve they compose only NeMo Gym's collector's copy of the config: dropped here."""
    message = _refusal(["--no-serve", "--benchmark", "gpqa", "--input", "d.jsonl", "--output", "o.jsonl"])
    assert message.startswith("gym eval run's server flags (--benchmark) under --no-serve")
    assert "Drop them" in message


def test_a_flag_nemo_gyms_docs_misspell_is_refused_with_its_spelling() -> None:
    """`-c PATH` (finance_agent_v2's README) is no flag of gym eval run: refused, naming --config."""
    message = _refusal(["-c", "m.yaml", "--input", "d.jsonl"])
    assert message.startswith("gym eval run has no -c") and message.endswith("write --config PATH")


@pytest.mark.parametrize(
    "setting", ["+skills.path=skills/a/", "+wandb_project=p", "+rollout_collection_driver=m:f"]
)
def test_a_refused_setting_says_what_to_use_instead(setting: str) -> None:
    """A NeMo Gym feature gymslurm does not have is refused by name with what to do instead."""
    with pytest.raises(ConfigError) as refused:
        load_settings(translate_flags([*BASE, setting], setting_names()))
    message = str(refused.value)
    key = setting.lstrip("+").split("=")[0].split(".")[0]
    assert f"+{key}:" in message
    assert "NeMo Gym's own `gym eval run`" in message or "log the run's metrics files" in message
