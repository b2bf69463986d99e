"""The demo model server's application: a deterministic OpenAI-compatible "model" with faults.

``gymslurm demo-model-server`` stands in for vLLM / SGLang / llama.cpp in the demo stack: the demo
Environment Server asks it for its policy's answer (``--policy-url``), as a real Environment Server
asks the model under test. It speaks the part of the OpenAI API that servers and probes use:

- ``POST /v1/chat/completions`` and ``POST /v1/completions``: the answer to an arithmetic question
  (``What is A op B?``, the last user message or the prompt) — correct with probability
  ``accuracy``, else a near miss, decided by a BLAKE2b draw over ``(seed, prompt, request seed)``
  so the same request always gets the same answer; anything else gets ``pong``, which is what a
  probe's one-token request sees;
- ``POST /v1/responses``: the same answer in the OpenAI Responses shape (``input`` a string or a
  list of messages), which NeMo Gym's ``openai_model`` calls;
- ``GET /v1/models`` (the served model), ``GET /health`` (200 once listening), ``GET /metrics``
  (Prometheus text with vLLM 0.32's names and labels: ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, ``vllm:request_success_total`` by
  ``finished_reason``, each with ``engine="0"`` and ``model_name``), so load-aware clients and
  routers can be tried against it.

A capacity, to behave like a batching server under load: with ``slots`` N at most N completions
are served at once and the rest wait in a FIFO queue (``num_requests_waiting``); a served
request takes ``latency_ms × (1 + load_factor × (running − 1) / N)``, so throughput grows with
concurrency up to N and only latency grows past it. Without ``slots`` every request is served
at once after ``latency_ms`` (the behaviour of earlier releases).

Faults, to rehearse what real model servers do: ``latency_ms`` before each completion;
``http500_rate`` (an "engine dead" 500, a deterministic draw per request); ``die_after`` N
completions (the process exits, like a CUDA OOM); ``hang_after`` N completions (the engine wedges:
completion N+1 and every later one are never answered, while ``/health`` still says 200 and
``/metrics`` still answers with the load it last had, as a real vLLM does with its EngineCore
stopped, checked in tests/vllm/; a whole process stopped is SIGSTOP's to rehearse); slow start is
the CLI's ``--slow-start-s`` (it listens only after that long, like a model loading its weights).
Across nodes (``ranks``: the head of ``--nodes N``), every completion needs every worker rank's
part (gymslurm/demo/ranks.py).

``ModelApp.handle(method, path, body) -> Reply`` is pure apart from its request counter; the HTTP
layer (gymslurm/demo/http.py) performs the reply's actions (wait, die, hang).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import sys
from dataclasses import dataclass
from typing import Any

import orjson

from gymslurm.demo.arith import DEFAULT_MODEL_NAME, OPERATORS, expected_answer
from gymslurm.demo.messages import Reply, json_reply
from gymslurm.demo.ranks import RankGroup

# The demo stack's one policy name: what the demo Environment Server asks for by default, so the
# two servers agree without flags (a real vLLM refuses a name it does not serve, and so does this one).
DEFAULT_MODEL = DEFAULT_MODEL_NAME
PROBE_ANSWER = "pong"
_QUESTION = re.compile(r"What is (-?\d+) ([+*-]) (-?\d+)\?")
_TWO_56 = float(1 << 56)


@dataclass(frozen=True)
class ModelConfig:
    """How the demo model answers."""

    model_name: str = DEFAULT_MODEL
    accuracy: float = 0.8
    seed: int = 0
    latency_ms: float = 0.0
    http500_rate: float = 0.0
    die_after: int | None = None
    hang_after: int | None = None
    slots: int | None = None
    load_factor: float = 1.0

    def problems(self) -> list[str]:
        """What is wrong with this configuration, one sentence each."""
        problems = []
        for name in ("accuracy", "http500_rate"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                problems.append(f"--{name.replace('_', '-')} must be within [0, 1], got {value}")
        if not (math.isfinite(self.latency_ms) and self.latency_ms >= 0):
            problems.append(f"--latency-ms must be >= 0, got {self.latency_ms}")
        for name in ("die_after", "hang_after"):
            value = getattr(self, name)
            if value is not None and value < 0:
                problems.append(f"--{name.replace('_', '-')} must be >= 0, got {value}")
        if self.slots is not None and self.slots < 1:
            problems.append(f"--slots must be >= 1, got {self.slots}")
        if not (math.isfinite(self.load_factor) and self.load_factor >= 0):
            problems.append(f"--load-factor must be >= 0, got {self.load_factor}")
        if not self.model_name:
            problems.append("--model-name must not be empty")
        return problems


def _draw(seed: int, prompt: str, request_seed: object, salt: str) -> tuple[float, int]:
    text = f"{seed}\x1f{prompt}\x1f{request_seed}\x1f{salt}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest[:7], "little") / _TWO_56, digest[7]


def answer(config: ModelConfig, prompt: str, request_seed: object) -> str:
    """The model's answer to ``prompt``: deterministic in (seed, prompt, request seed)."""
    match = _QUESTION.search(prompt)
    if match is None or match.group(2) not in OPERATORS:
        return PROBE_ANSWER
    expected = expected_answer(int(match.group(1)), int(match.group(3)), match.group(2))
    policy, byte = _draw(config.seed, prompt, request_seed, "policy")
    if policy < config.accuracy:
        return expected
    return str(int(expected) + (1 if byte & 0x80 else -1) * (1 + byte % 9))


CHAT, TEXT, RESPONSES = "chat", "text", "responses"
_ENDPOINTS = {b"/v1/chat/completions": CHAT, b"/v1/completions": TEXT, b"/v1/responses": RESPONSES}


def _prompt(body: dict[str, Any], kind: str) -> str | None:
    if kind == TEXT:
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else None
    messages = body.get("messages") if kind == CHAT else body.get("input")
    if kind == RESPONSES and isinstance(messages, str):
        return messages
    if not isinstance(messages, list) or not messages:
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # [{"type": "text" | "input_text", "text": ...}]
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return None


def _error(status: int, message: str, kind: str) -> Reply:
    return json_reply(status, {"error": {"message": message, "type": kind, "code": status}})


def unknown_model(served: str, body: dict[str, Any]) -> Reply | None:
    """vLLM's 404 for a request naming a model it does not serve (its serving layer's ``_check_model``:
    body and status as vLLM 0.32 answers, compared with a real vLLM's in tests/vllm/); no ``model``
    means the served one."""
    requested = body.get("model")
    if not requested or requested == served:
        return None
    message = f"The model `{requested}` does not exist. Valid aliases: {served}."
    error = {"message": message, "type": "NotFoundError", "param": "model"}
    return json_reply(404, {"error": {**error, "code": 404}})


@dataclass
class ModelApp:
    """Routes requests; counts completions (``die_after`` / ``hang_after`` need the count)."""

    config: ModelConfig
    completions: int = 0
    running: int = 0
    waiting: int = 0
    succeeded: int = 0
    wedged: bool = False  # hang_after was reached: no completion is answered any more
    ranks: RankGroup | None = None  # the head of a server across nodes (demo/ranks.py)
    _slots: asyncio.Semaphore | None = None

    def handle(self, method: bytes, target: bytes, body: bytes) -> Reply:
        """The reply to one HTTP request."""
        path = target.split(b"?", 1)[0]
        if method == b"GET" and path == b"/health":
            if self.ranks is not None and not self.ranks.ready:
                return json_reply(503, {"status": f"waiting for worker ranks {self.ranks.waiting_for()}"})
            return json_reply(200, {"status": "ok"})
        if method == b"POST" and path == b"/ranks/register" and self.ranks is not None:
            return self.ranks.register(body)
        if method == b"GET" and path == b"/v1/models":
            model = {"id": self.config.model_name, "object": "model", "owned_by": "gymslurm-demo"}
            return json_reply(200, {"object": "list", "data": [model]})
        if method == b"GET" and path == b"/metrics":
            return Reply(200, self.metrics_text().encode(), content_type=b"text/plain; version=0.0.4")
        if method == b"POST" and path in _ENDPOINTS:
            return self.complete(body, _ENDPOINTS[path])
        return _error(404, f"no route {method.decode()} {path.decode(errors='replace')}", "not_found")

    def metrics_text(self) -> str:
        """The Prometheus exposition of the load, under vLLM 0.32's metric names and labels."""
        name, slots = self.config.model_name, self.config.slots
        usage = self.running / slots if slots else 0.0
        label = f'{{engine="0",model_name="{name}"}}'
        lines = [
            ("vllm:num_requests_running", "gauge", "Requests being served.", label, self.running),
            ("vllm:num_requests_waiting", "gauge", "Requests waiting for a slot.", label, self.waiting),
            ("vllm:kv_cache_usage_perc", "gauge", "Share of the slots in use (1 = full).", label, usage),
            (
                "vllm:request_success_total",
                "counter",
                "Completions answered.",
                f'{{engine="0",finished_reason="stop",model_name="{name}"}}',
                self.succeeded,
            ),
        ]
        out = []
        for metric, kind, help_text, labels, value in lines:
            out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}", f"{metric}{labels} {value}"]
        return "\n".join(out) + "\n"

    def complete(self, raw: bytes, kind: str) -> Reply:
        """One completion, unless a fault says otherwise. A request for another model is refused first,
        by the API server, as vLLM's is: it never reaches the engine (nor its faults)."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _error(400, "the body is not JSON", "invalid_request_error")
        if isinstance(body, dict) and (refused := unknown_model(self.config.model_name, body)):
            return refused
        self.completions += 1
        config, count = self.config, self.completions
        if config.die_after is not None and count > config.die_after:
            return Reply(0, b"", die=True)
        if self.wedged or (config.hang_after is not None and count > config.hang_after):
            return Reply(0, b"", later=self._wedged())
        prompt = _prompt(body, kind) if isinstance(body, dict) else None
        if prompt is None:
            field = {CHAT: "messages (with a user message)", TEXT: "prompt", RESPONSES: "input"}[kind]
            return _error(400, f"the request needs {field}", "invalid_request_error")
        seed = body.get("seed")
        if (
            config.http500_rate
            and _draw(config.seed, prompt, f"{seed}/{count}", "fault")[0] < config.http500_rate
        ):
            return _error(500, "EngineDeadError: the engine loop has stopped (injected)", "server_error")
        reply = json_reply(200, _completion(config.model_name, answer(config, prompt, seed), kind, count))
        if self.ranks is not None:
            if not self.ranks.ready:
                return _error(503, f"waiting for worker ranks {self.ranks.waiting_for()}", "server_error")
            return Reply(0, b"", later=self._served_by_every_rank(reply, prompt))
        if config.slots is None:
            self.succeeded += 1
            return reply._replace(delay_s=config.latency_ms / 1000)
        return Reply(0, b"", later=self._served_in_a_slot(reply))

    async def _wedged(self) -> Reply:
        """Never answer: the engine is wedged (the request is neither running nor waiting in /metrics,
        as vLLM's gauges stand still when its EngineCore is stopped)."""
        if not self.wedged:
            self.wedged = True
            print(
                "gymslurm demo-model-server: injected fault 'hang': the engine is wedged; completions are "
                "never answered, /health and /metrics still are",
                file=sys.stderr,
                flush=True,
            )
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def _served_by_every_rank(self, reply: Reply, prompt: str) -> Reply:
        """Every worker rank's part first: one that does not answer is the engine lost (the head exits,
        as vLLM's does when a worker dies; supervision restarts every rank)."""
        assert self.ranks is not None
        if await self.ranks.parts(prompt) is None:
            print("gymslurm demo-model-server: a worker rank did not answer: engine dead", file=sys.stderr)
            return Reply(0, b"", die=True)
        if self.config.slots is None:
            self.succeeded += 1
            return reply._replace(delay_s=self.config.latency_ms / 1000)
        return await self._served_in_a_slot(reply)

    async def _served_in_a_slot(self, reply: Reply) -> Reply:
        """Wait for a free slot (FIFO), then take the service time the load gives."""
        slots = self.config.slots or 1
        if self._slots is None:
            self._slots = asyncio.Semaphore(slots)
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            load = self.config.load_factor * (self.running - 1) / slots
            await asyncio.sleep(self.config.latency_ms / 1000 * (1 + load))
        finally:
            self.running -= 1
            self._slots.release()
        self.succeeded += 1
        return reply


# OpenAI's ResponseUsage: the two details objects are required (NeMo Gym's openai_model refuses a
# reply without them: its NeMoGymResponse validation, the compat suite).
RESPONSES_USAGE = {
    "input_tokens": 8,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 1,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 9,
}


def _completion(model: str, text: str, kind: str, count: int) -> dict[str, Any]:
    usage = {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}
    if kind == RESPONSES:
        message = {
            "id": f"msg-demo-{count}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return {
            "id": f"resp-demo-{count}",
            "object": "response",
            "created_at": 0,
            "model": model,
            "status": "completed",
            "output": [message],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": RESPONSES_USAGE,
        }
    if kind == CHAT:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }
        kind = "chat.completion"
    else:
        choice, kind = {"index": 0, "text": text, "finish_reason": "stop"}, "text_completion"
    return {
        "id": f"cmpl-demo-{count}",
        "object": kind,
        "created": 0,
        "model": model,
        "choices": [choice],
        "usage": usage,
    }


def completion_text(reply: object) -> str | None:
    """The generated text of a chat completion, completion or Responses reply, or None when it has none."""
    if not isinstance(reply, dict):
        return None
    if reply.get("object") == "response":
        texts = [
            part.get("text")
            for item in reply.get("output") or []
            if isinstance(item, dict)
            for part in item.get("content") or []
            if isinstance(part, dict)
        ]
        joined = "".join(t for t in texts if isinstance(t, str))
        return joined if texts else None
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return text if isinstance(text, str) else None
