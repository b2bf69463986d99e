"""Tests for gymslurm.identity: redaction, resolution, null defaults, digests, key classification."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from gymslurm import identity
from gymslurm.errors import IdentityMismatchError
from gymslurm.identity import (
    REDACTED,
    IdentityDiff,
    build_identity,
    classify_differences,
    config_digest,
    describe_differences,
    drop_null_defaults,
    identity_digest,
    is_credential_name,
    is_operational,
    redact_credentials,
    resolve,
)

BASIC = base64.b64encode(b"alice:hunter2").decode()


def test_public_api_is_pinned() -> None:
    """The module exports exactly the documented API."""
    assert sorted(identity.__all__) == sorted(
        [
            "REDACTED",
            "IdentityDiff",
            "build_identity",
            "classify_differences",
            "config_digest",
            "describe_differences",
            "drop_null_defaults",
            "identity_digest",
            "is_connection_name",
            "is_credential_name",
            "is_operational",
            "redact_credentials",
            "redact_text",
            "redact_value",
            "resolve",
            "semantic_identity",
        ]
    )


# --- credential names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("api_key", True),
        ("apikey", True),
        ("apiKey", True),
        ("OPENAI_API_KEY", True),
        ("X-Api-Key", True),
        ("token", True),
        ("HF_TOKEN", True),
        ("accessToken", True),
        ("refresh_token", True),
        ("secret", True),
        ("client_secret", True),
        ("secrets", True),
        ("password", True),
        ("db_password", True),
        ("passwd", True),
        ("credential", True),
        ("credentials", True),
        ("auth", True),
        ("basic_auth", True),
        ("Authorization", True),
        ("Proxy-Authorization", True),
        ("private_key", True),
        ("access_key", True),
        ("aws_secret_access_key", True),
        ("max_tokens", False),
        ("num_tokens", False),
        ("token_limit", False),
        ("max_output_tokens", False),
        ("eos_token", False),
        ("pad_token", False),
        ("sort_key", False),
        ("key", False),
        ("tokenizer", False),
        ("credentials_file", False),
        ("auth_type", False),
        ("SECRET_TOKEN_2", True),
        ("api_key_2", True),
        ("", False),
        # plurals (issue 33): a list of credentials is as secret as one
        ("API_KEYS", True),
        ("apiKeys", True),
        ("access_keys", True),
        ("apikeys", True),
        ("HF_TOKENS", True),
        ("githubTokens", True),
        ("auth_tokens", True),
        ("SECRETS", True),
        ("client_secrets", True),
        ("passwords", True),
        ("DB_PASSWORDS", True),
        ("passwds", True),
        ("pwds", True),
        ("passphrases", True),
        ("cookies", True),
        ("webhooks", True),
        ("auths", True),
        ("authorizations", True),
        ("API_KEYS_2", True),
        # ... but not plurals that count or list a model's tokens, nor other words ending in "s"
        ("max_new_tokens", False),
        ("prompt_tokens", False),
        ("completion_tokens", False),
        ("input_tokens", False),
        ("total_tokens", False),
        ("reasoning_tokens", False),
        ("cached_tokens", False),
        ("stop_tokens", False),
        ("special_tokens", False),
        ("added_tokens", False),
        ("tokens", False),  # bare: a result's token count or list (tests/unit/test_dispatch.py's)
        ("keys", False),
        ("sort_keys", False),
        ("num_passes", False),
        ("passes", False),
        ("tokenizers", False),
        ("credentials_files", False),
    ],
)
def test_credential_name_rule(name: str, credential: bool) -> None:
    """The name rule marks keys, secrets and tokens (and their plurals) as credentials but not token
    counts or lists, sort keys or passes."""
    assert is_credential_name(name) is credential


# --- redaction: one credential form per row -------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "path", "expected"),
    [
        ({"api_key": "sk-1"}, ("api_key",), REDACTED),
        ({"model": {"apiKey": "sk-1"}}, ("model", "apiKey"), REDACTED),
        ({"api_key": None}, ("api_key",), REDACTED),
        ({"auth": {"user": "u", "token": "t"}}, ("auth",), REDACTED),
        ({"secrets": {"A": "1", "B": "2"}}, ("secrets",), REDACTED),
        ({"headers": {"Authorization": "Bearer x"}}, ("headers", "Authorization"), REDACTED),
        ({"headers": {"AUTHORIZATION": "x"}}, ("headers", "AUTHORIZATION"), REDACTED),
        ({"headers": {"X-Request-Source": "ci"}}, ("headers", "X-Request-Source"), "ci"),
        ({"env": [{"name": "HF_TOKEN", "value": "v"}]}, ("env", 0, "value"), REDACTED),
        ({"env": [{"name": "HF_HOME", "value": "/h"}]}, ("env", 0, "value"), "/h"),
        ({"env": ["HF_TOKEN=abc"]}, ("env", 0), f"HF_TOKEN={REDACTED}"),
        ({"env": ["HF_HOME=/h"]}, ("env", 0), "HF_HOME=/h"),
        ({"cmd": "A=1 GH_TOKEN='a b' run"}, ("cmd",), f"A=1 GH_TOKEN='{REDACTED}' run"),
        ({"cmd": 'run --token "a b" -v'}, ("cmd",), f'run --token "{REDACTED}" -v'),
        ({"cmd": "run --api-key sk-1 --n 3"}, ("cmd",), f"run --api-key {REDACTED} --n 3"),
        ({"cmd": "run --api-key=sk-1"}, ("cmd",), f"run --api-key={REDACTED}"),
        ({"cmd": "run --max-tokens 5"}, ("cmd",), "run --max-tokens 5"),
        ({"command": ["serve", "--api-key", "sk-1", "--n", "3"]}, ("command", 2), REDACTED),
        ({"command": ["serve", "--token", "t", "--n", "3"]}, ("command", 4), "3"),
        ({"command": ["serve", "--max-tokens", "5"]}, ("command", 2), "5"),
        ({"o": ["+e=[{name: X_TOKEN, value: v1}]"]}, ("o", 0), f"+e=[{{name: X_TOKEN, value: {REDACTED}}}]"),
        ({"o": "{name: 'GH_TOKEN', value: 'a b'}"}, ("o",), f"{{name: 'GH_TOKEN', value: '{REDACTED}'}}"),
        ({"o": "{name: HF_HOME, value: /h}"}, ("o",), "{name: HF_HOME, value: /h}"),
        ({"o": "+c={j: {api_key: v1, n: 2}}"}, ("o",), f"+c={{j: {{api_key: {REDACTED}, n: 2}}}}"),
        ({"o": "+c={secrets: {a: v1}, n: 2}"}, ("o",), f"+c={{secrets: {REDACTED}, n: 2}}"),
        ({"o": "{h: {x-api-key: 'v 1'}}"}, ("o",), f"{{h: {{x-api-key: '{REDACTED}'}}}}"),
        ({"o": "{max_tokens: 5, url: http://h:80}"}, ("o",), "{max_tokens: 5, url: http://h:80}"),
        (
            {"note": "curl -H 'Authorization: Bearer sk.1/x='"},
            ("note",),
            f"curl -H 'Authorization: Bearer {REDACTED}'",
        ),
        ({"note": "bearer abc"}, ("note",), f"bearer {REDACTED}"),
        ({"note": f"Basic {BASIC}"}, ("note",), f"Basic {REDACTED}"),
        ({"note": "Basic arithmetic"}, ("note",), "Basic arithmetic"),
        ({"db": "postgres://bob:pw@db:5432/x"}, ("db",), f"postgres://bob:{REDACTED}@db:5432/x"),
        ({"db": "https://:pw@host"}, ("db",), f"https://:{REDACTED}@host"),
        ({"url": "http://host:8000/v1"}, ("url",), "http://host:8000/v1"),
        ({"url": "https://h/x?api_key=abc&n=1"}, ("url",), f"https://h/x?api_key={REDACTED}&n=1"),
        ({"blob": '{"token": "abc", "n": "1"}'}, ("blob",), f'{{"token": "{REDACTED}", "n": "1"}}'),
        ({"x": "${oc.env:HF_TOKEN}"}, ("x",), REDACTED),
        ({"x": "${oc.env:HF_TOKEN,default}"}, ("x",), REDACTED),
        ({"x": "Bearer ${oc.env:OPENAI_API_KEY}"}, ("x",), f"Bearer {REDACTED}"),
        ({"x": "${oc.decode:${oc.env:HF_TOKEN}}"}, ("x",), f"${{oc.decode:{REDACTED}}}"),
        ({"x": "${oc.env:HF_HOME}"}, ("x",), "${oc.env:HF_HOME}"),
        ({"max_tokens": 512}, ("max_tokens",), 512),
        ({"token_limit": 9}, ("token_limit",), 9),
        ({"task_input": {"api_key": "k", "port": 1}}, ("task_input", "api_key"), "k"),
        ({"tasks": [{"token": "t"}]}, ("tasks", 0, "token"), "t"),
        ({"task_params": {"x": "${oc.env:HF_TOKEN}"}}, ("task_params", "x"), REDACTED),
    ],
)
def test_redaction_form(config: dict[str, Any], path: tuple[Any, ...], expected: Any) -> None:
    """Each credential form is replaced by the marker; everything else is kept."""
    value: Any = redact_credentials(config)
    for step in path:
        value = value[step]
    assert value == expected


CANARIES = {
    "CANARY-key-1",
    "CANARY-secretsmap-2",
    "CANARY-authz-3",
    "CANARY-namevalue-4",
    "CANARY-assign-5",
    "CANARY-flag-6",
    "CANARY-bearer-7",
    "CANARY-url-8",
    "CANARY-env-9",
    "CANARY-setting-10",
    "CANARY-camel-11",
    "CANARY-envurl-12",
    "CANARY-json-13",
    "CANARY-nested-env-14",
}


def _canary_config() -> dict[str, Any]:
    basic = base64.b64encode(b"user:CANARY-basic-15").decode()
    return {
        "policy_api_key": "CANARY-setting-10",
        "policy_base_url": "http://localhost:9",
        "judge": {"api_key": "CANARY-key-1", "secrets": {"S": "CANARY-secretsmap-2"}},
        "agent": {
            "client": {"api_key": "${policy_api_key}", "base_url": "${policy_base_url}/v1"},
            "headers": {"Authorization": "Bearer CANARY-authz-3", "X-Basic": f"Basic {basic}"},
            "extra": "${policy_api_key}",
            "accessToken": "CANARY-camel-11",
        },
        "env": [{"name": "HF_TOKEN", "value": "CANARY-namevalue-4"}, "GH_TOKEN=CANARY-assign-5"],
        "command": "agent --token CANARY-flag-6 --note 'bearer CANARY-bearer-7'",
        "database": "postgres://u:CANARY-url-8@db/x",
        "from_env": "${oc.env:SECRET_TOKEN}",
        "env_url": "${oc.env:GS_TEST_DSN}",
        "json_blob": '{"password": "CANARY-json-13"}',
        "nested": "${oc.decode:${oc.env:SECRET_TOKEN_2}}",
    }


def test_canary_credentials_never_reach_the_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """No canary secret of any form appears anywhere in the serialized identity."""
    monkeypatch.setenv("SECRET_TOKEN", "CANARY-env-9")
    monkeypatch.setenv("SECRET_TOKEN_2", "CANARY-nested-env-14")
    monkeypatch.setenv("GS_TEST_DSN", "mysql://root:CANARY-envurl-12@db/x")
    config = _canary_config()
    encoded_basic = config["agent"]["headers"]["X-Basic"].split()[1]
    serialized = orjson.dumps(build_identity(config)).decode()
    leaked = sorted(c for c in [*CANARIES, encoded_basic] if c in serialized)
    assert leaked == [], serialized


def test_credential_environment_variable_is_not_resolved_even_when_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``${oc.env:SECRET_TOKEN}`` becomes the marker, never the variable's value."""
    monkeypatch.setenv("SECRET_TOKEN", "CANARY-env-only")
    assert build_identity({"x": "${oc.env:SECRET_TOKEN}"}) == {"x": REDACTED}


def test_omegaconf_input_is_redacted_before_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DictConfig given directly is read unresolved, so its credential variables are not read either."""
    monkeypatch.setenv("SECRET_TOKEN", "CANARY-dictconfig")
    config = OmegaConf.create({"x": "${oc.env:SECRET_TOKEN}", "y": "${x}"})
    assert build_identity(config) == {"x": REDACTED, "y": REDACTED}


def test_other_environment_variables_are_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-credential environment interpolation is resolved like any other setting."""
    monkeypatch.setenv("GS_TEST_MODEL", "llama")
    assert build_identity({"model": "${oc.env:GS_TEST_MODEL}"}) == {"model": "llama"}


# --- resolution and connection references -------------------------------------------------------


def _agent_config(base_url: str, api_key: str, model: str = "m1") -> dict[str, Any]:
    return {
        "policy_base_url": base_url,
        "policy_api_key": api_key,
        "policy_model_name": model,
        "agent": {
            "client": {
                "base_url": "${policy_base_url}/v1",
                "api_key": "${policy_api_key}",
                "headers": {"X-Key": "${policy_api_key}"},
                "model": "${policy_model_name}",
            }
        },
    }


def test_connection_references_keep_their_reference_string() -> None:
    """``${policy_base_url}/v1`` stays a template in the identity, not the resolved URL."""
    client = build_identity(_agent_config("http://a:1", "k1"))["agent"]["client"]
    assert client["base_url"] == "${policy_base_url}/v1"
    assert client["headers"]["X-Key"] == "${policy_api_key}"


def test_connection_reference_values_changing_is_not_semantic() -> None:
    """Changing the endpoint and key behind connection references leaves no semantic difference."""
    saved = build_identity(_agent_config("http://a:1", "k1"))
    current = build_identity(_agent_config("http://b:2", "k2"))
    assert classify_differences(saved, current) == IdentityDiff(operational=["policy_base_url"])


def test_url_template_around_a_connection_reference_is_semantic() -> None:
    """001 keeps the template around a reference: ``${policy_base_url}/v1`` → ``/v2`` refuses a resume."""
    saved = build_identity(_agent_config("http://a:1", "k1"))
    current_config = _agent_config("http://a:1", "k1")
    current_config["agent"]["client"]["base_url"] = "${policy_base_url}/v2"
    assert classify_differences(saved, build_identity(current_config)) == IdentityDiff(
        semantic=["agent.client.base_url"]
    )


def test_reference_name_of_an_endpoint_setting_is_semantic() -> None:
    """Pointing a client at another reference (``${judge_base_url}``) is a semantic difference."""
    saved = {"agent": {"base_url": "${policy_base_url}"}}
    current = {"agent": {"base_url": "${judge_base_url}"}}
    assert classify_differences(saved, current).semantic == ["agent.base_url"]


def test_moving_one_server_of_environment_server_urls_is_operational() -> None:
    """Endpoint addresses are operational (000), also one entry of the taskset → URL map."""
    saved = build_identity({"environment_server_urls": {"ts1": "http://h:1", "ts2": "http://h:2"}})
    current = build_identity({"environment_server_urls": {"ts1": "http://h:1", "ts2": "http://h:9"}})
    assert classify_differences(saved, current) == IdentityDiff(operational=["environment_server_urls.ts2"])


def test_model_name_reference_is_resolved_and_semantic() -> None:
    """A model name behind a reference is resolved, so changing it is a semantic difference."""
    saved = build_identity(_agent_config("http://a:1", "k1", model="m1"))
    current = build_identity(_agent_config("http://a:1", "k1", model="m2"))
    assert classify_differences(saved, current).semantic == ["agent.client.model", "policy_model_name"]


def test_environment_endpoint_reference_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """``${oc.env:POLICY_HOST}`` is a connection reference: kept, not resolved."""
    monkeypatch.setenv("POLICY_HOST", "node7")
    assert build_identity({"cmd": "serve --at ${oc.env:POLICY_HOST}"}) == {
        "cmd": "serve --at ${oc.env:POLICY_HOST}"
    }


def test_unparseable_interpolation_stays_literal() -> None:
    """A string OmegaConf cannot parse after redaction is kept literally, not an error."""
    assert build_identity({"x": "${oc.decode:${oc.env:HF_TOKEN}}"}) == {"x": f"${{oc.decode:{REDACTED}}}"}


def test_unresolvable_value_stays_as_written() -> None:
    """An interpolation that cannot resolve (an unset variable, a missing key) is kept verbatim."""
    config = {
        "unused": {"url_env": "${oc.env:GS_TEST_SURELY_UNSET}", "ref": "${nowhere}"},
        "n": "${m}",
        "m": 3,
    }
    assert resolve(config) == {
        "unused": {"url_env": "${oc.env:GS_TEST_SURELY_UNSET}", "ref": "${nowhere}"},
        "n": 3,
        "m": 3,
    }


def test_resolve_follows_references_into_subtrees() -> None:
    """A reference to a mapping or list resolves to its contents."""
    assert resolve({"a": {"b": [1, "${c}"]}, "c": 2, "d": "${a}"}) == {
        "a": {"b": [1, 2]},
        "c": 2,
        "d": {"b": [1, 2]},
    }


def test_reference_to_a_redacted_setting_gives_the_marker() -> None:
    """A non-connection reference to a credential's parent resolves to the redacted copy."""
    config = {"creds": {"api_key": "sk-1"}, "copy": "${creds}"}
    assert build_identity(config)["copy"] == {"api_key": REDACTED}


def test_task_data_port_and_api_key_stay_in_identity() -> None:
    """Literal nested task fields named port or api_key are part of the identity."""
    config = {"task_input": {"port": 8080, "api_key": "task-literal"}}
    assert build_identity(config) == config


def test_task_data_changes_are_semantic() -> None:
    """A changed task port is semantic, though ``port`` elsewhere is operational."""
    saved, current = {"task_params": {"port": 1}}, {"task_params": {"port": 2}}
    assert classify_differences(saved, current).semantic == ["task_params.port"]


# --- null defaults ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "defaults", "expected"),
    [
        ({"seed": None}, {"seed": None}, {}),
        ({"seed": None}, {"seed": 7}, {"seed": None}),
        ({"seed": None}, {}, {"seed": None}),
        ({"agent": {"max_turns": None, "x": 1}}, {"agent": {"max_turns": None}}, {"agent": {"x": 1}}),
        ({"agent": {"max_turns": None}}, {"agent": {"max_turns": 30}}, {"agent": {"max_turns": None}}),
        ({"seed": 3}, {"seed": None}, {"seed": 3}),
    ],
)
def test_drop_null_defaults(
    config: dict[str, Any], defaults: dict[str, Any], expected: dict[str, Any]
) -> None:
    """A null whose default is null is dropped; a null with another default or none stays."""
    assert drop_null_defaults(config, defaults) == expected


def test_null_default_equals_absent_setting() -> None:
    """With defaults, a null setting whose default is null has the same digest as an absent one."""
    defaults = {"limit": None}
    with_null = build_identity({"limit": None, "n": 1}, defaults=defaults)
    absent = build_identity({"n": 1}, defaults=defaults)
    assert identity_digest(with_null) == identity_digest(absent)


# --- digest -------------------------------------------------------------------------------------


def test_digest_ignores_key_order() -> None:
    """Two identities that differ only in key order have the same digest."""
    a = {"x": 1, "y": {"b": 2, "a": [1, {"q": 1, "p": 2}]}}
    b = {"y": {"a": [1, {"p": 2, "q": 1}], "b": 2}, "x": 1}
    assert identity_digest(a) == identity_digest(b)


def test_config_digest_leaves_operational_settings_out() -> None:
    """One experiment at two output paths and ports has one config_digest (000: digest of what the
    results depend on); a model change still changes it."""
    base = {"input_jsonl_fpath": "d.jsonl", "model": "m1", "environment_config": {"x": 1}}
    here = {**base, "output_jsonl_fpath": "/a/o.jsonl", "environment_server_url": "http://h:1"}
    there = {**base, "output_jsonl_fpath": "/b/r.jsonl", "environment_server_url": "http://g:2"}
    assert config_digest(build_identity(here)) == config_digest(build_identity(there))
    assert config_digest(build_identity({**here, "model": "m2"})) != config_digest(build_identity(here))


def test_semantic_identity_keeps_endpoint_templates() -> None:
    """The semantic part drops addresses but keeps a reference's URL template and every other key."""
    identity_ = {"policy_base_url": "http://a:1", "agent": {"base_url": "${policy_base_url}/v1", "port": 3}}
    assert identity.semantic_identity(identity_) == {"agent": {"base_url": "${policy_base_url}/v1"}}


def test_digest_has_the_manifest_form() -> None:
    """The digest is ``sha256:`` and 64 hex digits."""
    digest = identity_digest({"x": 1})
    assert digest.startswith("sha256:") and len(digest) == 71 and int(digest[7:], 16) >= 0


@pytest.mark.parametrize(("a", "b"), [({"t": 1}, {"t": 1.0}), ({"t": 0.0}, {"t": -0.0})])
def test_digest_canonical_numbers(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Integral floats and ints are the same number in the identity."""
    assert identity_digest(build_identity(a)) == identity_digest(build_identity(b))


@pytest.mark.parametrize(
    ("a", "b"), [({"t": 1}, {"t": 2}), ({"t": 1}, {"t": True}), ({"t": [1, 2]}, {"t": [2, 1]})]
)
def test_digest_changes_with_values(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Different values (including 1 vs true, and list order) give different digests."""
    assert identity_digest(a) != identity_digest(b)


def test_build_identity_sorts_keys() -> None:
    """The saved identity lists keys in sorted order at every level."""
    built = build_identity({"b": 1, "a": {"d": 1, "c": 2}})
    assert list(built) == ["a", "b"] and list(built["a"]) == ["c", "d"]


# --- operational vs semantic --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "operational"),
    [
        ("num_samples_in_parallel", True),
        ("agent.client.max_concurrency", True),
        ("request_timeout_s", True),
        ("agent.client.timeout", True),
        ("max_retries", True),
        ("retry_terminal_timeouts", True),
        ("transport", True),
        ("policy_port", True),
        ("head_server.host", True),
        ("environment_server_url", True),
        ("environment_server_urls", True),
        ("environment_server_urls.ts2", True),
        ("dataset_urls.ts2", False),
        ("agent.client.base_url", True),
        ("health.max_failure_rate", True),
        ("disable_health_check", True),
        ("output_jsonl_fpath", True),
        ("capture_dir", True),
        ("log_dir", True),
        ("wandb.project", True),
        ("wandb_project", True),
        ("mlflow.tracking_uri", True),
        ("dispatch_budget_s", True),
        ("dispatch_longest_first", True),
        ("max_resident_tasks", True),
        ("resume_from_cache", True),
        ("allow_unsafe_resume", True),
        ("require_complete", True),
        ("route_failures_to_sidecar", True),
        ("count_missing_rollouts_as_zero", True),
        ("agent.client.api_key", True),
        ("judge.secrets", True),
        ("input_jsonl_fpath", False),
        ("dataset_path", False),
        ("dataset_url", False),
        ("prompt_config_path", False),
        ("limit", False),
        ("num_repeats", False),
        ("agent_name", False),
        ("policy_model_name", False),
        ("responses_create_params.temperature", False),
        ("responses_create_params.top_p", False),
        ("responses_create_params.max_output_tokens", False),
        ("max_tokens", False),
        ("judge.model", False),
        ("judge.prompt_template", False),
        ("environment.image", False),
        ("task_input.port", False),
        ("task_input.api_key", False),
        ("headers.X-Request-Source", False),
        ("tasks.timeout", False),
        ("some_unknown_setting", False),
    ],
)
def test_is_operational(key: str, operational: bool) -> None:
    """Each dotted key falls on the documented side of the operational/semantic table."""
    assert is_operational(key) is operational


def test_classify_differences_splits_and_sorts() -> None:
    """Differing keys are split into semantic and operational, each sorted."""
    saved = {"limit": 5, "num_samples_in_parallel": 4, "model": {"name": "a", "timeout": 10}}
    current = {"limit": 6, "num_samples_in_parallel": 8, "model": {"name": "b", "timeout": 20}}
    diff = classify_differences(saved, current)
    assert diff == IdentityDiff(
        semantic=["limit", "model.name"], operational=["model.timeout", "num_samples_in_parallel"]
    )


@pytest.mark.parametrize(
    ("saved", "current", "expected"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({"a": 1}, {}, ["a"]),
        ({}, {"a": 1}, ["a"]),
        ({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}, ["a"]),
        ({"a": {}}, {"a": {"b": 1}}, ["a", "a.b"]),
        ({"a": None}, {}, ["a"]),
        ({"a": 1}, {"a": True}, ["a"]),
    ],
)
def test_classify_differences_keys(
    saved: dict[str, Any], current: dict[str, Any], expected: list[str]
) -> None:
    """Added and removed keys differ; a list is one value; 1 and true differ."""
    assert classify_differences(saved, current).semantic == expected


def test_describe_differences_names_keys_and_ways_out() -> None:
    """The message names every semantic key, the saved identity file and both ways out."""
    message = describe_differences(
        IdentityDiff(semantic=["limit", "agent.model"], operational=["max_retries"])
    )
    for fragment in [
        "limit",
        "agent.model",
        "_identity.json",
        "same configuration",
        "new output path",
        "max_retries",
    ]:
        assert fragment in message


def test_describe_differences_fits_identity_mismatch_error() -> None:
    """The message and keys build an IdentityMismatchError for the collector."""
    diff = IdentityDiff(semantic=["limit"])
    error = IdentityMismatchError(describe_differences(diff), diff.semantic)
    assert error.differing_keys == ["limit"] and "limit" in str(error)


def test_describe_operational_only() -> None:
    """With only operational differences the message says they do not block."""
    assert "do not block" in describe_differences(IdentityDiff(operational=["max_retries"]))


# --- property: redaction is idempotent and complete ---------------------------------------------

NAMES = [
    "api_key",
    "HF_TOKEN",
    "secrets",
    "Authorization",
    "password",
    "name",
    "value",
    "model",
    "max_tokens",
    "env",
    "url",
    "cmd",
    "task_input",
    "port",
]
FRAGMENTS = [
    "Bearer ",
    "Basic ",
    f"{BASIC}",
    "HF_TOKEN=",
    "--token ",
    "https://u:",
    "@h/",
    "${oc.env:",
    "A_TOKEN",
    "}",
    "${",
    "policy_api_key",
    '"token": "',
    "'",
    " ",
    "x",
    "=",
    "&",
    "\\",
]
TEXT = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=8).map("".join)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT
CONFIGS = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


def _credential_values(value: Any) -> list[Any]:
    """Values under credential-named keys outside task data."""
    if isinstance(value, list):
        return [found for item in value for found in _credential_values(item)]
    if not isinstance(value, dict):
        return []
    found = [item for key, item in value.items() if is_credential_name(key)]
    return found + [
        hit
        for key, item in value.items()
        if not identity._opens_task_data(key)
        for hit in _credential_values(item)
    ]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=6), CONFIGS, max_size=5))
def test_redaction_is_idempotent_and_complete(config: dict[str, Any]) -> None:
    """Redacting twice changes nothing, and no credential-named key keeps a value."""
    once = redact_credentials(config)
    assert redact_credentials(once) == once
    assert all(value == REDACTED for value in _credential_values(once))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=6), CONFIGS, max_size=5))
def test_build_identity_accepts_any_plain_config(config: dict[str, Any]) -> None:
    """Any plain configuration, malformed interpolations included, gives an identity and a digest."""
    built = build_identity(config)
    assert identity_digest(built) == identity_digest(build_identity(config))
