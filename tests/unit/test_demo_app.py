"""The demo application: routing, /run end to end in memory, --die-after, latency, the served config."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml

from gymslurm.demo.app import DemoApp, DemoConfig, config_yaml


def run_body(rollout_id: str = "arith-17", attempt: int = 0, **extra: Any) -> bytes:
    """An encoded /run body for 17 + 25 with extra task_input fields."""
    task_input = {"a": 17, "b": 25, "op": "+", **extra}
    task = {"task_id": {"taskset": "arith", "task_id": "17"}, "task_input": task_input}
    return orjson.dumps({"episode_id": {"rollout_id": rollout_id, "attempt": attempt}, "task": task})


def post_run(app: DemoApp, body: bytes) -> tuple[int, Any]:
    """POST /run to the app; the status and the decoded body."""
    reply = app.handle(b"POST", b"/run", body)
    return reply.status, orjson.loads(reply.body)


def test_run_grades_the_policy_answer() -> None:
    """With accuracy 1 the result holds the right answer and reward 1.0."""
    status, payload = post_run(DemoApp(DemoConfig(accuracy=1.0)), run_body())
    assert status == 200
    assert payload["result"]["reward"] == 1.0
    assert payload["result"]["response"]["answer"] == payload["result"]["expected_answer"] == "42"


def test_run_is_reproducible_across_servers() -> None:
    """Two servers with the same seed answer the same attempt identically."""
    replies = [
        DemoApp(DemoConfig(accuracy=0.5, seed=3)).handle(b"POST", b"/run", run_body(f"r{i}"))
        for i in range(20)
    ]
    again = [
        DemoApp(DemoConfig(accuracy=0.5, seed=3)).handle(b"POST", b"/run", run_body(f"r{i}"))
        for i in range(20)
    ]
    assert replies == again


def test_invalid_body_is_422() -> None:
    """An undecodable /run body is answered 422."""
    status, payload = post_run(DemoApp(DemoConfig()), b"{")
    assert status == 422
    assert payload["detail"][0]["type"] == "json_invalid"


@pytest.mark.parametrize(
    ("method", "target", "status"),
    [
        (b"GET", b"/health", 200),
        (b"GET", b"/health?probe=1", 200),
        (b"GET", b"/global_config_dict_yaml", 200),
        (b"GET", b"/run", 405),
        (b"POST", b"/health", 405),
        (b"GET", b"/nowhere", 404),
    ],
)
def test_routing(method: bytes, target: bytes, status: int) -> None:
    """Known paths answer, a known path with the wrong method is 405, others 404."""
    assert DemoApp(DemoConfig()).handle(method, target, b"").status == status


def test_method_not_allowed_names_the_allowed_method() -> None:
    """A 405 carries an Allow header."""
    assert (b"Allow", b"POST") in DemoApp(DemoConfig()).handle(b"GET", b"/run", b"").headers


def test_aggregate_metrics_route() -> None:
    """POST /aggregate_metrics answers the metrics of the given responses."""
    body = orjson.dumps({"verify_responses": [{"reward": 1.0}, {"reward": 0.0}]})
    reply = DemoApp(DemoConfig()).handle(b"POST", b"/aggregate_metrics", body)
    assert orjson.loads(reply.body)["key_metrics"]["mean/reward"] == 0.5


def test_aggregate_metrics_rejects_unknown_fields() -> None:
    """An /aggregate_metrics body with an unknown field is 422."""
    body = orjson.dumps({"verify_responses": [], "extra": 1})
    assert DemoApp(DemoConfig()).handle(b"POST", b"/aggregate_metrics", body).status == 422


def test_die_after_answers_n_then_dies() -> None:
    """--die-after 2: two /run requests are answered, the third is the die action."""
    app = DemoApp(DemoConfig(die_after=2))
    replies = [app.handle(b"POST", b"/run", run_body(f"r{i}")) for i in range(3)]
    assert [reply.die for reply in replies] == [False, False, True]


def test_die_after_zero_dies_on_the_first_request() -> None:
    """--die-after 0 dies on the first /run request."""
    assert DemoApp(DemoConfig(die_after=0)).handle(b"POST", b"/run", run_body()).die


def test_die_after_counts_only_run_requests() -> None:
    """Health checks do not count towards --die-after."""
    app = DemoApp(DemoConfig(die_after=1))
    app.handle(b"GET", b"/health", b"")
    assert not app.handle(b"POST", b"/run", run_body()).die


def test_latency_is_returned_as_a_delay() -> None:
    """--latency-ms and _demo_latency_ms become the reply's delay."""
    reply = DemoApp(DemoConfig(latency_ms=10)).handle(b"POST", b"/run", run_body(_demo_latency_ms=5))
    assert reply.delay_s == pytest.approx(0.015)


def test_rate_faults_are_applied() -> None:
    """A rate of 1 faults every attempt."""
    app = DemoApp(DemoConfig(rates=(("terminal", 1.0),)))
    assert all("failure" in post_run(app, run_body(f"r{i}"))[1] for i in range(10))


def test_outcomes_are_tallied() -> None:
    """The app counts each outcome (for the shutdown summary)."""
    app = DemoApp(DemoConfig(accuracy=1.0))
    post_run(app, run_body("a"))
    post_run(app, run_body("b", _demo_fault="omit"))
    assert dict(app.outcomes) == {"correct": 1, "omit": 1}


def test_config_yaml_holds_the_semantic_settings() -> None:
    """The served YAML names the model, accuracy, seed and verifier."""
    config = yaml.safe_load(config_yaml(DemoConfig(model_name="m", accuracy=0.5, seed=9)))
    assert config["policy_model"]["responses_api_models"]["demo_policy"] == {
        "model": "m",
        "accuracy": 0.5,
        "seed": 9,
    }
    assert config["gymslurm_demo"]["resources_servers"]["gymslurm_demo"]["verifier"] == "exact_match"


@pytest.mark.parametrize("change", [{"accuracy": 0.5}, {"model_name": "other"}, {"seed": 1}])
def test_config_yaml_changes_with_semantic_settings(change: dict[str, Any]) -> None:
    """Changing the accuracy, model or seed changes the served text."""
    assert config_yaml(DemoConfig(**change)) != config_yaml(DemoConfig())


@pytest.mark.parametrize("change", [{"latency_ms": 5.0}, {"die_after": 3}, {"rates": (("retryable", 0.5),)}])
def test_config_yaml_ignores_fault_injection(change: dict[str, Any]) -> None:
    """Fault injection and latency do not change the served text (a resume must not be refused)."""
    assert config_yaml(DemoConfig(**change)) == config_yaml(DemoConfig())


def test_config_route_serves_a_json_encoded_yaml_string() -> None:
    """/global_config_dict_yaml answers a JSON string holding the YAML (NeMo Gym head-server style)."""
    reply = DemoApp(DemoConfig()).handle(b"GET", b"/global_config_dict_yaml", b"")
    assert orjson.loads(reply.body) == config_yaml(DemoConfig())


@pytest.mark.parametrize(
    ("config", "flag"),
    [
        (DemoConfig(accuracy=1.5), "--accuracy"),
        (DemoConfig(accuracy=float("nan")), "--accuracy"),
        (DemoConfig(model_name=""), "--model-name"),
        (DemoConfig(latency_ms=-1), "--latency-ms"),
        (DemoConfig(die_after=-1), "--die-after"),
        (DemoConfig(rates=(("retryable", 0.7), ("terminal", 0.7))), "add up to"),
    ],
)
def test_config_problems(config: DemoConfig, flag: str) -> None:
    """An unusable configuration names the offending flag."""
    assert any(flag in problem for problem in config.problems())


def test_default_config_has_no_problem() -> None:
    """The defaults are usable."""
    assert DemoConfig().problems() == []
