"""The demo Environment Server's application: its configuration and the answer to every request.

``DemoApp.handle(method, path, body) -> Reply`` is the whole server minus sockets: it routes,
validates, runs the policy, grades, injects faults and returns the bytes to send together with the
actions to perform (wait ``delay_s``, or ``die``); gymslurm/demo/http.py performs them. The only
state is the request counters (``--die-after`` needs the ``/run`` one; the shutdown summary reports
both, which is how a test sees that re-grading never ran the policy) and per-outcome tallies.

``POST /verify`` grades a saved answer without running the policy (judge-only re-grading,
docs/aggregation.md "Re-grading protocol"): the same validation as ``/run`` plus ``response``, the
same reply shapes. Only the task field ``_demo_verify_fault`` injects faults there; ``/run``'s
``_demo_fault``, rates, latency and ``--die-after`` never apply, so a task scripted to fail judging
on ``/run`` can be re-graded successfully.

``GET /global_config_dict_yaml`` answers like a NeMo Gym head server: the resolved configuration as
YAML, JSON-encoded as a string (``yaml.safe_load(response.json())`` reads it). It holds only what
decides the *measurement* (benchmark and its version, model name, policy accuracy, seed, verifier):
a collector may put it in its identity, and a resume must not be refused because the server came
back on another port or with other fault injection. Faults and latency are deliberately left out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymslurm.demo.arith import (
    BENCHMARK_VERSION,
    DEFAULT_MODEL_NAME,
    TASKSET,
    VERIFIER_NAME,
    aggregate_metrics,
    draw,
    expected_answer,
    grade,
    policy_answer,
    question_text,
    response_object,
)
from gymslurm.demo.faults import (
    VERIFY_FAULT_FIELD,
    Rates,
    choose_fault,
    delay_seconds,
    episode_reply,
    provider_failure,
    rates_problem,
    result_reply,
    verify_fault_reply,
)
from gymslurm.demo.messages import Episode, Reply, json_reply
from gymslurm.demo.protocol import (
    Invalid,
    invalid_reply,
    parse_json,
    validate_aggregate,
    validate_run,
    validate_verify,
)

DEFAULT_ACCURACY = 0.8
SERVER_NAME = "gymslurm_demo"


@dataclass(frozen=True)
class DemoConfig:
    """Everything that decides how the demo server answers."""

    model_name: str = DEFAULT_MODEL_NAME
    accuracy: float = DEFAULT_ACCURACY
    seed: int = 0
    rates: Rates = ()
    latency_ms: float = 0.0
    die_after: int | None = None  # answer this many /run requests, then die on the next one
    policy_url: str | None = None  # an OpenAI-compatible model server answering for the policy
    policy_turns: int = 1  # model calls per episode (an agentic rollout of several turns): the last answers
    policy_max_tokens: int = 16  # each call's max_tokens: how much of a call is the model's own work
    api_key: str = field(default="", repr=False)  # its own key (DEMO_API_KEY): rejected_key echoes it

    def problems(self) -> list[str]:
        """What is wrong with this configuration, one sentence each; empty when it is usable."""
        problems = []
        if not (math.isfinite(self.accuracy) and 0.0 <= self.accuracy <= 1.0):
            problems.append(f"--accuracy must be within [0, 1], got {self.accuracy}")
        if not self.model_name:
            problems.append("--model-name must not be empty")
        rates = rates_problem(self.rates)
        if rates:
            problems.append(rates)
        if not (math.isfinite(self.latency_ms) and self.latency_ms >= 0):
            problems.append(f"--latency-ms must be >= 0, got {self.latency_ms}")
        if self.policy_turns < 1:
            problems.append(f"--policy-turns must be >= 1, got {self.policy_turns}")
        if self.policy_max_tokens < 1:
            problems.append(f"--policy-max-tokens must be >= 1, got {self.policy_max_tokens}")
        if self.die_after is not None and self.die_after < 0:
            problems.append(f"--die-after must be >= 0, got {self.die_after}")
        return problems


def config_dict(config: DemoConfig) -> dict[str, Any]:
    """The resolved configuration served at /global_config_dict_yaml (semantic settings only)."""
    return {
        SERVER_NAME: {
            "resources_servers": {
                SERVER_NAME: {
                    "entrypoint": "gymslurm.demo.server",
                    "benchmark": TASKSET,
                    "benchmark_version": BENCHMARK_VERSION,
                    "verifier": VERIFIER_NAME,
                }
            }
        },
        "policy_model": {
            "responses_api_models": {
                "demo_policy": {"model": config.model_name, "accuracy": config.accuracy, "seed": config.seed}
            }
        },
    }


def config_yaml(config: DemoConfig) -> str:
    """The configuration as YAML text, keys in a fixed order (the same config, the same text)."""
    import yaml

    return str(yaml.safe_dump(config_dict(config), sort_keys=True, default_flow_style=False))


@dataclass
class DemoApp:
    """Routes requests to replies; holds the request counters and the outcome tallies."""

    config: DemoConfig
    run_requests: int = 0
    verify_requests: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    verify_outcomes: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._routes: dict[tuple[bytes, bytes], Callable[[bytes], Reply]] = {
            (b"POST", b"/run"): self.run,
            (b"POST", b"/verify"): self.verify,
            (b"POST", b"/aggregate_metrics"): self.aggregate,
            (b"GET", b"/health"): lambda body: self._health,
            (b"GET", b"/global_config_dict_yaml"): lambda body: self._config,
        }
        self._paths = {path for _, path in self._routes}
        self._health = json_reply(200, {"status": "ok", "server": SERVER_NAME})
        self._config = json_reply(200, config_yaml(self.config))

    def handle(self, method: bytes, target: bytes, body: bytes) -> Reply:
        """The reply to one HTTP request (``target`` may carry a query string, which is ignored)."""
        path = target.split(b"?", 1)[0]
        route = self._routes.get((method, path))
        if route is not None:
            return route(body)
        if path in self._paths:
            allowed = b", ".join(m for m, p in self._routes if p == path)
            return json_reply(405, {"detail": "Method Not Allowed"}, headers=((b"Allow", allowed),))
        return json_reply(404, {"detail": "Not Found"})

    def run(self, body: bytes) -> Reply:
        """``POST /run``: one episode attempt, graded, unless a fault says otherwise."""
        self.run_requests += 1
        die_after = self.config.die_after
        if die_after is not None and self.run_requests > die_after:
            self.outcomes["die"] += 1
            return Reply(0, b"", die=True)
        data, bad = parse_json(body)
        episode = bad or validate_run(data)
        if isinstance(episode, Invalid):
            self.outcomes["invalid"] += 1
            return invalid_reply(episode)
        if self.config.policy_url is not None:
            return Reply(0, b"", later=self._ask_policy(episode))
        return self._episode(episode, None)

    async def _ask_policy(self, episode: Episode) -> Reply:
        """Ask the model server for the policy's answer, then answer like :meth:`run`."""
        from gymslurm.demo.policy import ask

        question = question_text(episode.task_input["a"], episode.task_input["b"], episode.task_input["op"])
        assert self.config.policy_url is not None
        seed = f"{episode.rollout_id}/{episode.attempt}"
        for _turn in range(
            self.config.policy_turns
        ):  # each turn holds a model server slot, as an agent's does
            answer, problem = await ask(
                self.config.policy_url,
                self.config.model_name,
                question,
                seed,
                max_tokens=self.config.policy_max_tokens,
            )
            if problem is not None:
                break
        if problem is not None:
            self.outcomes["provider_unavailable"] += 1
            return provider_failure(episode, f"the policy model server failed: {problem}")
        return self._episode(episode, answer)

    def _episode(self, episode: Episode, model_answer: str | None) -> Reply:
        task_input, attempt = episode.task_input, episode.attempt
        draws = draw(self.config.seed, episode.rollout_id, attempt)
        fault = choose_fault(task_input, attempt, draws.fault, self.config.rates)
        expected = expected_answer(task_input["a"], task_input["b"], task_input["op"])
        answer = (
            policy_answer(expected, self.config.accuracy, draws) if model_answer is None else model_answer
        )
        reward = grade(answer, expected)
        result = {"reward": reward, "response": response_object(answer), "expected_answer": expected}
        reply = episode_reply(fault, episode, answer, expected, result, api_key=self.config.api_key)
        self.outcomes[fault or ("correct" if reward else "wrong")] += 1
        delay = delay_seconds(fault, task_input, self.config.latency_ms)
        return reply._replace(delay_s=delay) if delay else reply

    def verify(self, body: bytes) -> Reply:
        """``POST /verify``: grade the saved answer in ``response``; the policy is never asked."""
        self.verify_requests += 1
        data, bad = parse_json(body)
        request = bad or validate_verify(data)
        if isinstance(request, Invalid):
            self.verify_outcomes["invalid"] += 1
            return invalid_reply(request)
        episode = request.episode
        fault = episode.task_input.get(VERIFY_FAULT_FIELD)
        if fault is not None:
            self.verify_outcomes[fault] += 1
            return verify_fault_reply(fault, episode)
        task_input = episode.task_input
        expected = expected_answer(task_input["a"], task_input["b"], task_input["op"])
        reward = grade(request.answer, expected)
        self.verify_outcomes["correct" if reward else "wrong"] += 1
        result = {"reward": reward, "response": request.response, "expected_answer": expected}
        return result_reply(episode, result)

    def aggregate(self, body: bytes) -> Reply:
        """``POST /aggregate_metrics``: reward statistics over the given verify responses."""
        data, bad = parse_json(body)
        items = bad or validate_aggregate(data)
        if isinstance(items, Invalid):
            return invalid_reply(items)
        return json_reply(200, aggregate_metrics(items))
