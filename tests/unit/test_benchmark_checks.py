"""submit refuses what a job would fail on (issue 33): env names with ``=`` (or empty) and collector
overrides outside Hydra's grammar, naming the setting; NUL anywhere was refused already."""

from __future__ import annotations

from typing import Any

import pytest

from gymslurm.errors import ConfigError
from gymslurm.launcher.settings import validate


def bench(**changes: Any) -> dict[str, Any]:
    return {"name": "b", "dataset": "d.jsonl", **changes}


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"collector": {"env": {"A=B": "x"}}}, "collector.env: 'A=B' cannot name an environment variable"),
        ({"collector": {"env": {"": "x"}}}, "collector.env: '' cannot name"),
        (
            {"servers": [{"name": "s", "command": ["x", "{port}"], "env": {"K=V": "1"}}]},
            "servers[0].env: 'K=V' cannot name",
        ),
        ({"notify": [{"command": ["tell"], "env": {"T=1": "x"}}]}, "notify[0].env: 'T=1' cannot name"),
        ({"collector": {"env": {"A\0B": "x"}}}, "NUL"),
    ],
)
def test_an_env_name_no_process_can_take_is_refused(changes: dict[str, Any], said: str) -> None:
    """An env key with ``=``, empty, or with a NUL: a config error naming the setting."""
    with pytest.raises(ConfigError, match=said.replace("[", r"\[").replace("]", r"\]")):
        validate(bench(**changes), "b")


@pytest.mark.parametrize("override", ["+limit=[1,2", "+a=b=c)", "+x={a: 1", "+x=${oc.env:"])
def test_a_collector_override_outside_hydras_grammar_is_refused(override: str) -> None:
    """collector.overrides are parsed with Hydra's own parser at submit: a grammar error names it."""
    with pytest.raises(ConfigError, match=r"collector.overrides\[1\] .* is not a Hydra override"):
        validate(bench(collector={"overrides": ["+limit=2", override]}), "b")


def test_good_overrides_and_env_names_pass() -> None:
    """Hydra's spellings and ordinary names are accepted."""
    validate(
        bench(
            collector={"overrides": ["+limit=2", "++x.y=[1,2]", "~z", "+q='a b'"], "env": {"API_KEY": "x"}}
        ),
        "b",
    )
