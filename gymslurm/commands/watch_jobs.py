"""What a watch's commands and its tick share of the scheduler and the runs (docs/watch.md).

Apart from watch_tick.py so that ``gymslurm watch``, ``status`` and ``cancel`` of a watch never import
the tick (which cancels a suite run whose conversion failed: commands/cancel.py, that imports them).
"""

from __future__ import annotations

from pathlib import Path

from gymslurm.site.backend import SlurmBackend
from gymslurm.site.local import LocalBackend
from gymslurm.store.watch_ledger import WatchFolder, WatchSettings

WatchBackend = SlurmBackend | LocalBackend


def backend_of(folder: WatchFolder, settings: WatchSettings) -> WatchBackend:
    """The backend that runs the watch's own jobs (ticks, conversions)."""
    return SlurmBackend() if settings.backend == "slurm" else LocalBackend(folder.local_dir)


def run_ended(run: Path) -> bool:
    """True once the suite run's aggregation chain finished (or every chain did, with none)."""
    from gymslurm.launcher.rundir import RunDir, chain_states

    rundir = RunDir(run)
    states = chain_states(rundir, rundir.read_info().shards)
    return states[-1].finished or (all(state.finished for state in states[:-1]) and not states[-1].epoch_jobs)
