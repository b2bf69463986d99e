"""``gymslurm cancel RUN``: stop a run, and only what is still going.

A chain that already finished keeps its verdict; a run with nothing live and nothing unfinished
has ended, and cancel says so and changes nothing. On Slurm every array of the run is cancelled as
one ``scancel ARRAY`` (each array is the run's own), so a 10,000-shard run is a few arguments.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gymslurm.exitcodes import ExitCode
from gymslurm.launcher.backend import ClusterSetBackend, SlurmBackend
from gymslurm.launcher.ledger import Cancelled, ChainState
from gymslurm.launcher.slurm import array_ids
from gymslurm.launcher.submit import _live_jobs, chain_states, resolve_run_or_job, run_backend


def cancel(ref: str, run_root: str) -> int:
    """``gymslurm cancel RUN``: cancel every live job of the run and record it in the unfinished chains.

    A chain that already finished (DONE, FAILED, ...) keeps its verdict; a run with nothing live
    and nothing unfinished has ended, and cancel says so and writes nothing. On Slurm every array is
    cancelled as one ``scancel ARRAY`` (each is the run's own), not task by task.
    """
    run = resolve_run_or_job(ref, Path(run_root).resolve())
    info = run.read_info()
    backend = run_backend(run)
    ledgers = [run.ledger(s) for s in range(info.shards)] + [run.aggregate_ledger]
    first = backend.queue()
    states = chain_states(run, info.shards)
    open_shards = [i for i, state in enumerate(states[:-1]) if not state.finished]
    live = {i for i, state in enumerate(states) if _live_jobs(state, first)}
    aggregation_open = bool(states[-1].epoch_jobs) and not states[-1].finished
    if not open_shards and not live and not aggregation_open:
        verdicts = Counter(_final_word(state) for state in states[:-1])
        summary = ", ".join(f"{n} {word}" for word, n in sorted(verdicts.items()))
        print(f"run {run.name} has already ended ({summary}); nothing to cancel, nothing was changed")
        return ExitCode.DONE
    marked = sorted(set(open_shards) | (live - {info.shards}))
    if marked or aggregation_open or info.shards in live:
        marked.append(info.shards)
    for index in marked:
        ledgers[index].append(Cancelled(job_ids=_live_jobs(states[index], first)))
    # Look again after recording: a link that queued a successor before seeing our record is caught
    # here; one that queues it after sees the record and cancels it itself (chain.ensure_successor).
    queue = backend.queue()
    every = [job for state in chain_states(run, info.shards) for job in _live_jobs(state, queue)]
    targets = array_ids(every) if isinstance(backend, SlurmBackend | ClusterSetBackend) else every
    backend.cancel(targets)
    shown = " ".join(targets[:10]) + (f" ... ({len(targets) - 10} more)" if len(targets) > 10 else "")
    kept = info.shards - len([i for i in marked if i < info.shards])
    print(f"run {run.name}: cancelled {len(every)} job(s) ({shown or 'none live'}); "
          f"{kept} finished chain(s) keep their verdict".rstrip())  # fmt: skip
    return ExitCode.DONE


def _final_word(state: ChainState) -> str:
    if state.cancelled:
        return "CANCELLED"
    return str(state.last_decision.decision) if state.last_decision else "not started"
