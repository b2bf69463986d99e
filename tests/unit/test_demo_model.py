"""The demo model server's application: OpenAI-shaped answers, deterministic, with its faults."""

from __future__ import annotations

import orjson
import pytest

from gymslurm.demo.model import DEFAULT_MODEL, PROBE_ANSWER, ModelApp, ModelConfig, completion_text


def chat(app: ModelApp, content: str, seed: object = "r1/0") -> tuple[int, object]:
    body = orjson.dumps({"messages": [{"role": "user", "content": content}], "seed": seed})
    reply = app.handle(b"POST", b"/v1/chat/completions", body)
    return reply.status, orjson.loads(reply.body) if reply.body else None


def test_a_question_gets_the_same_answer_for_the_same_request() -> None:
    """Deterministic: the same prompt and seed give the same answer, on a fresh server too."""
    first = completion_text(chat(ModelApp(ModelConfig()), "What is 12 * 3?")[1])
    again = completion_text(chat(ModelApp(ModelConfig()), "What is 12 * 3?")[1])
    assert first == again and first is not None


def test_accuracy_one_answers_every_question_correctly_and_zero_never() -> None:
    """accuracy 1.0: the exact answer; 0.0: a near miss."""
    right, wrong = ModelApp(ModelConfig(accuracy=1.0)), ModelApp(ModelConfig(accuracy=0.0))
    assert completion_text(chat(right, "What is 7 - 9?")[1]) == "-2"
    assert completion_text(chat(wrong, "What is 7 - 9?")[1]) != "-2"


def test_a_probe_gets_one_token_of_text_from_both_endpoints() -> None:
    """A one-token probe (chat or completions) gets text back."""
    app = ModelApp(ModelConfig())
    assert completion_text(chat(app, "ping")[1]) == PROBE_ANSWER
    reply = app.handle(b"POST", b"/v1/completions", orjson.dumps({"prompt": "ping", "max_tokens": 1}))
    assert completion_text(orjson.loads(reply.body)) == PROBE_ANSWER


@pytest.mark.parametrize(
    ("config", "count", "expect"),
    [
        (ModelConfig(die_after=2), 3, "die"),
        (ModelConfig(hang_after=0), 1, "never answered"),
        (ModelConfig(http500_rate=1.0), 1, 500),
        (ModelConfig(die_after=2), 2, 200),
    ],
    ids=["die after N", "hang after N", "500s", "answers before die_after"],
)
def test_faults(config: ModelConfig, count: int, expect: object) -> None:
    """die_after / hang_after N completions, and a 500 'engine dead' at http500_rate."""
    app = ModelApp(config)
    for _ in range(count - 1):
        app.handle(
            b"POST", b"/v1/chat/completions", orjson.dumps({"messages": [{"role": "user", "content": "x"}]})
        )
    reply = app.handle(
        b"POST", b"/v1/chat/completions", orjson.dumps({"messages": [{"role": "user", "content": "x"}]})
    )
    got = "die" if reply.die else "never answered" if reply.later is not None else reply.status
    if reply.later is not None:
        reply.later.close()
    assert got == expect


def test_a_wedged_engine_never_answers_but_health_and_metrics_still_do() -> None:
    """Past hang_after, every completion waits forever while /health says 200 and /metrics answers, as a
    real vLLM does with its EngineCore stopped (tests/vllm/): only a completion probe sees the hang."""
    import asyncio

    async def scenario() -> tuple[bool, int, bool]:
        app = ModelApp(ModelConfig(hang_after=0))
        body = orjson.dumps({"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1})
        later = app.handle(b"POST", b"/v1/chat/completions", body).later
        assert later is not None
        done, _ = await asyncio.wait([asyncio.ensure_future(later)], timeout=0.2)
        health = app.handle(b"GET", b"/health", b"").status
        metrics = "vllm:num_requests_running" in app.handle(b"GET", b"/metrics", b"").body.decode()
        return bool(done), health, metrics

    assert asyncio.run(scenario()) == (False, 200, True)


def test_bad_requests_and_unknown_routes_get_openai_shaped_errors() -> None:
    """No user message is a 400, an unknown path a 404, both with an error object."""
    app = ModelApp(ModelConfig())
    bad = app.handle(b"POST", b"/v1/chat/completions", b'{"messages": []}')
    missing = app.handle(b"GET", b"/v2/nothing", b"")
    assert (bad.status, missing.status) == (400, 404)
    assert "error" in orjson.loads(bad.body) and "error" in orjson.loads(missing.body)


# vLLM 0.32's answer to a chat completion naming a model it does not serve (its serving layer's
# _check_model), the body tests/vllm/test_vllm_server.py reads from a real vLLM.
VLLM_UNKNOWN_MODEL = {
    "error": {
        "message": "The model `gpt-x` does not exist. Valid aliases: tiny.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
}


@pytest.mark.parametrize("path", [b"/v1/chat/completions", b"/v1/completions", b"/v1/responses"])
def test_a_request_for_a_model_it_does_not_serve_gets_vllms_404(path: bytes) -> None:
    """A model name other than the served one is refused as vLLM refuses it: 404, vLLM's error body."""
    app = ModelApp(ModelConfig(model_name="tiny"))
    body = {
        "model": "gpt-x",
        "messages": [{"role": "user", "content": "ping"}],
        "prompt": "ping",
        "input": "ping",
    }
    reply = app.handle(b"POST", path, orjson.dumps(body))
    assert (reply.status, orjson.loads(reply.body)) == (404, VLLM_UNKNOWN_MODEL)


@pytest.mark.parametrize("model", ["tiny", "", None], ids=["the served name", "empty", "no model field"])
def test_the_served_name_or_no_name_is_answered(model: str | None) -> None:
    """The served name is answered, and so is a request naming none (vLLM serves its base model then)."""
    body: dict[str, object] = {"messages": [{"role": "user", "content": "ping"}]}
    if model is not None:
        body["model"] = model
    reply = ModelApp(ModelConfig(model_name="tiny")).handle(
        b"POST", b"/v1/chat/completions", orjson.dumps(body)
    )
    assert (reply.status, completion_text(orjson.loads(reply.body))) == (200, PROBE_ANSWER)


def test_a_refused_model_never_reaches_the_engine() -> None:
    """The 404 comes from the API server: it is no completion, so a wedged engine still refuses it at once."""
    app = ModelApp(ModelConfig(hang_after=0))
    body = orjson.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": "ping"}]})
    reply = app.handle(b"POST", b"/v1/chat/completions", body)
    assert (reply.status, reply.later, app.completions) == (404, None, 0)


def test_the_demo_stacks_two_servers_agree_on_the_policys_name_by_default() -> None:
    """The demo Environment Server asks for the name the demo model server serves, with no flags."""
    from gymslurm.demo.app import DemoConfig

    assert DemoConfig().model_name == ModelConfig().model_name


def _responses(app: ModelApp, request: object) -> tuple[int, object]:
    reply = app.handle(b"POST", b"/v1/responses", orjson.dumps(request))
    return reply.status, orjson.loads(reply.body)


def test_the_responses_endpoint_answers_like_chat_completions() -> None:
    """``POST /v1/responses`` (NeMo Gym's openai_model) gives the chat endpoint's answer, Responses-shaped."""
    app = ModelApp(ModelConfig(accuracy=1.0))
    status, body = _responses(
        app, {"model": DEFAULT_MODEL, "input": [{"role": "user", "content": "What is 12 * 3?"}]}
    )
    assert status == 200
    assert body["object"] == "response" and body["output"][0]["content"][0]["type"] == "output_text"
    assert completion_text(body) == "36"
    assert completion_text(_responses(app, {"model": DEFAULT_MODEL, "input": "What is 2 + 2?"})[1]) == "4"


def test_a_responses_reply_carries_openais_usage_details() -> None:
    """A Responses reply's usage has OpenAI's required ``input_tokens_details`` and
    ``output_tokens_details`` (NeMo Gym's openai_model refused the reply without them)."""
    _, body = _responses(ModelApp(ModelConfig()), {"model": DEFAULT_MODEL, "input": "What is 2 + 2?"})
    assert isinstance(body, dict)
    usage = body["usage"]
    assert usage["input_tokens_details"] == {"cached_tokens": 0}
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}


def test_a_responses_request_without_input_is_refused_by_name() -> None:
    """A Responses request with no ``input`` is a 400 that names the field."""
    status, body = _responses(ModelApp(ModelConfig()), {"model": DEFAULT_MODEL})
    assert status == 400 and "input" in body["error"]["message"]  # type: ignore[index]


def _metric(text: str, name: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(name + "{"))
    return float(line.rsplit(" ", 1)[1])


def test_with_slots_requests_past_capacity_wait_and_metrics_say_so() -> None:
    """With ``slots`` N, N requests are served at once, the rest queue; /metrics shows running and waiting."""
    import asyncio

    async def scenario() -> tuple[list[float], list[float], list[int]]:
        app = ModelApp(ModelConfig(slots=2, latency_ms=200))
        body = orjson.dumps({"messages": [{"role": "user", "content": "What is 1 + 1?"}]})
        pending = [app.handle(b"POST", b"/v1/chat/completions", body).later for _ in range(5)]
        tasks = [asyncio.ensure_future(later) for later in pending]
        await asyncio.sleep(0.05)
        during = app.handle(b"GET", b"/metrics", b"").body.decode()
        replies = await asyncio.gather(*tasks)
        after = app.handle(b"GET", b"/metrics", b"").body.decode()
        names = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
        return (
            [_metric(during, n) for n in names],
            [_metric(after, n) for n in names],
            [reply.status for reply in replies],
        )

    during, after, statuses = asyncio.run(scenario())
    assert during == [2.0, 3.0, 1.0]
    assert after == [0.0, 0.0, 0.0]
    assert statuses == [200] * 5


def test_without_slots_a_completion_is_answered_at_once_as_before() -> None:
    """No ``slots``: the reply carries the latency as its delay (no queue), and /metrics shows no load."""
    app = ModelApp(ModelConfig(latency_ms=30))
    reply = app.handle(b"POST", b"/v1/completions", orjson.dumps({"prompt": "What is 1 + 1?"}))
    assert reply.status == 200 and reply.later is None and reply.delay_s == 0.03
    assert _metric(app.handle(b"GET", b"/metrics", b"").body.decode(), "vllm:num_requests_running") == 0.0


BAD_CAPACITIES = [(ModelConfig(slots=0), "--slots"), (ModelConfig(load_factor=-1.0), "--load-factor")]


@pytest.mark.parametrize(("config", "problem"), BAD_CAPACITIES)
def test_a_bad_capacity_is_named(config: ModelConfig, problem: str) -> None:
    """A capacity of no slots or a negative load factor is a named problem of the configuration."""
    assert any(problem in p for p in config.problems())


def test_the_demo_policy_sends_an_integer_seed_stable_per_attempt() -> None:
    """OpenAI types ``seed`` as an integer (vllm-router refuses a string): the demo Environment
    Server sends one drawn from the rollout id and attempt, the same for the same attempt."""
    from gymslurm.demo.policy import openai_seed

    assert isinstance(openai_seed("r1/0"), int) and 0 <= openai_seed("r1/0") < 2**63
    assert openai_seed("r1/0") == openai_seed("r1/0") != openai_seed("r1/1")


def test_the_demo_policys_max_tokens_is_a_flag_and_a_bad_one_is_named() -> None:
    """``--policy-max-tokens N`` sets each model call's max_tokens (16 by default: bench/adaptive.py
    asks for longer answers, so that the model's own work weighs in a call); 0 is a named problem."""
    from gymslurm.demo.app import DemoConfig
    from gymslurm.demo.server import _parser, config_from_args

    assert config_from_args(_parser().parse_args([])).policy_max_tokens == 16
    assert config_from_args(_parser().parse_args(["--policy-max-tokens", "128"])).policy_max_tokens == 128
    assert any("--policy-max-tokens" in p for p in DemoConfig(policy_max_tokens=0).problems())
