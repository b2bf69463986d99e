"""A plural credential name (``API_KEYS``, ``HF_TOKENS``, ``SECRETS``, ``passwords``) is a credential name
for every reader of the one rule (issue 33): redaction, a notify command's environment, the
command-line warning. Token counts and lists (``max_new_tokens``, a bare ``tokens``) stay plain values.
"""

from __future__ import annotations

import pytest

from gymslurm.launcher.notify import command_environment
from gymslurm.launcher.settings import validate
from gymslurm.launcher.visible_credentials import visible_credential_warnings
from gymslurm.redaction import REDACTED, redact_text, redact_value

CANARY = "CANARY33plural-value"


@pytest.mark.parametrize(
    "name", ["API_KEYS", "auth_tokens", "SECRETS", "passwords", "hf_tokens", "accessKeys"]
)
def test_a_value_under_a_plural_credential_name_is_redacted_whole(name: str) -> None:
    """A list under a plural name is hidden whole, in data and in ``NAME=V`` text; a token count is not."""
    config = {name: [CANARY, CANARY + "2"], "max_new_tokens": 512, "prompt_tokens": 7, "tokens": 12}
    assert redact_value(config) == {name: REDACTED, "max_new_tokens": 512, "prompt_tokens": 7, "tokens": 12}
    assert CANARY not in redact_text(f"{name}={CANARY}")


def test_a_notify_command_does_not_inherit_plural_credential_variables() -> None:
    """``API_KEYS``, ``HF_TOKENS``, ``DB_PASSWORDS`` are withheld from a notify command like ``API_KEY``."""
    environ = {
        "PATH": "/bin",
        "API_KEYS": CANARY,
        "HF_TOKENS": CANARY,
        "DB_PASSWORDS": CANARY,
        "MAX_TOKENS": "9",
    }
    child = command_environment(environ, {})
    assert child == {"PATH": "/bin", "MAX_TOKENS": "9"}


def test_a_plural_credential_flag_on_a_command_line_is_warned_about() -> None:
    """``--api-keys V`` on a notify command line: a warning naming the setting, not the value."""
    settings = validate(
        {"name": "b", "dataset": "d.jsonl", "notify": [{"command": ["tell", "--api-keys", CANARY]}]}, "b"
    )
    (warning,) = visible_credential_warnings(settings)
    assert warning.startswith("notify[0].command carries a credential") and CANARY not in warning
