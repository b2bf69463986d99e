"""A credential on any command line gymslurm starts is warned about at submit, naming the setting
and the environment-variable form to use instead (issue 33)."""

from __future__ import annotations

from typing import Any

import pytest

from gymslurm.launcher.settings import validate
from gymslurm.launcher.visible_credentials import visible_credential_warnings

SECRET = "--api-key=sk-CANARY33visible"


def _server(**changes: Any) -> dict[str, Any]:
    return {"name": "policy", "command": ["serve", "{port}"], **changes}


@pytest.mark.parametrize(
    ("changes", "where", "env"),
    [
        ({"servers": [_server(command=["serve", SECRET])]}, "servers[0].command (policy)", "servers[].env"),
        (
            {"servers": [_server(router={"extra_args": [SECRET]})]},
            "servers[0].router.extra_args (policy)",
            "servers[].env",
        ),
        (
            {
                "servers": [
                    _server(container={"runtime": "apptainer", "image": "x.sif", "extra_args": [SECRET]})
                ]
            },
            "servers[0].container.extra_args (policy)",
            "servers[].env",
        ),
        ({"collector": {"command": ["collect", SECRET]}}, "collector.command", "collector.env"),
        ({"aggregation": {"command": ["agg", SECRET]}}, "aggregation.command", "the job's environment"),
        ({"dataset_command": ["fetch", SECRET]}, "dataset_command", "the environment you submit from"),
        ({"notify": [{"command": ["tell", SECRET]}]}, "notify[0].command", "notify[].env"),
    ],
)
def test_a_credential_on_a_command_line_is_warned_about(
    changes: dict[str, Any], where: str, env: str
) -> None:
    """Each command line gymslurm starts: one warning naming it and the env-variable form, no secret."""
    settings = validate({"name": "b", "dataset": "data.jsonl", **changes}, "bench")
    (warning,) = visible_credential_warnings(settings)
    assert warning.startswith(f"{where} carries a credential on its command line")
    assert f"in {env}" in warning and "${oc.env:API_KEY}" in warning
    assert "CANARY33" not in warning


def test_command_lines_without_a_credential_are_not_warned_about() -> None:
    """Plain command lines: no warning."""
    settings = validate(
        {
            "name": "b",
            "dataset": "data.jsonl",
            "servers": [_server()],
            "notify": [{"command": ["tell", "--quiet"]}],
        },
        "bench",
    )
    assert visible_credential_warnings(settings) == []


def test_a_credential_named_from_the_environment_is_not_warned_about() -> None:
    """``++policy_api_key=${oc.env:VAR}``: the program resolves it from its environment (NeMo Gym's
    spelling, which a translated `gym eval run` line uses); the value never is on the command line."""
    command = ["gym", "env", "start", "++policy_api_key=${oc.env:GYMSLURM_NEMO_GYM_POLICY_API_KEY}"]
    settings = validate(
        {"name": "b", "dataset": "data.jsonl", "servers": [_server(command=command)]}, "bench"
    )
    assert visible_credential_warnings(settings) == []
