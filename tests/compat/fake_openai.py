"""A fake OpenAI Responses endpoint on loopback: the model behind NeMo Gym's real ``openai_model`` server.

``POST /v1/responses``: while the input holds no ``function_call_output``, answer one ``get_weather``
function call (city "sf"); then answer one assistant message. ``GET /v1/models`` lists one model.
Deterministic, no model and no GPU: it only lets NeMo Gym's own agent, resources and environment
servers run an episode. Standard library only, so any Python runs it::

    python fake_openai.py PORT [HOST]

HOST defaults to 127.0.0.1; the Slurm test gives the host's bridge address, which every node reaches.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def response(body: dict[str, Any], output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "model": body.get("model", "fake"),
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "total_tokens": 15,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def answer(body: dict[str, Any]) -> dict[str, Any]:
    items = body.get("input", [])
    items = items if isinstance(items, list) else []
    answered = any(isinstance(item, dict) and item.get("type") == "function_call_output" for item in items)
    if not answered and body.get("tools"):
        call = {
            "type": "function_call",
            "id": _id("fc"),
            "call_id": _id("call"),
            "name": "get_weather",
            "arguments": json.dumps({"city": "sf"}),
            "status": "completed",
        }
        return response(body, [call])
    text = {"type": "output_text", "text": "It is cold in sf.", "annotations": []}
    message = {
        "type": "message",
        "id": _id("msg"),
        "role": "assistant",
        "status": "completed",
        "content": [text],
    }
    return response(body, [message])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, value: object) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path.rstrip("/") == "/v1/responses":
            self._send(200, answer(body))
        else:
            self._send(404, {"error": f"no route {self.path}"})

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            model = {"id": "fake", "object": "model", "owned_by": "bench"}
            self._send(200, {"object": "list", "data": [model]})
        else:
            self._send(404, {"error": f"no route {self.path}"})

    def log_message(self, *args: object) -> None:
        """Quiet."""


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 18300
    host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
    ThreadingHTTPServer((host, port), Handler).serve_forever()
