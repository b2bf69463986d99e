"""The demo benchmark: exact-answer arithmetic, a deterministic "policy" and an exact-match verifier.

Why a fake policy: a newcomer can run a whole evaluation, and the end-to-end tests and benchmarks
can drive a real Environment Server, with no model and no GPU. The policy answers correctly with a
configured probability; whether it does is a pure function of ``(seed, rollout_id, attempt)`` (a
BLAKE2b draw, see :func:`draw`), so reruns and resumes see the same answers, and a retry (a new
attempt) draws afresh like a resampled model would.

Trade-off: the draw hashes the rollout id, not the question, so two rollouts of the same task
(repeats) are independent samples, as they would be with a real model.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterator
from typing import Any, NamedTuple

TASKSET = "arith"
OPERATORS: dict[str, Any] = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}
MAX_OPERAND = 99
DEFAULT_MODEL_NAME = "demo-arith-policy"
VERIFIER_NAME = "exact_match"
# Bump when the grading or the policy's answers change: it is part of the server's configuration text.
BENCHMARK_VERSION = 1

_TWO_64 = float(1 << 64)
_TWO_56 = float(1 << 56)


class Draws(NamedTuple):
    """The independent uniform draws one episode attempt gets: one for faults, one for the policy."""

    fault: float
    policy: float
    wrong_offset: int  # 1..9, the magnitude of a wrong answer's error
    wrong_sign: int  # +1 or -1


def draw(seed: int, rollout_id: str, attempt: int) -> Draws:
    """The deterministic draws of one attempt: same inputs, same draws, on any machine."""
    digest = hashlib.blake2b(f"{seed}\x1f{rollout_id}\x1f{attempt}".encode(), digest_size=16).digest()
    fault = int.from_bytes(digest[:8], "little") / _TWO_64
    policy = int.from_bytes(digest[8:15], "little") / _TWO_56
    last = digest[15]
    return Draws(fault, policy, 1 + last % 9, 1 if last & 0x80 else -1)


def expected_answer(a: int, b: int, op: str) -> str:
    """The exact answer of ``a op b`` as the text the verifier compares."""
    return str(OPERATORS[op](a, b))


def policy_answer(expected: str, accuracy: float, draws: Draws) -> str:
    """The policy's answer: the expected one when the draw falls under ``accuracy``, else a near miss."""
    if draws.policy < accuracy:
        return expected
    return str(int(expected) + draws.wrong_sign * draws.wrong_offset)


def grade(answer: str, expected: str) -> float:
    """The exact-match verifier: 1.0 when the answer text equals the expected text, else 0.0."""
    return 1.0 if answer.strip() == expected else 0.0


def response_object(answer: str) -> dict[str, Any]:
    """The policy's response, shaped like a (tiny) Responses API output."""
    message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]}
    return {"answer": answer, "output": [message]}


def answer_text(response: object) -> str | None:
    """The answer a saved response holds: a string, ``{"answer": str}``, or the text of its output.

    Reads what :func:`response_object` writes and a Responses API output (the first ``output_text``
    of an assistant message); None when the response holds no answer text.
    """
    if isinstance(response, str):
        return response
    if not isinstance(response, dict):
        return None
    answer = response.get("answer")
    if isinstance(answer, str):
        return answer
    output = response.get("output")
    for item in output if isinstance(output, list) else ():
        content = item.get("content") if isinstance(item, dict) else None
        for part in content if isinstance(content, list) else ():
            text = part.get("text") if isinstance(part, dict) else None
            if part.get("type") == "output_text" and isinstance(text, str):
                return text
    return None


def question_text(a: int, b: int, op: str) -> str:
    """The prompt of one task."""
    return f"What is {a} {op} {b}?"


def dataset_rows(n: int, seed: int = 0, with_task_ids: bool = True) -> Iterator[dict[str, Any]]:
    """N dataset rows, deterministic in ``seed``; without task ids the collector derives them."""
    rng = random.Random(seed)
    ops = sorted(OPERATORS)
    for index in range(n):
        a, b, op = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND), rng.choice(ops)
        task_input = {"question": question_text(a, b, op), "a": a, "b": b, "op": op}
        if with_task_ids:
            yield {"task_id": {"taskset": TASKSET, "task_id": str(index)}, "task_input": task_input}
        else:
            yield {"task_input": task_input}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _task_index(item: dict[str, Any]) -> object:
    for key in ("_ng_task_index", "task_index"):
        if key in item:
            return item[key]
    return None


def aggregate_metrics(verify_responses: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``/aggregate_metrics`` reply: reward statistics over scored, unmasked items, flat keys.

    Masked items and items without a numeric reward are counted but excluded from the means, so a
    placeholder is never scored. Groups are keyed by the item's task index (``_ng_task_index`` or
    ``task_index``); items without one are left out of ``group_level_metrics`` only.
    """
    rewards: list[float] = []
    groups: dict[object, list[float]] = {}
    masked = unscored = 0
    for item in verify_responses:
        reward = _number(item.get("reward"))
        if item.get("mask_sample") is True:
            masked += 1
        elif reward is None:
            unscored += 1
        else:
            rewards.append(reward)
            index = _task_index(item)
            if index is not None and not isinstance(index, dict | list):
                groups.setdefault(index, []).append(reward)
    agent = _reward_stats(rewards)
    agent.update(
        {"num_verify_responses": len(verify_responses), "num_masked": masked, "num_unscored": unscored}
    )
    key = {name: agent[name] for name in ("mean/reward", "accuracy", "num_scored")}
    return {"agent_metrics": agent, "key_metrics": key, "group_level_metrics": _group_metrics(groups)}


def _reward_stats(rewards: list[float]) -> dict[str, Any]:
    count = len(rewards)
    if not count:
        return {"num_scored": 0, "mean/reward": None, "std/reward": None, "accuracy": None}
    mean = sum(rewards) / count
    variance = (
        sum((reward - mean) * (reward - mean) for reward in rewards) / count
    )  # inf, never OverflowError
    return {
        "num_scored": count,
        "mean/reward": mean,
        "std/reward": math.sqrt(variance),
        "min/reward": min(rewards),
        "max/reward": max(rewards),
        "accuracy": sum(1 for reward in rewards if reward >= 1.0) / count,
    }


def _group_order(item: tuple[object, list[float]]) -> tuple[bool, int, str]:
    index = item[0]
    return (False, index, "") if isinstance(index, int) else (True, 0, str(index))


def _group_metrics(groups: dict[object, list[float]]) -> list[dict[str, Any]]:
    rows = []
    for index, rewards in sorted(groups.items(), key=_group_order):
        rows.append(
            {
                "task_index": index,
                "num_samples": len(rewards),
                "mean/reward": sum(rewards) / len(rewards),
                f"pass@{len(rewards)}": 1.0 if max(rewards) >= 1.0 else 0.0,
            }
        )
    return rows
