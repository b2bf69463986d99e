"""Where a run's files live: every companion of an output path, beside its resolved target.

A symlinked output is resolved to its target once, here, and every companion is named beside the
target (docs/formats.md), so two spellings of one run can never grow two histories. The symlink itself
is kept: writers publish *through* it (see ``atomic.py``). Trade-off: a run moved by copying only the
symlink's target folder keeps working; a run whose companions sit beside the alias instead is not found
here on purpose (collection requires companions beside the resolved output, spec 000).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

# Every companion of a run by role (docs/formats.md): ``<dir>/<stem><suffix>`` beside the output.
COMPANION_SUFFIXES: dict[str, str] = {
    "failures": "_failures.jsonl",
    "manifest": "_manifest.json",
    "identity": "_identity.json",
    "reservations": "_reservations.bin",
    "materialized_inputs": "_materialized_inputs.jsonl",
    "gymslurm_inputs": "_gymslurm_inputs.jsonl",
    "adoptions": "_adoptions.jsonl",
    "coverage": "_coverage.json",
    "resubmit_offset": "_resubmit_offset",
    "resume_drift": "_resume_drift.jsonl",
    "lock": "_run.lock",
    "aggregate_metrics": "_aggregate_metrics.json",
    "gymslurm_metrics": "_gymslurm_metrics.json",
    "aggregate_coverage": "_aggregate_coverage.json",
    "health": "_health.json",
    "progress": "_progress.json",
    "finished": "_finished.json",
    "outcome_index": "_outcome_index.bin",
    # The retired draft attempt journal of earlier development revisions (000): never written, only
    # detected (a resume and aggregation refuse it; a fresh collection replaces it).
    "attempts_journal": "_attempts.jsonl",
}


def others_writable_warning(folder: Path, mode: int) -> str | None:
    """A warning when a run's folder (permission bits ``mode``) lets other users create files in it.

    Run files are never written through a planted link (atomic.py), but another user who can write
    the folder can still delete, rename or pre-create the run's files (the sticky bit stops only the
    first two). Pure: the caller stats the folder.
    """
    if not mode & stat.S_IWOTH:
        return None
    sticky = " (sticky: others cannot remove your files, but can still create files beside them)"
    return (
        f"the output folder {folder} is writable by other users{sticky if mode & stat.S_ISVTX else ''}; "
        "they could tamper with the run's files. Use a folder only you can write (chmod o-w), "
        "see docs/security.md"
    )


def companion_of(path: Path) -> Path | None:
    """The output of the run whose companion ``path`` is (``r_failures.jsonl`` → ``r.jsonl``), when
    that run has a file there (its output or any companion, ``path`` included); else None.

    The one rule for every command that writes an output (collect, aggregate, reverify): a run's
    companion is never any command's output, since writing it would destroy that run.
    """
    for suffix in COMPANION_SUFFIXES.values():
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            output = path.with_name(path.name[: -len(suffix)] + ".jsonl")
            run = [output, *(companion_path(output, other) for other in COMPANION_SUFFIXES.values())]
            if any(os.path.lexists(file) for file in run):
                return output
    return None


def companion_refusal(output: Path, what: str) -> str | None:
    """Why ``what`` ``output`` must not be written, when either spelling is an existing run's file."""
    for spelling in dict.fromkeys((output, output.resolve())):
        run = companion_of(spelling)
        if run is not None:
            return (
                f"{what} {output} is a companion file of the run {run}; writing it would destroy that "
                "run. Name the results file itself (<stem>.jsonl) of a new run instead"
            )
    return None


def others_own(paths: RunPaths) -> list[Path]:
    """The run's folder, the output as given (a link counts as itself) and every file of the run
    that exist and belong to another user: a collection must not write there (it would replace
    their files, under the modes they chose)."""
    me = os.geteuid()
    found = []
    for path in (paths.folder, paths.output_as_given, *paths.companions().values()):
        try:
            if os.lstat(path).st_uid != me:
                found.append(path)
        except FileNotFoundError:
            continue
    return list(dict.fromkeys(found))


def run_stem(output: Path) -> str:
    """The run stem of an output path: its name without ``.jsonl``."""
    return output.stem if output.suffix == ".jsonl" else output.name


def companion_path(output: Path, suffix: str) -> Path:
    """The companion file ``<dir>/<stem><suffix>`` of an output path, as spelled (resolve first)."""
    return output.parent / f"{run_stem(output)}{suffix}"


@dataclass(frozen=True, slots=True)
class RunPaths:
    """The output as given, its resolved target, and every companion file of the run."""

    output_as_given: Path
    output: Path

    @classmethod
    def for_output(cls, path: str | os.PathLike[str]) -> RunPaths:
        """Resolve a (possibly symlinked) output path; companions live beside the target."""
        given = Path(path).expanduser().absolute()
        return cls(output_as_given=given, output=given.resolve())

    @property
    def folder(self) -> Path:
        return self.output.parent

    @property
    def stem(self) -> str:
        return run_stem(self.output)

    def _companion(self, suffix: str) -> Path:
        return companion_path(self.output, suffix)

    @property
    def results(self) -> Path:
        return self.output

    @property
    def failures(self) -> Path:
        return self._companion("_failures.jsonl")

    @property
    def manifest(self) -> Path:
        return self._companion("_manifest.json")

    @property
    def identity(self) -> Path:
        return self._companion("_identity.json")

    @property
    def reservations(self) -> Path:
        return self._companion("_reservations.bin")

    @property
    def materialized_inputs(self) -> Path:
        return self._companion("_materialized_inputs.jsonl")

    @property
    def gymslurm_inputs(self) -> Path:
        """The run's own materialized tasks (manifest v3); NeMo Gym's file keeps NeMo Gym's shape."""
        return self._companion("_gymslurm_inputs.jsonl")

    @property
    def adoptions(self) -> Path:
        """The journal of outcome rows NeMo Gym's collector appended to the run (store/adoptions.py)."""
        return self._companion("_adoptions.jsonl")

    def tasks(self, manifest_version: int) -> Path:
        """Where a run's tasks are: its own file since manifest v3, NeMo Gym's name before."""
        return self.gymslurm_inputs if manifest_version >= 3 else self.materialized_inputs

    @property
    def coverage(self) -> Path:
        return self._companion("_coverage.json")

    @property
    def resubmit_offset(self) -> Path:
        return self._companion("_resubmit_offset")

    @property
    def resume_drift(self) -> Path:
        return self._companion("_resume_drift.jsonl")

    @property
    def lock(self) -> Path:
        return self._companion("_run.lock")

    @property
    def aggregate_metrics(self) -> Path:
        """NeMo Gym's metrics file: a list of per-Environment-Server entries (gymslurm.nemogym)."""
        return self._companion("_aggregate_metrics.json")

    @property
    def gymslurm_metrics(self) -> Path:
        """gymslurm's own metrics (coverage/*, retries/*, reward means), beside NeMo Gym's file."""
        return self._companion("_gymslurm_metrics.json")

    @property
    def aggregate_coverage(self) -> Path:
        return self._companion("_aggregate_coverage.json")

    @property
    def health(self) -> Path:
        return self._companion("_health.json")

    @property
    def progress(self) -> Path:
        return self._companion("_progress.json")

    @property
    def finished(self) -> Path:
        """The seal of a finished run (store/seal.py): what a resume that changes nothing says."""
        return self._companion("_finished.json")

    @property
    def outcome_index(self) -> Path:
        """What a reconcile read of the outcome files, keyed by their bytes (store/outcome_index.py)."""
        return self._companion("_outcome_index.bin")

    @property
    def attempts_journal(self) -> Path:
        return self._companion("_attempts.jsonl")

    def companions(self) -> dict[str, Path]:
        """Every file of the run by role (the output itself included as ``results``)."""
        return {
            "results": self.results,
            "failures": self.failures,
            "manifest": self.manifest,
            "identity": self.identity,
            "reservations": self.reservations,
            "materialized_inputs": self.materialized_inputs,
            "gymslurm_inputs": self.gymslurm_inputs,
            "adoptions": self.adoptions,
            "coverage": self.coverage,
            "resubmit_offset": self.resubmit_offset,
            "resume_drift": self.resume_drift,
            "lock": self.lock,
            "aggregate_metrics": self.aggregate_metrics,
            "gymslurm_metrics": self.gymslurm_metrics,
            "aggregate_coverage": self.aggregate_coverage,
            "health": self.health,
            "progress": self.progress,
            "finished": self.finished,
            "outcome_index": self.outcome_index,
            "attempts_journal": self.attempts_journal,
        }

    def replaced_by_fresh_run(self) -> list[Path]:
        """Companions a fresh collection replaces or removes (never the lock, never the manifest here)."""
        keep = {"manifest", "lock"}
        return [path for role, path in self.companions().items() if role not in keep]


def saved_outcome_bytes(paths: RunPaths) -> int:
    """The size of the run's outcome files (results + failure sidecar): it grows with every save.

    The chain compares it at a link's start and later to tell whether the link saved any new
    outcome, without reading the files (a torn tail can make it grow by a partial line).
    """
    return file_size(paths.results) + file_size(paths.failures)


def outcome_sizes(paths: RunPaths) -> tuple[int, int]:
    """The sizes of the results file and the failure sidecar (what an export of them is keyed on)."""
    return file_size(paths.results), file_size(paths.failures)


def file_size(path: os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


Identity = tuple[int, int, int, int, int] | None  # (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)


def file_identity(path: str | os.PathLike[str]) -> Identity:
    """What a file is right now, by the kernel's account; None when it does not exist.

    Every write, replacement, truncation or append changes it (the ctime, which no user call can set
    back; a replaced file has a new inode), so two equal identities are one unchanged file.
    """
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


def own_file_bytes(path: Path) -> bytes:
    """The bytes of ``path``, a regular file of this user's, never read through a link.

    For the files trusted to speak for a run (a seal, an outcome index): whoever else can write the
    run's folder must not be able to plant one.
    """
    return own_file(path)[0]


def own_file(path: Path) -> tuple[bytes, Identity]:
    """:func:`own_file_bytes`, and the identity of the file those bytes were read from."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid():
            raise ValueError(f"{path} is not a regular file of this user's")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
        return data, (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
    finally:
        os.close(fd)
