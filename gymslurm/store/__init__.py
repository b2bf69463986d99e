"""The run store: the only code that touches a run's files (docs/store.md, docs/formats.md).

``RunStore`` is the facade the collector uses while holding ``RunLock``; the submodules are one
concern each: ``paths`` (where), ``atomic`` (whole-file publish), ``jsonl`` (append and torn-tail
reading), ``manifest``, ``reservations`` (durable execution numbers), ``lock``, ``inputs``
(materialized tasks), ``run_files`` (a run's store created, adopted or validated), ``history`` (the
fast outcome reader and the one saved-row reader), ``lines`` (a file's lines by number,
identity-verified) and ``files`` (the one versioned-JSON reader).

The package's names are imported on first use (PEP 562), so a module that needs only ``atomic`` or
``jsonl`` (the launcher's ledgers and run folder) does not pay for the facade and its pydantic models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gymslurm.store.existing import ExistingRun, existing_run
    from gymslurm.store.files import read_resubmit_offset
    from gymslurm.store.lock import RunLock
    from gymslurm.store.manifest import Manifest
    from gymslurm.store.paths import RunPaths
    from gymslurm.store.run_files import RunSpec
    from gymslurm.store.store import Reconciliation, RunStore

_HOMES = {
    "ExistingRun": "existing",
    "Manifest": "manifest",
    "Reconciliation": "store",
    "RunLock": "lock",
    "RunPaths": "paths",
    "RunSpec": "run_files",
    "RunStore": "store",
    "existing_run": "existing",
    "read_resubmit_offset": "files",
}

__all__ = [
    "ExistingRun",
    "Manifest",
    "Reconciliation",
    "RunLock",
    "RunPaths",
    "RunSpec",
    "RunStore",
    "existing_run",
    "read_resubmit_offset",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
