"""The run store: the only code that touches a run's files (docs/store.md, docs/formats.md).

``RunStore`` is the facade the collector uses while holding ``RunLock``; the submodules are one
concern each: ``paths`` (where), ``atomic`` (whole-file publish), ``jsonl`` (append and torn-tail
reading), ``manifest``, ``reservations`` (durable execution numbers), ``lock``, ``inputs``
(materialized tasks) and ``history`` (the fast outcome reader). Importing this package is cheap
enough for commands that need it; the CLI imports it lazily.
"""

from gymslurm.store.lock import RunLock
from gymslurm.store.manifest import Manifest, max_rollout_attempts_from_env
from gymslurm.store.paths import RunPaths
from gymslurm.store.store import ExistingRun, Reconciliation, RunStore, existing_run, read_resubmit_offset

__all__ = [
    "ExistingRun",
    "Manifest",
    "Reconciliation",
    "RunLock",
    "RunPaths",
    "RunStore",
    "existing_run",
    "max_rollout_attempts_from_env",
    "read_resubmit_offset",
]
