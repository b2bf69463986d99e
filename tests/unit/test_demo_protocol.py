"""Hand-written validation of /run and /aggregate_metrics bodies (PROTOCOL.md rules, FastAPI-style 422)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gymslurm.demo.messages import Episode
from gymslurm.demo.protocol import Invalid, invalid_reply, parse_json, validate_aggregate, validate_run
from gymslurm.records import EpisodeId

VALID: dict[str, Any] = {
    "episode_id": {"rollout_id": "arith-17", "attempt": 2},
    "task": {"task_id": {"taskset": "arith", "task_id": "17"}, "task_input": {"a": 17, "b": 25, "op": "+"}},
}


def body_with(path: tuple[str, ...], value: object) -> dict[str, Any]:
    """VALID with the field at ``path`` set to ``value`` (or removed when value is ...)."""
    body = copy.deepcopy(VALID)
    node = body
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return body


def error_locs(body: object) -> list[list[Any]]:
    """The 422 error locations validate_run reports for ``body``."""
    result = validate_run(body)
    assert isinstance(result, Invalid)
    return [detail["loc"] for detail in result.details]


def test_valid_request_becomes_an_episode() -> None:
    """A valid body becomes an Episode with its ids and input."""
    episode = validate_run(VALID)
    assert isinstance(episode, Episode)
    assert (episode.rollout_id, episode.attempt, episode.task_id["task_id"]) == ("arith-17", 2, "17")


def test_attempt_defaults_to_zero() -> None:
    """A missing attempt is 0 and the normalized episode id carries it."""
    episode = validate_run(body_with(("episode_id", "attempt"), ...))
    assert isinstance(episode, Episode)
    assert episode.episode_id == {"rollout_id": "arith-17", "attempt": 0}


def test_extra_task_input_fields_are_accepted() -> None:
    """task_input is the environment's own input: fields added by prompt templates are ignored."""
    assert isinstance(validate_run(body_with(("task", "task_input", "prompt"), "x")), Episode)


@pytest.mark.parametrize(
    ("path", "value", "loc"),
    [
        (("extra",), 1, ["body", "extra"]),
        (("episode_id", "extra"), 1, ["body", "episode_id", "extra"]),
        (("task", "extra"), 1, ["body", "task", "extra"]),
        (("task", "task_id", "extra"), 1, ["body", "task", "task_id", "extra"]),
        (("episode_id",), ..., ["body", "episode_id"]),
        (("task",), ..., ["body", "task"]),
        (("episode_id", "rollout_id"), ..., ["body", "episode_id", "rollout_id"]),
        (("episode_id", "rollout_id"), "", ["body", "episode_id", "rollout_id"]),
        (("episode_id", "rollout_id"), "-starts-with-dash", ["body", "episode_id", "rollout_id"]),
        (("episode_id", "rollout_id"), "has space", ["body", "episode_id", "rollout_id"]),
        (("episode_id", "rollout_id"), "arith-17-a3", ["body", "episode_id", "rollout_id"]),
        (("episode_id", "rollout_id"), 17, ["body", "episode_id", "rollout_id"]),
        (("episode_id", "attempt"), -1, ["body", "episode_id", "attempt"]),
        (("episode_id", "attempt"), True, ["body", "episode_id", "attempt"]),
        (("episode_id", "attempt"), "1", ["body", "episode_id", "attempt"]),
        (("episode_id",), [], ["body", "episode_id"]),
        (("task", "task_id"), ..., ["body", "task", "task_id"]),
        (("task", "task_id", "taskset"), "", ["body", "task", "task_id", "taskset"]),
        (("task", "task_id", "task_id"), 17, ["body", "task", "task_id", "task_id"]),
        (("task", "task_input"), ..., ["body", "task", "task_input"]),
        (("task", "task_input"), "17+25", ["body", "task", "task_input"]),
        (("task", "task_input", "a"), "17", ["body", "task", "task_input", "a"]),
        (("task", "task_input", "b"), 2.5, ["body", "task", "task_input", "b"]),
        (("task", "task_input", "op"), "/", ["body", "task", "task_input", "op"]),
        (("task", "task_input", "_demo_fault"), "explode", ["body", "task", "task_input", "_demo_fault"]),
        (
            ("task", "task_input", "_demo_fault_attempts"),
            -1,
            ["body", "task", "task_input", "_demo_fault_attempts"],
        ),
        (("task", "task_input", "_demo_latency_ms"), "5", ["body", "task", "task_input", "_demo_latency_ms"]),
        (
            ("task", "task_input", "_demo_failure_kind"),
            "",
            ["body", "task", "task_input", "_demo_failure_kind"],
        ),
    ],
)
def test_invalid_field_is_reported_at_its_location(
    path: tuple[str, ...], value: object, loc: list[Any]
) -> None:
    """Each schema violation yields exactly one error located at the offending field."""
    assert error_locs(body_with(path, value)) == [loc]


def test_every_problem_is_reported_at_once() -> None:
    """Several violations are all reported, not only the first."""
    body = body_with(("extra",), 1)
    body["episode_id"]["attempt"] = -1
    assert len(error_locs(body)) == 2


def test_non_object_body_is_invalid() -> None:
    """A JSON array body is one error at the body."""
    assert error_locs([1, 2]) == [["body"]]


def test_undecodable_json_is_invalid() -> None:
    """A body that is not JSON is a 422 error, not a crash."""
    data, invalid = parse_json(b"{not json")
    assert data is None
    assert invalid is not None
    assert invalid.details[0]["type"] == "json_invalid"


def test_invalid_reply_is_a_fastapi_style_422() -> None:
    """Errors are sent as HTTP 422 {"detail": [{"loc", "msg", "type"}]}."""
    reply = invalid_reply(Invalid([{"loc": ["body", "x"], "msg": "m", "type": "t"}]))
    assert (reply.status, orjson.loads(reply.body)) == (
        422,
        {"detail": [{"loc": ["body", "x"], "msg": "m", "type": "t"}]},
    )


def test_unknown_field_message_names_the_allowed_fields() -> None:
    """The message for an unknown field lists the fields that are allowed."""
    result = validate_run(body_with(("episode_id", "attempts"), 1))
    assert isinstance(result, Invalid)
    assert "allowed are ['attempt', 'rollout_id']" in result.details[0]["msg"]


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ({"verify_responses": []}, True),
        ({"verify_responses": [{"reward": 1.0}]}, True),
        ({"verify_responses": [1]}, False),
        ({"verify_responses": {}}, False),
        ({}, False),
        ({"verify_responses": [], "extra": 1}, False),
        ([], False),
    ],
)
def test_validate_aggregate(body: object, valid: bool) -> None:
    """/aggregate_metrics takes exactly {"verify_responses": [object, ...]}."""
    assert isinstance(validate_aggregate(body), list) is valid


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(JSON_VALUES)
def test_validation_never_raises_on_any_json(value: object) -> None:
    """Any decoded JSON value is either an Episode or an Invalid with at least one detail."""
    result = validate_run(value)
    assert isinstance(result, Episode) or (isinstance(result, Invalid) and result.details)


@given(st.sampled_from(["a", "op", "_demo_fault", "_demo_fault_attempts", "_demo_latency_ms"]), JSON_VALUES)
def test_validation_never_raises_on_any_task_input_field(field: str, value: object) -> None:
    """Any JSON value in a task_input field is validated without crashing."""
    result = validate_run(body_with(("task", "task_input", field), value))
    assert isinstance(result, Episode | Invalid)


@pytest.mark.parametrize("field", ["op", "_demo_fault"])
@pytest.mark.parametrize("value", [[1], {"x": 1}])
def test_unhashable_enum_values_are_invalid(field: str, value: object) -> None:
    """A list or object where a name is expected is a 422 error, not a crash."""
    assert error_locs(body_with(("task", "task_input", field), value)) == [
        ["body", "task", "task_input", field]
    ]


@given(st.sampled_from(["episode_id", "task"]), JSON_VALUES)
def test_validation_never_raises_on_a_replaced_part(part: str, value: object) -> None:
    """Replacing a part of a valid request by any JSON value never crashes validation."""
    result = validate_run({**VALID, part: value})
    assert isinstance(result, Episode | Invalid)


ROLLOUT_IDS = st.text(alphabet="aZ09._- /-", max_size=8) | st.from_regex(
    r"[A-Za-z0-9][A-Za-z0-9._-]*-a[0-9]{1,2}", fullmatch=True
)


@given(ROLLOUT_IDS, st.integers(-3, 3))
def test_episode_id_rules_agree_with_the_shared_model(rollout_id: str, attempt: int) -> None:
    """For string ids and integer attempts, hand validation accepts exactly what records.EpisodeId accepts."""
    try:
        EpisodeId(rollout_id=rollout_id, attempt=attempt)
        shared_accepts = True
    except ValueError:
        shared_accepts = False
    body = body_with(("episode_id",), {"rollout_id": rollout_id, "attempt": attempt})
    assert isinstance(validate_run(body), Episode) is shared_accepts


@pytest.mark.parametrize("attempt", ["1", True, 1.0])
def test_attempt_is_stricter_than_pydantic_lax_mode(attempt: object) -> None:
    """Deliberately stricter than pydantic's lax mode: "1", true and 1.0 are not attempts."""
    assert error_locs(body_with(("episode_id", "attempt"), attempt)) == [["body", "episode_id", "attempt"]]
