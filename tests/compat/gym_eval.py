"""NeMo Gym's own ``gym eval`` commands against a started stack, spelled once for the compat modules.

nemogym.py starts and stops the stack (and is at the module size limit); what the tests ask of it
lives here, so ``gym eval aggregate``'s arguments and the file it writes are read the same way in each.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.compat.nemogym import HEAD_PORT, Stack

# NeMo Gym's way to reach a running head server (``+head_server.host/port``) from ``gym eval``.
HEAD_SERVER = ["+head_server.host=127.0.0.1", f"+head_server.port={HEAD_PORT}"]


def gym_aggregate(stack: Stack, input_glob: Path, output: Path) -> list[dict[str, Any]]:
    """NeMo Gym's ``gym eval aggregate`` on ``input_glob``: its ``ng_aggregate_metrics.json`` entries."""
    done = stack.gym_command(
        "eval", "aggregate", *HEAD_SERVER, f"+input_glob={input_glob}", f"+output_jsonl_fpath={output}"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    entries: list[dict[str, Any]] = json.loads((output.parent / "ng_aggregate_metrics.json").read_text())
    return entries
