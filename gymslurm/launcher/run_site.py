"""The site a submitted run is on, as its files say: the backend its jobs talk to (read from ``run.json``:
which backend, which Slurm cluster(s), whether accounting answers) and which of a chain's jobs are live.

These read the run's model (``RunDir``, a chain's ``ChainState``), so they stand beside it, above the
site's adapters (``site/``), which know nothing of a run.
"""

from __future__ import annotations

from collections.abc import Mapping

from gymslurm.launcher.ledger import ChainState
from gymslurm.launcher.rundir import RunDir
from gymslurm.site.backend import (
    LIVE_STATES,
    Backend,
    ClusterSetBackend,
    SlurmBackend,
    choose_backend,
)
from gymslurm.site.job_names import RunJobs
from gymslurm.site.slurm import QueueRow, SlurmClient


def run_jobs(run: RunDir, shards: int) -> RunJobs:
    """Which queue rows are this run's, by job name (site/job_names.py): an array run's links are all
    ``gs-R``; a run without ``array.json`` names each shard's links (``gs-R-sNNN``)."""
    return RunJobs(run.name, 0 if run.array_path.exists() else shards)


def live_jobs(state: ChainState, queue: Mapping[str, QueueRow]) -> list[str]:
    """The jobs of the chain's current epoch that the queue holds in a live state (pure)."""
    return [job for job in state.epoch_jobs if job in queue and queue[job].state in LIVE_STATES]


def run_backend(run: RunDir, shard: int | None = None, *, aggregation: bool = False) -> Backend:
    """The backend of a submitted run, knowing what its ``run.json`` says of accounting (False: no sacct)
    and on which Slurm cluster the run is (``slurm.cluster``).

    A run across clusters (``slurm.clusters``): the backend of ``shard``'s cluster, of the
    aggregation's (``aggregation``), or, for neither, a :class:`ClusterSetBackend` of them all.
    """
    info = run.read_info()
    if info.placement is None or info.backend != "slurm":
        return choose_backend(
            info.backend, local_dir=run.local_dir, accounting=info.accounting, cluster=info.cluster
        )

    def on(cluster: str | None) -> SlurmBackend:
        return SlurmBackend(SlurmClient(cluster=cluster), accounting=info.accounting, qualify=True)

    if aggregation or shard is not None:
        return on(info.cluster_of(None if aggregation else shard))
    return ClusterSetBackend({cluster: on(cluster) for cluster in info.clusters})
