"""The shared record types: episode identity, the environment's failure, the collector's failure record.

These are the on-disk and on-the-wire shapes of ../shared/spec/PROTOCOL.md, validated by pydantic:
unknown fields are rejected, the schema version is checked first, nested identities must agree.
``RolloutFailureRecord`` is stored under ``_ng_failure_record`` in each failure-sidecar row
(docs/formats.md). Pure data: no I/O here.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ROLLOUT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RESERVED_ATTEMPT_SUFFIX = re.compile(r"-a[1-9][0-9]*$")
MAX_FAILURE_REASON = 2000

Stage = Literal["admission", "seed", "agent", "verification", "cleanup"]
Source = Literal["environment", "collector"]
Delivery = Literal["not_sent", "possibly_delivered", "delivered"]
# How an Environment Server is spoken to: the typed episode protocol, or NeMo Gym's legacy agent
# relay (flat rows, a reward reply) and its legacy reply shape.
Protocol = Literal["episode", "legacy_agent", "legacy_reply"]
PROTOCOLS: frozenset[str] = frozenset(get_args(Protocol))
# NeMo Gym's default number of attempts per rollout, for runs and manifests that do not say.
DEFAULT_MAX_ROLLOUT_ATTEMPTS = 3

# The shared failure-kind vocabulary (PROTOCOL.md). Unregistered names are accepted with a warning.
FAILURE_KINDS: frozenset[str] = frozenset(
    {
        "transport_unreachable",
        "transport_peer_drop",
        "transport_timeout",
        "transport_local_resource",
        "agent_run_error",
        "agent_request_failed",
        "agent_timeout",
        "agent_command_not_allowed",
        "judge_failed",
        "judge_unparseable",
        "verifier_error",
        "provider_unavailable",
        "provider_quota_exhausted",
        "provider_oom_killed",
        "session_lost",
        "session_expired",
        "session_release_failed",
        "cancelled",
        "kill_shaped",
        "shutdown",
        "persistence_failed",
        "cohort_incomplete",
        "environment_protocol_violation",
    }
)
ROUTING_CLASS_UNSPECIFIED = "environment_server_failed"
# The `_ng_*` keys a result may carry from older judges; every other `_ng_*` key is the collector's.
LEGACY_JUDGE_MARKERS = frozenset({"_ng_judge_failsafe", "_ng_judge_invalid"})


def rollout_id_problem(rollout_id: object) -> str | None:
    """Why ``rollout_id`` is not a valid capture id, or None when it is."""
    if not isinstance(rollout_id, str) or not rollout_id:
        return "must be a non-empty string"
    if not ROLLOUT_ID_PATTERN.match(rollout_id):
        return f"must match {ROLLOUT_ID_PATTERN.pattern}"
    if RESERVED_ATTEMPT_SUFFIX.search(rollout_id):
        return "must not end with -a<N>: that suffix is reserved for attempt capture keys"
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EpisodeId(_Strict):
    """One execution of one logical rollout: the rollout id and its reserved execution number."""

    rollout_id: str
    attempt: int = Field(default=0, ge=0)

    @field_validator("rollout_id")
    @classmethod
    def _valid_rollout_id(cls, value: str) -> str:
        problem = rollout_id_problem(value)
        if problem:
            raise ValueError(f"rollout_id {value!r} {problem}")
        return value

    @property
    def capture_key(self) -> str:
        """``<rollout_id>`` for attempt 0, ``<rollout_id>-a<N>`` after."""
        return self.rollout_id if self.attempt == 0 else f"{self.rollout_id}-a{self.attempt}"


class TaskId(_Strict):
    taskset: str = Field(min_length=1)
    task_id: str = Field(min_length=1)


class EpisodeFailure(_Strict):
    """The environment's account of a failed episode attempt (the shared ``EpisodeFailure``)."""

    failure_reason: str = Field(max_length=MAX_FAILURE_REASON)
    terminal: bool
    failure_kind: str | None = None
    stage: Stage | None = None


class RolloutFailureRecord(_Strict):
    """A failure as the collector saves it: who saw it, whether the request got there, and what failed."""

    schema_version: Literal[1] = 1
    episode_id: EpisodeId
    run_id: str = Field(min_length=1)
    source: Source
    delivery: Delivery
    failure: EpisodeFailure

    @model_validator(mode="after")
    def _environment_implies_delivered(self) -> RolloutFailureRecord:
        # PROTOCOL.md: "A failure reported by the environment implies delivered"; anything else is an
        # inconsistent record (an environment cannot have reported a request it may not have received).
        if self.source == "environment" and self.delivery != "delivered":
            raise ValueError(
                f"a failure reported by the environment (source: environment) was delivered; "
                f"delivery {self.delivery!r} contradicts it"
            )
        return self

    @property
    def routing_class(self) -> str:
        """The sidecar's ``_ng_failure_class``: the canonical kind, else the generic routing label."""
        return self.failure.failure_kind or ROUTING_CLASS_UNSPECIFIED
