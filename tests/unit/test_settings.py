"""Settings: Hydra composition with NeMo Gym's override spellings, validation into CollectSettings."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.collector.routing import resolve_routing
from gymslurm.errors import ConfigError
from gymslurm.settings import (
    load_settings,
    max_rollout_attempts,
    normalize_overrides,
    resolve_config,
    validate_settings,
)

BASE = ["+input_jsonl_fpath=/data/in.jsonl", "+output_jsonl_fpath=/runs/out.jsonl"]
URL = "+environment_server_url=http://127.0.0.1:8000"


def settings(*overrides: str):
    resume = ["+resume_from_cache=true"] if "+resubmit=true" in overrides else []
    return load_settings([*BASE, URL, *resume, *overrides])[0]


@pytest.mark.parametrize(
    ("override", "field", "expected"),
    [
        ("+num_repeats=4", "num_repeats", 4),
        ("num_repeats=4", "num_repeats", 4),
        ("+limit=10", "limit", 10),
        ("+resume_from_cache=true", "resume_from_cache", True),
        ("+route_failures_to_sidecar=true", "route_failures_to_sidecar", True),
        ("+require_complete=true", "require_complete", True),
        ("+dispatch_budget_s=30.5", "dispatch_budget_s", 30.5),
        ("+dispatch_longest_first=true", "dispatch_longest_first", True),
        ("+retry_terminal_timeouts=true", "retry_terminal_timeouts", True),
        ("+resubmit=true", "resubmit", True),
        ("+retry_terminal_timeouts=false", "retry_terminal_timeouts", False),
        ("+concurrency=8", "concurrency", 8),
        ("+num_samples_in_parallel=8", "concurrency", 8),
        ("+prompt_template='Q: {question}'", "prompt_template", "Q: {question}"),
    ],
)
def test_nemo_gym_spellings_set_the_setting(override: str, field: str, expected: object) -> None:
    """Each NeMo Gym override spelling (and the plain one) sets its setting."""
    assert getattr(settings(override), field) == expected


def test_defaults_come_from_collect_yaml() -> None:
    """Unset settings take collect.yaml's defaults; the terminal-timeout policy stays 'not set'."""
    s = settings()
    assert (s.num_repeats, s.limit, s.resume_from_cache, s.require_complete) == (1, None, False, False)
    assert s.retry_terminal_timeouts is None and not s.explicit_retry_terminal_timeouts
    assert s.output_jsonl_fpath == Path("/runs/out.jsonl")


def test_allow_unsafe_resume_with_resume() -> None:
    """allow_unsafe_resume is accepted together with resume_from_cache."""
    assert settings("+resume_from_cache=true", "+allow_unsafe_resume=true").allow_unsafe_resume


def test_taskset_mapping_routes_each_taskset() -> None:
    """A taskset → URL mapping picks the server per taskset, falling back to environment_server_url."""
    mapping = "+environment_server_urls={math: 'http://h1:1/', code: 'http://h2:2'}"
    routing = resolve_routing(settings(mapping), {})
    assert routing.url_for("math") == "http://h1:1"
    assert routing.url_for("code") == "http://h2:2"
    assert routing.url_for("other") == "http://127.0.0.1:8000"


def test_mapping_without_default_server_names_the_taskset() -> None:
    """A taskset missing from the mapping (and no default server) is a ConfigError naming it."""
    routing = resolve_routing(load_settings([*BASE, "+environment_server_urls.math=http://h1:1"])[0], {})
    with pytest.raises(ConfigError, match="'code'"):
        routing.url_for("code")


def test_unresolved_config_keeps_interpolations(monkeypatch: pytest.MonkeyPatch) -> None:
    """The config kept for identity is unresolved; the settings are resolved."""
    monkeypatch.setenv("GS_TEST_URL", "http://10.0.0.1:9")
    s, raw = load_settings([*BASE, "+environment_server_url=${oc.env:GS_TEST_URL}"])
    assert raw["environment_server_url"] == "${oc.env:GS_TEST_URL}"
    assert s.environment_server_url == "http://10.0.0.1:9"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([URL], "missing required setting"),
        ([*BASE, URL, "+environment_routing_mode=agent"], "routes each row by its agent_ref"),
        ([*BASE, URL, "+num_repeats=0"], "num_repeats"),
        ([*BASE, URL, "+limit=abc"], "limit"),
        ([*BASE, URL, "+concurency=3"], "unknown setting 'concurency'"),
        ([*BASE, "+environment_server_url=localhost:80"], "not an http"),
        ([*BASE, URL, "+allow_unsafe_resume=true"], "only applies to a resume"),
        ([*BASE, URL, "+resubmit=true"], "add \\+resume_from_cache=true"),
        ([*BASE, URL, "+progress=fancy"], "progress"),
        (["+input_jsonl_fpath=/a.jsonl", "+output_jsonl_fpath=/a.jsonl", URL], "same file"),
        ([*BASE, URL, "not an override"], "cannot compose"),
    ],
)
def test_bad_input_is_a_config_error(overrides: list[str], message: str) -> None:
    """Bad settings raise a ConfigError saying what is wrong."""
    with pytest.raises(ConfigError, match=message):
        load_settings(overrides)


def test_plus_is_rewritten_to_force_add() -> None:
    """'+k=v' becomes '++k=v'; '++k=v' and 'k=v' are kept."""
    assert normalize_overrides(["+a=1", "++b=2", "c=3"]) == ["++a=1", "++b=2", "c=3"]


@pytest.mark.parametrize(("env", "expected"), [({}, 3), ({"NEMO_GYM_MAX_ROLLOUT_ATTEMPTS": "5"}, 5)])
def test_max_rollout_attempts_reads_the_environment(env: dict[str, str], expected: int) -> None:
    """The counted-failure limit comes from NEMO_GYM_MAX_ROLLOUT_ATTEMPTS, default 3."""
    assert max_rollout_attempts(env) == expected


@pytest.mark.parametrize("raw", ["0", "-1", "many", "1.5"])
def test_bad_max_rollout_attempts_is_a_config_error(raw: str) -> None:
    """A non-positive or non-integer attempt limit is a ConfigError."""
    with pytest.raises(ConfigError, match="NEMO_GYM_MAX_ROLLOUT_ATTEMPTS"):
        max_rollout_attempts({"NEMO_GYM_MAX_ROLLOUT_ATTEMPTS": raw})


def test_user_config_dir_extends_collect_yaml(tmp_path: Path) -> None:
    """A benchmark config in a user folder can start from collect.yaml via its defaults list."""
    (tmp_path / "bench.yaml").write_text("defaults: [collect, _self_]\nnum_repeats: 3\n")
    s, _ = load_settings([*BASE, URL], config_dir=tmp_path, config_name="bench")
    assert s.num_repeats == 3 and s.concurrency == 64


def test_unused_server_block_need_not_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """000: an unresolvable value in a server block the collector does not use stays as written."""
    monkeypatch.delenv("GS_UNSET_FOR_TEST", raising=False)
    monkeypatch.setenv("GS_SET_FOR_TEST", "m1")
    raw = {
        "input_jsonl_fpath": "d.jsonl",
        "output_jsonl_fpath": "o.jsonl",
        "environment_server_url": "http://h:1",
        "environment_config": {
            "used": {"model": "${oc.env:GS_SET_FOR_TEST}"},
            "unused": {"endpoint": "${oc.env:GS_UNSET_FOR_TEST}", "models": ["${oc.env:GS_UNSET_FOR_TEST}"]},
        },
    }
    settings = validate_settings(resolve_config(raw))
    assert settings.environment_config == {
        "used": {"model": "m1"},
        "unused": {"endpoint": "${oc.env:GS_UNSET_FOR_TEST}", "models": ["${oc.env:GS_UNSET_FOR_TEST}"]},
    }


def test_a_setting_the_collector_uses_must_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unresolvable collector setting is still a configuration error naming the way out."""
    monkeypatch.delenv("GS_UNSET_FOR_TEST", raising=False)
    raw = {"input_jsonl_fpath": "${oc.env:GS_UNSET_FOR_TEST}", "output_jsonl_fpath": "o.jsonl"}
    with pytest.raises(ConfigError, match="cannot resolve the collect configuration"):
        resolve_config(raw)
