"""Fake OpenAI Responses endpoint on loopback: the model behind NeMo Gym's real openai_model server.

POST /v1/responses: if the input holds no function_call_output yet, answer one get_weather function
call (city "sf"); otherwise answer one assistant message. GET /v1/models lists one model.
Deterministic, no model: it only lets NeMo Gym's own agent, resources and environment servers run.
    python fake_openai.py PORT
"""

import json
import sys
import time
import uuid

from aiohttp import web

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 18300


def response(body: dict, output: list) -> dict:
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
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }


async def responses(request: web.Request) -> web.Response:
    body = await request.json()
    items = body.get("input", [])
    items = items if isinstance(items, list) else []
    answered = any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items)
    if not answered and body.get("tools"):
        out = [{"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:12]}",
                "call_id": f"call_{uuid.uuid4().hex[:12]}", "name": "get_weather",
                "arguments": json.dumps({"city": "sf"}), "status": "completed"}]
    else:
        out = [{"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "It is cold in sf.", "annotations": []}]}]
    return web.json_response(response(body, out))


async def models(request: web.Request) -> web.Response:
    listing = [{"id": "fake", "object": "model", "owned_by": "bench"}]
    return web.json_response({"object": "list", "data": listing})


app = web.Application()
app.router.add_post("/v1/responses", responses)
app.router.add_get("/v1/models", models)
web.run_app(app, host="127.0.0.1", port=PORT, print=None, access_log=None)
