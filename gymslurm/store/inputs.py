"""The materialized inputs: one canonical JSON line per logical rollout, written once per run.

Its SHA-256 (``inputs_digest`` in the manifest) is taken over the file's bytes, so a resume can check
that the tasks on disk are the ones the run was created with by hashing, without parsing. Rows are
written canonically (orjson, sorted keys, one ``\\n`` per line). The per-rollout stamps the store adds
to every outcome (rollout id, task index, repeat index, task id) are read into a compact index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymslurm.errors import ManifestError
from gymslurm.store.atomic import publish_bytes
from gymslurm.store.jsonl import dump_line, iter_records

_CHUNK = 1 << 20


def digest_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_inputs(path: Path, rows: Sequence[dict[str, Any]]) -> str:
    """Publish the materialized inputs and return their digest."""
    data = b"".join(dump_line(row, canonical=True) for row in rows)
    publish_bytes(path, data)
    return digest_bytes(data)


def digest_file(path: Path) -> tuple[str, int]:
    """``(digest, line count)`` of a file, streamed."""
    sha = hashlib.sha256()
    lines = 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                sha.update(chunk)
                lines += chunk.count(b"\n")
    except FileNotFoundError:
        raise ManifestError(
            f"the materialized inputs {path} are missing beside the run manifest; restore them from a "
            "backup (keep a run's files together) or start at a new output path"
        ) from None
    return "sha256:" + sha.hexdigest(), lines


@dataclass(slots=True)
class RolloutIndex:
    """What the store stamps on each outcome, per rollout index, and the id → index map."""

    ids: list[str] = field(default_factory=list)
    task_index: list[int] = field(default_factory=list)
    repeat_index: list[int] = field(default_factory=list)
    task_ids: list[tuple[str, str]] = field(default_factory=list)
    index_of: dict[str, int] = field(default_factory=dict)

    def add(self, path: Path, line: int, row: dict[str, Any]) -> None:
        rollout_id = row.get("_ng_rollout_id")
        task_id = row.get("task_id")
        if type(rollout_id) is not str or type(task_id) is not dict:
            raise ManifestError(
                f"{path}, line {line + 1}: a materialized input without _ng_rollout_id/task_id"
            )
        if rollout_id in self.index_of:
            raise ManifestError(f"{path}, line {line + 1}: rollout id {rollout_id!r} appears twice")
        self.index_of[rollout_id] = len(self.ids)
        self.ids.append(rollout_id)
        self.task_index.append(row.get("_ng_task_index", 0))
        self.repeat_index.append(row.get("_ng_rollout_index", 0))
        self.task_ids.append((str(task_id.get("taskset")), str(task_id.get("task_id"))))

    def by_task(self) -> dict[tuple[int, int], int]:
        """(task index, repeat index) → rollout index, for legacy rows without a usable rollout id."""
        return {key: index for index, key in enumerate(zip(self.task_index, self.repeat_index, strict=True))}

    def stamps(self, index: int, run_id: str, attempt: int) -> dict[str, Any]:
        taskset, task_id = self.task_ids[index]
        return {
            "_ng_run_id": run_id,
            "_ng_rollout_id": self.ids[index],
            "_ng_attempt": attempt,
            "_ng_task_index": self.task_index[index],
            "_ng_rollout_index": self.repeat_index[index],
            "task_id": {"taskset": taskset, "task_id": task_id},
        }


def index_rows(rows: Sequence[dict[str, Any]], path: Path) -> RolloutIndex:
    index = RolloutIndex()
    for line, row in enumerate(rows):
        index.add(path, line, row)
    return index


def read_index(path: Path) -> RolloutIndex:
    index = RolloutIndex()
    for line, row in iter_records(path):
        index.add(path, line, row)
    return index


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [row for _, row in iter_records(path)]
