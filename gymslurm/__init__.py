"""gymslurm: crash-safe LLM evaluation rollouts on Slurm.

The supported Python surface is what ``__all__`` lists (docs/api.md); everything else is internal
and may move. Names load lazily on first use (PEP 562), so ``import gymslurm`` stays cheap and a
command pays only for what it touches.

The package is layered so that the data flow reads top to bottom (docs/architecture.md):
settings → tasks → identity → store (the run's files) → selection/coverage (pure) →
dispatch (HTTP) → collector → aggregate/health → launcher (Slurm chains).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gymslurm.version import __version__

# name -> the module that defines it (the one place to look it up)
_HOMES: dict[str, str] = {
    # running rollouts from Python, with the collector's guarantees (docs/outcomes.md)
    "run_outcomes": "gymslurm.outcomes",
    "OutcomeStream": "gymslurm.outcomes",
    "OutcomeFuture": "gymslurm.outcomes",
    "RowOutcome": "gymslurm.outcomes",
    # one collection, as ``gymslurm collect`` runs it (docs/collector.md)
    "collect": "gymslurm.collector.collect",
    "CollectSettings": "gymslurm.settings",
    # the records a run saves (docs/formats.md)
    "RolloutFailureRecord": "gymslurm.records",
    "EpisodeFailure": "gymslurm.records",
    "EpisodeId": "gymslurm.records",
    # what a collection's exit code means (docs/exit-codes.md)
    "ExitCode": "gymslurm.exitcodes",
    "HealthExit": "gymslurm.exitcodes",
    # where a run's files are (docs/formats.md)
    "RunPaths": "gymslurm.store.paths",
    # the specification's recovery API, NeMo Gym's signatures (docs/api.md)
    "run_examples": "gymslurm.recovery",
    "preprocess_examples": "gymslurm.recovery",
    "check_completion": "gymslurm.recovery",
    "RolloutStore": "gymslurm.recovery",
    "EpisodeFailedError": "gymslurm.errors",
    "IncompleteRunError": "gymslurm.errors",
    # the exception tree (gymslurm/errors.py)
    "GymslurmError": "gymslurm.errors",
    "ConfigError": "gymslurm.errors",
    "IdentityMismatchError": "gymslurm.errors",
    "StoreError": "gymslurm.errors",
    "ManifestError": "gymslurm.errors",
    "CorruptRecordError": "gymslurm.errors",
    "DiskFullError": "gymslurm.errors",
    "RunLockedError": "gymslurm.errors",
    "ProtocolError": "gymslurm.errors",
    "SlurmError": "gymslurm.errors",
}

__all__ = [
    "CollectSettings",
    "ConfigError",
    "CorruptRecordError",
    "DiskFullError",
    "EpisodeFailedError",
    "EpisodeFailure",
    "EpisodeId",
    "ExitCode",
    "GymslurmError",
    "HealthExit",
    "IdentityMismatchError",
    "IncompleteRunError",
    "ManifestError",
    "OutcomeFuture",
    "OutcomeStream",
    "ProtocolError",
    "RolloutFailureRecord",
    "RolloutStore",
    "RowOutcome",
    "RunLockedError",
    "RunPaths",
    "SlurmError",
    "StoreError",
    "__version__",
    "check_completion",
    "collect",
    "preprocess_examples",
    "run_examples",
    "run_outcomes",
]  # the same names as _HOMES (a test pins both)

if TYPE_CHECKING:
    from gymslurm.collector.collect import collect
    from gymslurm.errors import (
        ConfigError,
        CorruptRecordError,
        DiskFullError,
        EpisodeFailedError,
        GymslurmError,
        IdentityMismatchError,
        IncompleteRunError,
        ManifestError,
        ProtocolError,
        RunLockedError,
        SlurmError,
        StoreError,
    )
    from gymslurm.exitcodes import ExitCode, HealthExit
    from gymslurm.outcomes import OutcomeFuture, OutcomeStream, RowOutcome, run_outcomes
    from gymslurm.records import EpisodeFailure, EpisodeId, RolloutFailureRecord
    from gymslurm.recovery import (
        RolloutStore,
        check_completion,
        preprocess_examples,
        run_examples,
    )
    from gymslurm.settings import CollectSettings
    from gymslurm.store.paths import RunPaths


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(
            f"module 'gymslurm' has no attribute {name!r}; the supported names are "
            "gymslurm.__all__ (docs/api.md)"
        )
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
