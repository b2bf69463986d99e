"""How a run's store comes to be open: a new run's files written, a legacy run adopted, a saved run
validated. :class:`~gymslurm.store.store.RunStore`'s three constructors (``create_fresh``,
``import_legacy``, ``open``) call these; what an open run then reads and writes is store.py's.
Guarantees (docs/store.md):

- *Open changes no byte* (:func:`validated_manifest`): the manifest is validated (version first),
  an interrupted fresh replacement (``state: replacing``) is refused whatever the caller allows,
  and the run's tasks file's digest is checked against the manifest.
- *Fresh replacement is detectable* (:func:`fresh_run_files`): over existing files the new
  manifest is first published as ``replacing``, then every companion replaced or removed, then
  ``ready`` published last (:func:`write_run_files`).
- *A legacy run is adopted, never rewritten* (:func:`legacy_run_files`): its reservations are
  rebuilt from its saved outcomes, its outcome files (and NeMo Gym's own tasks file) left as they are.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gymslurm.clock import utc_now
from gymslurm.errors import InconsistentHistoryError, ManifestError
from gymslurm.store.adoptions import start_imported
from gymslurm.store.atomic import publish_bytes, publish_json
from gymslurm.store.existing import ExistingRun, existing_run, refuse_retired_journal
from gymslurm.store.history import RolloutKeys, read_history
from gymslurm.store.inputs import (
    RolloutIndex,
    Tasks,
    check_rows,
    digest_file,
    read_rows,
    write_inputs,
    write_nemo_gym_inputs,
)
from gymslurm.store.manifest import IdentitySource, Manifest, new_run_id, read_manifest, write_manifest
from gymslurm.store.paths import RunPaths, file_size
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


def fresh_run_files(
    paths: RunPaths, spec: RunSpec, identity_source: IdentitySource
) -> tuple[Manifest, RolloutIndex]:
    """Write a new run at ``paths``, replacing whatever run was there (detectably if interrupted).

    The ``replacing`` mark protects saved history: it is published first only when something was
    saved there (a manifest-backed or legacy run). Over nothing, or over a partial initial cache
    (no manifest, no saved outcome), there is nothing to protect, and an interruption must leave
    a partial initial cache again, which the next resume finishes by starting fresh (000), instead
    of a mark that refuses every resume, unsafe ones too.
    """
    inputs = spec.inputs
    if isinstance(inputs, Sequence):  # a stream was checked by its maker; the index checks it again
        check_rows(inputs)
    manifest = spec.manifest(new_run_id(), "replacing", identity_source)
    if existing_run(paths) in (ExistingRun.MANIFEST, ExistingRun.LEGACY):
        write_manifest(paths.manifest, manifest)
    clear_companions(paths)
    publish_bytes(paths.results, b"")
    return write_run_files(paths, manifest, inputs, spec, len(inputs))


def validated_manifest(paths: RunPaths, adopt_attempts: int) -> Manifest:
    """The manifest of a saved run, checked to be resumable with its files. Changes no byte.

    ``adopt_attempts`` is the attempt limit a manifest without one adopts (the setting in force).
    """
    refuse_retired_journal(paths.attempts_journal)
    manifest = read_manifest(paths.manifest, adopt_attempts=adopt_attempts)
    if manifest is None:
        raise ManifestError(
            f"no run manifest {paths.manifest}; this output has no resumable run. Restore the "
            "manifest from a backup, or start a fresh collection (or import a legacy run explicitly)"
        )
    if manifest.state != "ready":
        raise InconsistentHistoryError(
            f"{paths.manifest} says a fresh collection was replacing this run and was interrupted: "
            "old and new files may be mixed, so it cannot be resumed (not even with "
            "allow_unsafe_resume). Run a fresh collection again, or use a new output path"
        )
    if not paths.results.exists():
        raise ManifestError(
            f"the results file {paths.results} is missing beside its manifest {paths.manifest}: "
            "restore it from a backup (keep a run's files together) or start at a new output path"
        )
    tasks = paths.tasks(manifest.format_version)
    digest, lines = digest_file(tasks)
    if digest != manifest.inputs_digest or lines != manifest.rollout_count:
        raise InconsistentHistoryError(
            f"the materialized inputs {tasks} do not match the manifest "
            f"{paths.manifest} (digest or row count differs): they belong to another run or were "
            "edited. Restore the run's files together from a backup, or use a new output path"
        )
    return manifest


def legacy_run_files(paths: RunPaths, spec: RunSpec) -> tuple[Manifest, RolloutIndex]:
    """Adopt a run without a manifest (``allow_unsafe_resume``): its identity is never verified.

    Reservations are rebuilt from the saved outcomes, numbered by arrival per rollout, sidecar
    before results. The outcome files are not rewritten; their unstamped rows stay legacy rows.
    """
    _refuse_a_manifest(paths)
    refuse_retired_journal(paths.attempts_journal)
    inputs = spec.inputs if isinstance(spec.inputs, Sequence) else list(spec.inputs)
    check_rows(inputs)
    run_id = new_run_id()
    history = read_history(
        paths.results,
        paths.failures,
        run_id=run_id,
        keys=keys_of_rows(inputs),
        rollout_count=len(inputs),
        legacy=True,
        manifest=paths.manifest,
    )
    assert history.legacy_counts is not None
    manifest = spec.manifest(run_id, "ready", "imported")
    lines = {
        "failures": history.failures_tail.complete_lines,
        "results": history.results_tail.complete_lines,
    }
    start_imported(paths.adoptions, lines)  # before the manifest, which says the import is complete
    keep = file_size(paths.materialized_inputs) > 0  # NeMo Gym's own file is never replaced
    spec = spec if not keep else dataclasses.replace(spec, nemo_gym_row=None)
    return write_run_files(paths, manifest, inputs, spec, history.legacy_counts)


def legacy_inputs(paths: RunPaths) -> list[dict[str, Any]] | None:
    """The materialized tasks a legacy run (no manifest) saved, or None when it saved none.

    An unsafe import reuses them (000: "Gym warns and reuses the saved materialized tasks"): the
    saved outcomes belong to those tasks, not to whatever the dataset holds now.
    """
    _refuse_a_manifest(paths)
    if file_size(paths.materialized_inputs) == 0:
        return None
    return read_rows(paths.materialized_inputs)


def _refuse_a_manifest(paths: RunPaths) -> None:
    if paths.manifest.exists():
        raise ManifestError(f"{paths.manifest} exists: this run is not a legacy run; resume it instead")


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
