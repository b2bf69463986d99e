"""NeMo Gym's reason for a failed preparation reaches the user with every secret redacted."""

from __future__ import annotations

import pytest

from gymslurm.commands.nemo_gym_serve import CONFIG_DUMP, preparation_refusal
from gymslurm.redaction import REDACTED, remember


@pytest.mark.parametrize(
    ("said", "secret"),
    [
        ("ConnectionError: cannot reach https://user:hunter2-pass@hf.example.org/datasets/x", "hunter2-pass"),
        ("ValueError: bad override ++policy_api_key=sk-live-0123456789abcdef", "sk-live-0123456789abcdef"),
        (
            "HTTPError: 401 with headers {'Authorization': 'Bearer tok-abcdef0123456789'}",
            "tok-abcdef0123456789",
        ),
        (
            "openai.AuthenticationError: Incorrect API key provided: learned-key-0123456789",
            "learned-key-0123456789",
        ),
    ],
)
def test_a_secret_in_nemo_gyms_stderr_never_reaches_the_refusal(said: str, secret: str) -> None:
    """A URL's password, a key in an override or a header (by shape), a key the line gave (by value,
    as the line's own keys are learned before NeMo Gym runs): none is in the message; its reason is."""
    remember(["learned-key-0123456789"])
    stderr = f"Traceback (most recent call last):\n  ...\n{said}\n{CONFIG_DUMP}\npolicy_api_key: {secret}\n"
    message = str(preparation_refusal("prepare", 2, stderr))
    assert secret not in message
    assert REDACTED in message and said.partition(":")[0] in message
    assert message.startswith("NeMo Gym could not prepare the split of this `gym eval run` line")


def test_the_refusal_keeps_nemo_gyms_own_reason_without_the_configuration_dump() -> None:
    """What NeMo Gym said before its configuration dump is kept as it said it; the dump is left out."""
    stderr = f"Dataset 'financebench' is missing on disk. Run `gym eval prepare`\n{CONFIG_DUMP}\nhuge: dump\n"
    message = str(preparation_refusal("collector", 2, stderr))
    assert "Dataset 'financebench' is missing on disk. Run `gym eval prepare`" in message
    assert "huge" not in message and "could not compose the configs of" in message
