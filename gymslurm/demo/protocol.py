"""Hand-written validation of the demo server's request bodies.

Why by hand: pydantic on the hot path costs more than the rest of a request together, and the demo
server must not be what limits a collector at thousands of requests per second. The rules are those
of ../shared/spec/PROTOCOL.md (the ``RunRequest`` of NeMo Gym): unknown fields are rejected, the
rollout id follows :func:`gymslurm.records.rollout_id_problem`, ``attempt`` is an integer >= 0
(default 0), both task ids are non-empty strings. Errors come back as FastAPI-style 422 bodies
(``{"detail": [{"loc", "msg", "type"}]}``) so clients written for NeMo Gym servers read them.

``POST /verify`` (judge-only re-grading) takes the same body plus ``response``, the saved answer:
a string, ``{"answer": str, ...}`` or a Responses-API-like object with an ``output_text``.

``task_input`` is the environment's own input; this benchmark needs integers ``a`` and ``b`` and an
operator ``op``, accepts the ``_demo_*`` fault fields (docs/demo-server.md) and ignores other keys,
so prompt templates may add fields. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from gymslurm.demo.arith import OPERATORS, answer_text
from gymslurm.demo.faults import task_fault_problems
from gymslurm.demo.messages import Episode, Reply, VerifyRequest, json_reply
from gymslurm.records import rollout_id_problem

_RUN_KEYS = frozenset({"episode_id", "task"})
_VERIFY_KEYS = frozenset({"episode_id", "task", "response"})
_EPISODE_KEYS = frozenset({"rollout_id", "attempt"})
_TASK_KEYS = frozenset({"task_id", "task_input"})
_TASK_ID_KEYS = ("taskset", "task_id")
_AGGREGATE_KEYS = frozenset({"verify_responses"})


class Invalid(NamedTuple):
    """A request that breaks the schema: the 422 details, FastAPI style."""

    details: list[dict[str, Any]]


def invalid_reply(invalid: Invalid) -> Reply:
    """The 422 reply for a body that breaks the schema."""
    return json_reply(422, {"detail": invalid.details})


def _error(loc: tuple[Any, ...], msg: str, kind: str) -> dict[str, Any]:
    return {"loc": ["body", *loc], "msg": msg, "type": kind}


def _object(value: object, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    errors.append(_error(loc, "must be a JSON object", "dict_type"))
    return None


def _check_keys(
    value: dict[str, Any],
    allowed: frozenset[str],
    required: tuple[str, ...],
    loc: tuple[Any, ...],
    errors: list[dict[str, Any]],
) -> None:
    keys = value.keys()
    if keys <= allowed and keys >= set(required):  # the common case, in C
        return
    for key in sorted(keys - allowed):
        errors.append(
            _error((*loc, key), f"unknown field {key!r}: allowed are {sorted(allowed)}", "extra_forbidden")
        )
    for key in required:
        if key not in value:
            errors.append(_error((*loc, key), "field required", "missing"))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_json(body: bytes) -> tuple[Any, Invalid | None]:
    """Decode a JSON body; an undecodable body is a 422 like any other schema error."""
    try:
        return orjson.loads(body), None
    except orjson.JSONDecodeError as error:
        return None, Invalid([_error((), f"body is not valid JSON: {error}", "json_invalid")])


def validate_run(body: object) -> Episode | Invalid:
    """Validate a decoded ``POST /run`` body into an :class:`Episode`, or say everything wrong with it."""
    errors: list[dict[str, Any]] = []
    top = _object(body, (), errors)
    if top is None:
        return Invalid(errors)
    _check_keys(top, _RUN_KEYS, ("episode_id", "task"), (), errors)
    return _episode(top, errors)


def validate_verify(body: object) -> VerifyRequest | Invalid:
    """Validate a decoded ``POST /verify`` body: a ``/run`` body plus the ``response`` to grade."""
    errors: list[dict[str, Any]] = []
    top = _object(body, (), errors)
    if top is None:
        return Invalid(errors)
    _check_keys(top, _VERIFY_KEYS, ("episode_id", "task", "response"), (), errors)
    answer = answer_text(top.get("response"))
    if "response" in top and answer is None:
        errors.append(
            _error(
                ("response",),
                "response holds no answer: send a string, {'answer': str} or an object whose output has "
                "an output_text",
                "value_error",
            )
        )
    episode = _episode(top, errors)
    if isinstance(episode, Invalid) or answer is None:
        return Invalid(errors)
    return VerifyRequest(episode, top["response"], answer)


def _episode(top: dict[str, Any], errors: list[dict[str, Any]]) -> Episode | Invalid:
    episode_id = _episode_id(top.get("episode_id"), errors) if "episode_id" in top else None
    task = _object(top["task"], ("task",), errors) if "task" in top else None
    task_id = task_input = None
    if task is not None:
        _check_keys(task, _TASK_KEYS, ("task_id", "task_input"), ("task",), errors)
        task_id = _task_id(task.get("task_id"), errors) if "task_id" in task else None
        task_input = _task_input(task.get("task_input"), errors) if "task_input" in task else None
    if errors or episode_id is None or task_id is None or task_input is None:
        return Invalid(errors)
    return Episode(episode_id, task_id, task_input)


def _episode_id(value: object, errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    loc = ("episode_id",)
    episode = _object(value, loc, errors)
    if episode is None:
        return None
    _check_keys(episode, _EPISODE_KEYS, ("rollout_id",), loc, errors)
    rollout_id = episode.get("rollout_id")
    problem = rollout_id_problem(rollout_id) if "rollout_id" in episode else None
    if problem:
        errors.append(_error((*loc, "rollout_id"), f"rollout_id {rollout_id!r} {problem}", "value_error"))
    attempt = episode.get("attempt", 0)
    if not _is_int(attempt) or attempt < 0:
        errors.append(
            _error((*loc, "attempt"), f"attempt {attempt!r} must be an integer >= 0", "value_error")
        )
    return {"rollout_id": rollout_id, "attempt": attempt}


def _task_id(value: object, errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    loc = ("task", "task_id")
    task_id = _object(value, loc, errors)
    if task_id is None:
        return None
    _check_keys(task_id, frozenset(_TASK_ID_KEYS), _TASK_ID_KEYS, loc, errors)
    for key in _TASK_ID_KEYS:
        part = task_id.get(key)
        if key in task_id and (not isinstance(part, str) or not part):
            errors.append(
                _error((*loc, key), f"{key} must be a non-empty string, got {part!r}", "value_error")
            )
    return task_id


def _task_input(value: object, errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    loc = ("task", "task_input")
    task_input = _object(value, loc, errors)
    if task_input is None:
        return None
    for key in ("a", "b"):
        if not _is_int(task_input.get(key)):
            errors.append(_error((*loc, key), f"{key} must be an integer (the arith benchmark)", "int_type"))
    op = task_input.get("op")
    if not isinstance(op, str) or op not in OPERATORS:
        allowed = sorted(OPERATORS)
        errors.append(_error((*loc, "op"), f"op must be one of {allowed}", "literal_error"))
    for key, message in task_fault_problems(task_input):
        errors.append(_error((*loc, key), message, "value_error"))
    return task_input


def validate_aggregate(body: object) -> list[dict[str, Any]] | Invalid:
    """Validate a decoded ``POST /aggregate_metrics`` body: ``{"verify_responses": [object, ...]}``."""
    errors: list[dict[str, Any]] = []
    top = _object(body, (), errors)
    if top is None:
        return Invalid(errors)
    _check_keys(top, _AGGREGATE_KEYS, ("verify_responses",), (), errors)
    items = top.get("verify_responses")
    if "verify_responses" in top and not isinstance(items, list):
        errors.append(_error(("verify_responses",), "must be a JSON array", "list_type"))
    elif isinstance(items, list):
        for position, item in enumerate(items):
            _object(item, ("verify_responses", position), errors)
    if errors or not isinstance(items, list):
        return Invalid(errors)
    return items
