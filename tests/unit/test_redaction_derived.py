"""A learned secret is scrubbed in the spellings a server echoes it in (issue 33): its base64, each
line of a multi-line secret, each value inside a structure ``${oc.decode:...}`` would decode, and a
secret that contains ``${`` (a literal, not a reference)."""

from __future__ import annotations

import base64

import pytest

from gymslurm.redaction import remember, scrub_bytes, scrub_text

PEM = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw\nggSjAgEAAoIBAQC7CANARY33pem\n"
    "-----END PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("secret", "echoed"),
    [
        ("sk-CANARY33-base64", base64.b64encode(b"sk-CANARY33-base64").decode()),
        ("sk-CANARY33-b64url?>", base64.urlsafe_b64encode(b"sk-CANARY33-b64url?>").decode().rstrip("=")),
        (PEM, "ggSjAgEAAoIBAQC7CANARY33pem"),
        ("{user: bob, secret_value: CANARY33decoded}", "CANARY33decoded"),
        ("pa${ss}CANARY33word", "pa${ss}CANARY33word"),
    ],
    ids=[
        "base64",
        "base64 url-safe unpadded",
        "one line of a PEM key",
        "inside a decoded structure",
        "with ${",
    ],
)
def test_a_learned_secret_is_scrubbed_in_what_a_server_echoes(secret: str, echoed: str) -> None:
    """The echoed spelling is replaced in text and bytes alike."""
    remember([secret])
    assert echoed not in scrub_text(f"the server said: {echoed} (rejected)")
    assert echoed.encode() not in bytes(scrub_bytes(bytearray(f"log {echoed}\n".encode())))


def test_a_reference_is_not_learned_as_a_secret() -> None:
    """``${X}`` names a secret and holds none: text that mentions it stays readable."""
    remember(["${oc.env:API_KEY}"])
    assert scrub_text("set ${oc.env:API_KEY} in env") == "set ${oc.env:API_KEY} in env"
