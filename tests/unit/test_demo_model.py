"""The demo model server's application: OpenAI-shaped answers, deterministic, with its faults."""

from __future__ import annotations

import orjson
import pytest

from gymslurm.demo.model import PROBE_ANSWER, ModelApp, ModelConfig, completion_text


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
        (ModelConfig(hang_after=0), 1, "hang"),
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
    got = "die" if reply.die else "hang" if reply.hang else reply.status
    assert got == expect


def test_bad_requests_and_unknown_routes_get_openai_shaped_errors() -> None:
    """No user message is a 400, an unknown path a 404, both with an error object."""
    app = ModelApp(ModelConfig())
    bad = app.handle(b"POST", b"/v1/chat/completions", b'{"messages": []}')
    missing = app.handle(b"GET", b"/v2/nothing", b"")
    assert (bad.status, missing.status) == (400, 404)
    assert "error" in orjson.loads(bad.body) and "error" in orjson.loads(missing.body)
