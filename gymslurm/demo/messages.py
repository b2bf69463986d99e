"""The values the demo server's layers hand each other: a validated episode and a reply to send.

Kept apart so that validation, fault injection and the application share them without importing
each other. Pure data.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

JSON = b"application/json"
TEXT = b"text/plain; charset=utf-8"


class Reply(NamedTuple):
    """What the HTTP layer sends: a status, a body, and the actions it performs (wait, die, hang).

    ``later``: an awaitable giving the reply to send instead, once done (the demo Environment
    Server waiting for its model server); ``hang``: stop answering anything (a hung process).
    """

    status: int
    body: bytes
    content_type: bytes = JSON
    delay_s: float = 0.0
    die: bool = False
    headers: tuple[tuple[bytes, bytes], ...] = ()
    hang: bool = False
    later: Any = None


class Episode(NamedTuple):
    """A validated ``POST /run`` request."""

    episode_id: dict[str, Any]  # normalized: {"rollout_id", "attempt"} with the default filled in
    task_id: dict[str, Any]
    task_input: dict[str, Any]

    @property
    def rollout_id(self) -> str:
        """The logical rollout id."""
        return str(self.episode_id["rollout_id"])

    @property
    def attempt(self) -> int:
        """The execution number of this request."""
        return int(self.episode_id["attempt"])


class VerifyRequest(NamedTuple):
    """A validated ``POST /verify`` request: the episode to grade and the answer text it carries."""

    episode: Episode
    response: Any  # as sent, echoed in the graded result
    answer: str


def json_reply(status: int, payload: object, **actions: Any) -> Reply:
    """A JSON reply (orjson-encoded)."""
    return Reply(status, orjson.dumps(payload), JSON, **actions)
