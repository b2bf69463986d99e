"""What a new run writes: its spec, and the run files in their order (the store's ``create_fresh`` and
``import_legacy``; store.py keeps the run open)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gymslurm.clock import utc_now
from gymslurm.store.atomic import publish_json
from gymslurm.store.history import RolloutKeys
from gymslurm.store.inputs import RolloutIndex, Tasks, write_inputs, write_nemo_gym_inputs
from gymslurm.store.manifest import IdentitySource, Manifest, write_manifest
from gymslurm.store.paths import RunPaths
from gymslurm.store.reservations import create_table


@dataclass(frozen=True)
class RunSpec:
    """What a new run records: the same for a fresh collection and a legacy import."""

    source_path: str
    source_digest: str
    inputs: Tasks  # a list, or a stream (prepare.TaskStream) a fresh run writes as it is made
    identity: Mapping[str, Any]
    config_digest: str
    max_rollout_attempts: int
    retry_terminal_timeouts: bool = False
    # Each task as NeMo Gym's <stem>_materialized_inputs.jsonl row (gymslurm.nemogym.materialized_row);
    # None: no such file is written. An imported run keeps NeMo Gym's own file when it has one.
    nemo_gym_row: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None

    def manifest(self, run_id: str, state: Literal["replacing", "ready"], source: IdentitySource) -> Manifest:
        """The new run's manifest; ``inputs_digest`` is replaced once the inputs are written."""
        return Manifest(
            run_id=run_id,
            state=state,
            created_at=utc_now(),
            source_path=self.source_path,
            source_digest=self.source_digest,
            inputs_digest=self.source_digest,
            config_digest=self.config_digest,
            rollout_count=len(self.inputs),
            max_rollout_attempts=self.max_rollout_attempts,
            retry_terminal_timeouts=self.retry_terminal_timeouts,
            identity_verified=source == "verified",
            identity_source=source,
        )


def write_run_files(
    paths: RunPaths, manifest: Manifest, inputs: Tasks, spec: RunSpec, counts: list[int] | int
) -> tuple[Manifest, RolloutIndex]:
    """Identity, inputs (the run's own, then NeMo Gym's file), reservations, then the ready manifest
    last (its presence means complete)."""
    publish_json(paths.identity, dict(spec.identity))
    inputs_digest, index = write_inputs(paths.tasks(manifest.format_version), inputs)
    if spec.nemo_gym_row is not None:
        write_nemo_gym_inputs(paths.materialized_inputs, index.path, spec.nemo_gym_row)
    create_table(paths.reservations, manifest.run_id, counts)
    manifest = manifest.model_copy(update={"inputs_digest": inputs_digest, "state": "ready"})
    write_manifest(paths.manifest, Manifest.model_validate(manifest.model_dump()))
    return manifest, index


def keys_of_rows(rows: Sequence[dict[str, Any]]) -> RolloutKeys:
    """Row → rollout index for rows not yet written (legacy import reads history before writing)."""
    index_of = {row.get("_ng_rollout_id"): index for index, row in enumerate(rows)}
    by_task = {
        (row.get("_ng_task_index", 0), row.get("_ng_rollout_index", 0)): i for i, row in enumerate(rows)
    }
    return RolloutKeys(index_of, lambda: by_task)


def clear_companions(paths: RunPaths) -> None:
    for path in paths.replaced_by_fresh_run():
        if path == paths.results:
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
