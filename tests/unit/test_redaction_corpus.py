"""The one redaction rule against the canary corpus (issue 20, section 2).

Every form of tests/canary_corpus.py is removed by its shape alone (a process that learned
nothing), and once a process learned a secret it is removed by value wherever it appears — a
server's error text, a store record, a stream — whatever surrounds it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from gymslurm.launcher.settings import SlurmSettings
from gymslurm.redaction import (
    REDACTED,
    learn,
    learn_environment,
    redact_text,
    redact_value,
    remember,
    scrub_bytes,
)
from gymslurm.store.atomic import publish_json
from gymslurm.store.jsonl import Appender
from tests.canary_corpus import FORMS


def test_the_corpus_has_at_least_sixty_forms() -> None:
    """The corpus the issue asks for: 60 forms or more, each with its own needle."""
    assert len(FORMS) >= 60 and len({form.needle for form in FORMS}) == len(FORMS)


@pytest.mark.parametrize("form", FORMS, ids=[form.label for form in FORMS])
def test_each_form_is_redacted_by_its_shape(form) -> None:  # type: ignore[no-untyped-def]
    """A process that learned no secret still removes the form's secret (the second net)."""
    redacted = redact_text(form.text)
    assert form.needle not in redacted and REDACTED in redacted
    assert redact_text(redacted) == redacted, "redacting twice changes nothing"


@pytest.mark.parametrize("form", FORMS, ids=[form.label for form in FORMS])
def test_each_learned_secret_is_redacted_by_value_anywhere(form) -> None:  # type: ignore[no-untyped-def]
    """Once learned from its configuration, the secret is removed from text with no shape around it."""
    learn({"collector": {"env": {"CORPUS": form.text}}})
    echoed = f"upstream said: {form.echoed} was refused"
    assert form.needle not in redact_text(echoed)
    assert form.needle.encode() not in scrub_bytes(json.dumps({"body": echoed}).encode())


def test_a_split_flag_value_is_redacted_in_a_list() -> None:
    """``["--api-key=", "V"]`` and ``["--api-key", "V"]``: the item after a credential flag is its value."""
    assert redact_value(["serve", "--api-key=", "CNRY-SPLIT-1"]) == ["serve", "--api-key=", REDACTED]
    assert redact_value(["--hf-token", "CNRY-SPLIT-2"]) == ["--hf-token", REDACTED]


def test_a_credential_named_variable_is_learned_from_the_environment() -> None:
    """A value under a credential-named variable is scrubbed from text that does not name it."""
    learn_environment({"OPENAI_API_KEY": "sk-CNRY-ENV-3", "PWD": "/work/here", "HOME": "/root"})
    assert (
        redact_text("Incorrect key sk-CNRY-ENV-3 for /work/here")
        == f"Incorrect key {REDACTED} for /work/here"
    )


def test_what_a_server_echoes_never_reaches_a_store_file(tmp_path: Path) -> None:
    """A learned key echoed in a reply is replaced in appended records and published companions."""
    remember(["CNRY-ECHO-4-key"])
    failures = Appender(tmp_path / "o_failures.jsonl", 0)
    failures.append({"_ng_failure_response": {"error": "Incorrect API key provided: CNRY-ECHO-4-key"}})
    failures.close()
    publish_json(tmp_path / "o_health.json", {"examples": ["Incorrect API key provided: CNRY-ECHO-4-key"]})
    for path in tmp_path.iterdir():
        assert b"CNRY-ECHO-4-key" not in path.read_bytes(), path


def test_streams_print_no_learned_secret() -> None:
    """What a command prints (a traceback included) goes through the scrubbing stream."""
    from gymslurm.cli import _RedactingStream

    remember(["CNRY-STREAM-5-key"])
    buffer = io.StringIO()
    _RedactingStream(buffer).write("Traceback ... ValueError: CNRY-STREAM-5-key\n")
    assert "CNRY-STREAM-5-key" not in buffer.getvalue()


def test_env_setup_may_name_an_exported_variable() -> None:
    """``export X_API_KEY=${X_API_KEY}`` names a variable and holds no secret: accepted."""
    lines = ["export X_API_KEY=${X_API_KEY}", 'export HF_TOKEN="$HF_TOKEN"']
    assert SlurmSettings(env_setup=lines).env_setup == lines


@pytest.mark.parametrize(
    ("field", "line"),
    [
        ("extra_directives", "--comment=api_key=CNRY-DIR-6"),
        ("env_setup", "export DB_URL=postgres://h/db?password=CNRY-SETUP-7"),
    ],
)
def test_a_credential_inside_another_assignment_is_refused_in_a_script(field: str, line: str) -> None:
    """A script line whose credential hides inside an outer assignment is refused, without the value."""
    with pytest.raises(ValidationError, match="carries a credential") as refused:
        SlurmSettings(**{field: [line]})
    assert "CNRY-" not in refused.value.errors()[0]["msg"]  # what gymslurm shows (launcher validate)
