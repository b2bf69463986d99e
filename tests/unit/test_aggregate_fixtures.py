"""A writer of manifest-backed and legacy shard outputs in the on-disk format of docs/formats.md.

Used by the aggregation, health and reverification tests to build runs with a known history
(failures, omissions, masked and unscored results, interruptions, torn tails). Every execution is
reserved before its outcome is appended, as the collector does. No tests here.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from pathlib import Path
from typing import Any

import orjson

TASKSET = "arith"


def _dump(row: dict[str, Any]) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)


def companion(output: Path, suffix: str) -> Path:
    """``<dir>/<stem><suffix>``."""
    return output.with_name(output.stem + suffix)


class ShardBuilder:
    """Builds one run at ``output``: reserve → outcome, like the collector, then ``finish()``."""

    def __init__(
        self, output: Path, rollouts: int | list[str], *, max_attempts: int = 3, run_id: str | None = None
    ) -> None:
        self.output = output
        self.ids = (
            [f"{TASKSET}-{i}" for i in range(rollouts)] if isinstance(rollouts, int) else list(rollouts)
        )
        self.run_id = run_id or f"run-{secrets.token_hex(16)}"
        self.max_attempts = max_attempts
        self.reserved = [0] * len(self.ids)
        self.results: list[bytes] = []
        self.failures: list[bytes] = []
        self.retry_terminal_timeouts = False

    def _stamps(self, rid: str, attempt: int) -> dict[str, Any]:
        index = self.ids.index(rid)
        return {
            "_ng_run_id": self.run_id,
            "_ng_rollout_id": rid,
            "_ng_attempt": attempt,
            "_ng_task_index": index,
            "_ng_rollout_index": 0,
            "task_id": {"taskset": TASKSET, "task_id": str(index)},
        }

    def reserve(self, rid: str) -> int:
        """Reserve the next execution number of a rollout (an interruption if nothing follows)."""
        index = self.ids.index(rid)
        attempt = self.reserved[index]
        self.reserved[index] += 1
        return attempt

    def result(
        self, rid: str, reward: float | None = 1.0, *, masked: bool = False, **extra: Any
    ) -> ShardBuilder:
        """A completed result (``reward=None`` → unscored)."""
        row = {**self._stamps(rid, self.reserve(rid)), "response": {"answer": f"answer-{rid}"}, **extra}
        if reward is not None:
            row["reward"] = reward
        if masked:
            row["mask_sample"] = True
        self.results.append(_dump(row))
        return self

    def failure(
        self,
        rid: str,
        kind: str | None = "agent_run_error",
        *,
        terminal: bool = False,
        delivery: str = "delivered",
        legacy_class: str | None = None,
        **extra: Any,
    ) -> ShardBuilder:
        """A failure record in the sidecar, with its canonical record and routing aliases."""
        attempt = self.reserve(rid)
        failure: dict[str, Any] = {"failure_reason": f"{kind} on {rid}", "terminal": terminal}
        if kind is not None:
            failure["failure_kind"] = kind
        record = {
            "schema_version": 1,
            "episode_id": {"rollout_id": rid, "attempt": attempt},
            "run_id": self.run_id,
            "source": "environment",
            "delivery": delivery,
            "failure": failure,
        }
        row = {
            **self._stamps(rid, attempt),
            "_ng_failure_record": record,
            "_ng_failure_class": kind or "environment_server_failed",
            "_ng_failure_terminal": terminal,
            "_ng_failure_message": failure["failure_reason"],
            **extra,
        }
        if legacy_class:
            row["_ng_failure_legacy_class"] = legacy_class
        self.failures.append(_dump(row))
        return self

    def omit(self, rid: str) -> ShardBuilder:
        """An intentional omission."""
        self.failures.append(_dump({**self._stamps(rid, self.reserve(rid)), "_ng_omitted": True}))
        return self

    def interrupt(self, rid: str) -> ShardBuilder:
        """A reservation whose outcome never arrived."""
        self.reserve(rid)
        return self

    def finish(self, *, torn_tail: bytes = b"") -> Path:
        """Write every file of the run; ``torn_tail`` is appended to the results as an incomplete line."""
        out = self.output
        out.parent.mkdir(parents=True, exist_ok=True)
        inputs = b"".join(
            orjson.dumps(
                {
                    "_ng_rollout_id": rid,
                    "_ng_task_index": i,
                    "_ng_rollout_index": 0,
                    "task_id": {"taskset": TASKSET, "task_id": str(i)},
                    "task_input": {"question": f"{i} + {i}"},
                },
                option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE,
            )
            for i, rid in enumerate(self.ids)
        )
        companion(out, "_materialized_inputs.jsonl").write_bytes(inputs)
        digest = "sha256:" + hashlib.sha256(inputs).hexdigest()
        manifest = {
            "format_version": 2,
            "run_id": self.run_id,
            "state": "ready",
            "created_at": "2026-01-01T00:00:00Z",
            "source_path": "tasks.jsonl",
            "source_digest": digest,
            "inputs_digest": digest,
            "config_digest": digest,
            "rollout_count": len(self.ids),
            "max_rollout_attempts": self.max_attempts,
            "retry_terminal_timeouts": self.retry_terminal_timeouts,
            "identity_verified": True,
            "identity_source": "verified",
            "selection_policy": "latest_allocated",
            "gymslurm_version": "0.1.0",
        }
        companion(out, "_manifest.json").write_bytes(orjson.dumps(manifest))
        header = struct.pack("<8sII Q40s", b"GSRESV\x00\x02", 1, 0, len(self.ids), self.run_id.encode())
        table = struct.pack(f"<{len(self.ids)}I", *self.reserved)
        companion(out, "_reservations.bin").write_bytes(header + table)
        out.write_bytes(b"".join(self.results) + torn_tail)
        companion(out, "_failures.jsonl").write_bytes(b"".join(self.failures))
        return out


def write_legacy(
    output: Path, rows: list[dict[str, Any]], failures: list[dict[str, Any]] | None = None
) -> Path:
    """A legacy run: rows without run ids, no manifest, an optional raw failure sidecar."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(b"".join(_dump(row) for row in rows))
    if failures:
        companion(output, "_failures.jsonl").write_bytes(b"".join(_dump(row) for row in failures))
    return output


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every row of a JSONL file."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
