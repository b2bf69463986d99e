"""One JSON POST to a notification webhook (the launcher's ``notify:``), its failure said without its URL.

A webhook URL is a secret (whoever holds it can post to the channel), so nothing here ever puts
the URL into a message: a failure is described by its kind (``HTTP 503``, ``connection refused``,
``timed out after 5s``). The caller decides about retries; this module only speaks HTTP.
"""

from __future__ import annotations

from typing import Any

import httpx


def post_webhook(url: str, body: dict[str, Any], timeout_s: float) -> str | None:
    """POST ``body`` as JSON; None when the receiver answered 2xx, else what went wrong (no URL in it)."""
    try:
        reply = httpx.post(url, json=body, timeout=timeout_s, follow_redirects=False)
    except httpx.TimeoutException:
        return f"timed out after {timeout_s:g}s"
    except httpx.ConnectError as error:
        cause = error.__cause__ or error.__context__
        reason = getattr(cause, "strerror", None) or type(cause or error).__name__
        return f"cannot connect ({reason})"
    except (httpx.HTTPError, ValueError) as error:
        return f"request failed ({type(error).__name__})"
    if 200 <= reply.status_code < 300:
        return None
    return f"HTTP {reply.status_code}"
