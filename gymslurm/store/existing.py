"""What an output path holds before a collection starts: nothing, a partial cache, a legacy run or a run.

Read before any store is opened (``collector/prepare.py`` decides from it whether to start fresh, import or
resume), and the one refusal of a run written with the retired attempt journal.
"""

from __future__ import annotations

import os
from enum import StrEnum

from gymslurm.errors import ManifestError
from gymslurm.store.paths import RunPaths, file_size


class ExistingRun(StrEnum):
    """What an output path holds before a collection starts."""

    NOTHING = "nothing"  # no manifest, no outcome file, no companion
    PARTIAL_INITIAL_CACHE = "partial_initial_cache"  # no manifest, outcome files absent or empty
    LEGACY = "legacy"  # no manifest but saved outcomes: importable only with allow_unsafe_resume
    MANIFEST = "manifest"  # a manifest-backed run (maybe interrupted while being replaced)


def existing_run(paths: RunPaths) -> ExistingRun:
    """Classify the output. ``PARTIAL_INITIAL_CACHE``: print "Skipping resume_from_cache", start fresh.

    A retired attempt journal counts as a manifest: its history must not be dropped by the
    partial-cache fallback; opening it reports the format mismatch (:func:`refuse_retired_journal`).
    """
    if paths.manifest.exists() or paths.attempts_journal.exists():
        return ExistingRun.MANIFEST
    if any(file_size(path) > 0 for path in (paths.results, paths.failures)):
        return ExistingRun.LEGACY
    companions = [p for role, p in paths.companions().items() if role != "lock"]
    if any(path.exists() for path in companions):
        return ExistingRun.PARTIAL_INITIAL_CACHE
    return ExistingRun.NOTHING


def refuse_retired_journal(journal: os.PathLike[str]) -> None:
    """Report a run written with the retired draft attempt journal instead of dropping its history (000)."""
    if os.path.lexists(journal):
        raise ManifestError(
            f"{journal} is the attempt journal of an earlier development revision: this gymslurm reads "
            "manifest version 2 runs only and would silently drop that history. Read the run with the "
            "revision that wrote it, or move its files aside (keep them together) and start a new run; "
            "a fresh collection (without +resume_from_cache=true) replaces it"
        )
