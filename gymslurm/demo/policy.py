"""The demo Environment Server's policy when it has a model server: one chat completion per episode.

With ``--policy-url URL`` the demo Environment Server asks an OpenAI-compatible server (the demo
model server in the demo stack, or any real one) for its answer instead of drawing it, as a real
Environment Server calls the model under test. The request carries ``seed`` (an integer drawn from
the rollout id and attempt, as OpenAI's API types it: vllm-router refuses a string with a 422), so
a deterministic server answers a retry afresh and a rerun the same. A failed call
(refused, reset, timed out, a 5xx, no text) is returned as the problem, which the server reports
as a non-terminal ``provider_unavailable`` failure.
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx

from gymslurm.demo.model import completion_text

_clients: dict[int, httpx.AsyncClient] = {}
TIMEOUT_S = 120.0


def _client() -> httpx.AsyncClient:
    import asyncio

    loop = id(asyncio.get_running_loop())
    if loop not in _clients:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        _clients[loop] = httpx.AsyncClient(timeout=TIMEOUT_S, limits=limits, trust_env=False)
    return _clients[loop]


def openai_seed(text: str) -> int:
    """An integer seed for ``text`` (rollout id and attempt), stable across processes and runs."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=6).digest(), "big")


async def ask(
    policy_url: str, model_name: str, question: str, seed: str, *, max_tokens: int = 16
) -> tuple[str, str | None]:
    """The model's answer to ``question`` (at most ``max_tokens``), or ``("", problem)`` when the call
    failed."""
    body: dict[str, Any] = {
        "model": model_name,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": openai_seed(seed),
    }
    url = policy_url.rstrip("/") + "/v1/chat/completions"
    try:
        reply = await _client().post(url, json=body)
    except httpx.HTTPError as error:
        return "", f"{type(error).__name__} calling {url}: {error}"
    if reply.status_code != 200:
        return "", f"HTTP {reply.status_code} from {url}: {reply.text[:200]}"
    try:
        text = completion_text(reply.json())
    except ValueError:
        text = None
    if text is None:
        return "", f"no completion text in the reply of {url}"
    return text.strip(), None
