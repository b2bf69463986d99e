"""Writers of manifest-backed shards (through the store API, as the collector saves) and legacy shards.

Used by the aggregation, health and reverification tests to build runs with a known history
(failures, omissions, masked and unscored results, interruptions, torn tails). Every execution is
reserved before its outcome is appended, as the collector does. No tests here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from gymslurm.records import EpisodeFailure, EpisodeId, RolloutFailureRecord
from gymslurm.store import RunPaths, RunSpec, RunStore

TASKSET = "arith"
DIGEST = "sha256:" + "1" * 64


def _dump(row: dict[str, Any]) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)


def companion(output: Path, suffix: str) -> Path:
    """``<dir>/<stem><suffix>``."""
    return output.with_name(output.stem + suffix)


class ShardBuilder:
    """Builds one run at ``output`` through the store: reserve, then save the outcome, like the collector."""

    def __init__(self, output: Path, rollouts: int | list[str], *, max_attempts: int = 3) -> None:
        self.output = output
        ids = [f"{TASKSET}-{i}" for i in range(rollouts)] if isinstance(rollouts, int) else list(rollouts)
        output.parent.mkdir(parents=True, exist_ok=True)
        inputs = [
            {
                "_ng_rollout_id": rid,
                "_ng_task_index": i,
                "_ng_rollout_index": 0,
                "task_id": {"taskset": TASKSET, "task_id": str(i)},
                "task_input": {"question": f"{i} + {i}"},
            }
            for i, rid in enumerate(ids)
        ]
        self.store = RunStore.create_fresh(
            RunPaths.for_output(output),
            RunSpec(
                source_path="tasks.jsonl",
                source_digest=DIGEST,
                inputs=inputs,
                identity={"model": "m"},
                config_digest=DIGEST,
                max_rollout_attempts=max_attempts,
            ),
        )
        self.ids = ids

    @property
    def run_id(self) -> str:
        return self.store.run_id

    def reserve(self, rid: str) -> int:
        """Reserve the next execution number of a rollout (an interruption if nothing follows)."""
        return self.store.reserve(self.ids.index(rid))

    def result(
        self, rid: str, reward: float | None = 1.0, *, masked: bool = False, **extra: Any
    ) -> ShardBuilder:
        """A completed result (``reward=None`` → unscored)."""
        row: dict[str, Any] = {"response": {"answer": f"answer-{rid}"}, **extra}
        if reward is not None:
            row["reward"] = reward
        if masked:
            row["mask_sample"] = True
        self.store.append_result(self.ids.index(rid), self.reserve(rid), row)
        return self

    def failure(
        self,
        rid: str,
        kind: str | None = "agent_run_error",
        *,
        terminal: bool = False,
        delivery: str = "delivered",
        legacy_class: str | None = None,
        response: Any = None,
        diagnostics: dict[str, Any] | None = None,
    ) -> ShardBuilder:
        """A failure record in the sidecar, with its canonical record and routing aliases."""
        attempt = self.reserve(rid)
        record = RolloutFailureRecord(
            episode_id=EpisodeId(rollout_id=rid, attempt=attempt),
            run_id=self.run_id,
            source="environment" if delivery == "delivered" else "collector",  # environment: delivered
            delivery=delivery,  # type: ignore[arg-type]
            failure=EpisodeFailure(failure_reason=f"{kind} on {rid}", terminal=terminal, failure_kind=kind),
        )
        self.store.append_failure(
            self.ids.index(rid),
            attempt,
            record,
            legacy_class=legacy_class,
            response=response,
            diagnostics=diagnostics,
        )
        return self

    def omit(self, rid: str) -> ShardBuilder:
        """An intentional omission."""
        self.store.append_omission(self.ids.index(rid), self.reserve(rid))
        return self

    def interrupt(self, rid: str) -> ShardBuilder:
        """A reservation whose outcome never arrived."""
        self.reserve(rid)
        return self

    def finish(self, *, torn_tail: bytes = b"") -> Path:
        """Close the store; ``torn_tail`` is appended to the results as an incomplete line."""
        self.store.close()
        if torn_tail:
            with open(self.output, "ab") as handle:
                handle.write(torn_tail)
        return self.output


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
