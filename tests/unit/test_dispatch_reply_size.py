"""Replies within bounds (issue 10, section 4): a ``/run`` reply over ``max_reply_bytes`` is a
recorded, retryable failure of its own kind (``gymslurm:reply_too_large``), never a result, and is
not read whole: a declared length over the limit is refused before its body is read, and chunked or
close-framed bodies stop at the limit. Real loopback servers (tests/unit/test_dispatch.py's).
"""

from __future__ import annotations

import pytest

from gymslurm.dispatch import Completed, Failed
from gymslurm.dispatch.classify import REPLY_TOO_LARGE
from gymslurm.settings import CollectSettings
from tests.unit.test_dispatch import ok_response, run_against

LIMIT = 64 * 1024


def _padded(body: bytes, size: int) -> bytes:
    """The OK answer with its JSON padded to about ``size`` bytes (a huge ``result`` field)."""
    content = ok_response(body).split(b"\r\n\r\n", 1)[1]
    content = content[:-1] + b', "pad": "' + b"x" * size + b'"}'
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(content), content)


def _chunked(answer: bytes) -> bytes:
    content = answer.split(b"\r\n\r\n", 1)[1]
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(content[i : i + 4096]), content[i : i + 4096])
        for i in range(0, len(content), 4096)
    )
    return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"


def _close_framed(answer: bytes) -> bytes:
    return b"HTTP/1.0 200 OK\r\n\r\n" + answer.split(b"\r\n\r\n", 1)[1]


FRAMINGS = {"content-length": lambda a: a, "chunked": _chunked, "close-framed": _close_framed}


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_a_reply_over_the_limit_is_a_failure_of_its_own_kind(framing: str) -> None:
    """Over max_reply_bytes, whatever the framing: a delivered, retryable gymslurm:reply_too_large failure."""
    (outcome,), _ = run_against(
        lambda body: FRAMINGS[framing](_padded(body, 4 * LIMIT)), max_reply_bytes=LIMIT
    )
    assert isinstance(outcome, Failed)
    failure = outcome.record.failure
    assert (failure.failure_kind, failure.terminal, outcome.record.delivery) == (
        REPLY_TOO_LARGE,
        False,
        "delivered",
    )
    assert "max_reply_bytes" in failure.failure_reason


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_a_reply_under_the_limit_is_a_result(framing: str) -> None:
    """Just under the limit the reply is read and classified as usual."""
    (outcome,), _ = run_against(
        lambda body: FRAMINGS[framing](_padded(body, LIMIT // 2)), max_reply_bytes=LIMIT
    )
    assert isinstance(outcome, Completed)


def test_the_connection_of_a_refused_reply_is_not_reused() -> None:
    """After an oversized reply (left unread) the next request opens a fresh connection."""
    answers = iter([4 * LIMIT, 10])
    outcomes, connections = run_against(
        lambda body: _padded(body, next(answers)), requests=2, max_reply_bytes=LIMIT
    )
    assert isinstance(outcomes[0], Failed) and isinstance(outcomes[1], Completed)
    assert connections == 2


def test_the_default_limit_is_64_mib_and_configurable() -> None:
    """max_reply_bytes defaults to 64 MiB (docs/collector.md) and is a collect setting."""
    settings = CollectSettings.model_validate(
        {"input_jsonl_fpath": "i", "output_jsonl_fpath": "o", "environment_server_url": "http://h:1"}
    )
    assert settings.max_reply_bytes == 64 * 1024 * 1024
