"""``gymslurm cancel RUN``: stop a run, and only what is still going.

A chain that already finished keeps its verdict; a run with nothing live and nothing unfinished
has ended, and cancel says so and changes nothing. On Slurm every array of the run is cancelled as
one ``scancel ARRAY`` (each array is the run's own), so a 10,000-shard run is a few arguments.

What it writes, so that it stays fast at any number of shards: in an array run, one ``cancelled``
record in the run's own ledger (``<run>/ledger.jsonl``) stands for every shard whose ledger is
still empty (its first link never started: most of a large run); each unfinished shard that has a
ledger gets its own record, all made durable in one commit (``ledger.append_each``). A first link
starting at that very moment writes its ``start`` and then reads the run's ledger, while cancel
writes the run's record and then reads the shards' ledgers: one of the two sees the other, so the
shard is cancelled either way (``job/link.py``).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from gymslurm.commands.runs import DEFAULT_RUN_ROOT
from gymslurm.exitcodes import ExitCode
from gymslurm.launcher.ledger import Cancelled, ChainState, Ledger, append_each
from gymslurm.launcher.run_site import live_jobs, run_backend
from gymslurm.launcher.rundir import RunDir, chain_states, folder_listing, resolve_run_or_job
from gymslurm.site.backend import Backend, ClusterSetBackend, SlurmBackend
from gymslurm.site.slurm import QueueRow, array_ids


def cancel(ref: str, run_root: str) -> int:
    """``gymslurm cancel RUN``: cancel every live job of the run and record it in the unfinished chains."""
    from gymslurm.store.watch_ledger import find_watch

    if (watch := find_watch(ref, Path(run_root).resolve())) is not None:  # a watch (docs/watch.md)
        from gymslurm.commands.watch import cancel_watch

        return cancel_watch(watch)
    run = resolve_run_or_job(ref, Path(run_root).resolve())
    return cancel_run(run, run_backend(run))


def cancel_run(run: RunDir, backend: Backend) -> int:
    """Cancel ``run`` on ``backend``: record it where a chain is unfinished, then cancel its live jobs.

    A chain that already finished (DONE, FAILED, ...) keeps its verdict; a run with nothing live
    and nothing unfinished has ended, and cancel says so and writes nothing. On Slurm every array is
    cancelled as one ``scancel ARRAY`` (each is the run's own), not task by task.
    """
    info = run.read_info()
    first = backend.queue()
    states = chain_states(run, info.shards)
    open_shards = [i for i, state in enumerate(states[:-1]) if not state.finished]
    live = {i for i, state in enumerate(states) if live_jobs(state, first)}
    aggregation_open = bool(states[-1].epoch_jobs) and not states[-1].finished
    if not open_shards and not live and not aggregation_open:
        verdicts = Counter(_final_word(state) for state in states[:-1])
        summary = ", ".join(f"{n} {word}" for word, n in sorted(verdicts.items()))
        print(f"run {run.name} has already ended ({summary}); nothing to cancel, nothing was changed")
        return ExitCode.DONE
    array = run.read_array()
    if array is not None:  # one record for every shard whose ledger is still empty, written first
        run.run_ledger.append(Cancelled(job_ids=[part.job_id for part in array.arrays]))
    # Read again after the run's record: a shard that has a ledger now is cancelled in it. A shard
    # with no folder under shards/ has no ledger: the run's record stands for it, nothing to read.
    present = folder_listing(run.root / "shards")
    covered = set() if array is None else {i for i in range(info.shards) if f"{i:03d}" not in present}
    shared = run.run_ledger.read() if array is not None else []
    for i in range(info.shards):
        if i not in covered:
            states[i] = run.chain_state(i, array, present, shared)
    chosen = (set(open_shards) | (live - {info.shards})) - covered
    marked = _mark(run, states, first, chosen, aggregation_open or bool(covered)) + len(covered)
    # Look again after recording: a link that queued a successor before seeing our record is caught
    # here; one that queues it after sees the record and cancels it itself (chain.ensure_successor).
    queue = backend.queue()
    every = [job for state in chain_states(run, info.shards) for job in live_jobs(state, queue)]
    targets = array_ids(every) if isinstance(backend, SlurmBackend | ClusterSetBackend) else every
    backend.cancel(targets)
    shown = " ".join(targets[:10]) + (f" ... ({len(targets) - 10} more)" if len(targets) > 10 else "")
    kept = info.shards - marked
    print(
        f"run {run.name}: cancelled {len(every)} job(s) ({shown or 'none live'}); "
        f"{kept} finished chain(s) keep their verdict".rstrip()
    )
    return ExitCode.DONE


def _mark(
    run: RunDir, states: list[ChainState], queue: dict[str, QueueRow], chosen: set[int], aggregation: bool
) -> int:
    """Record the cancel in each chosen chain not already cancelled (one commit); the shards cancelled."""
    shards = len(states) - 1
    entries: list[tuple[Ledger, Cancelled]] = []
    for index in sorted(chosen):
        state = states[index]
        if not state.finished:  # a final decision stays (a cancelled one: the run's record stands for it)
            entries.append((run.ledger(index), Cancelled(job_ids=live_jobs(state, queue))))
    if chosen or aggregation:  # as before: the aggregation's chain is over with the run
        entries.append((run.aggregate_ledger, Cancelled(job_ids=live_jobs(states[shards], queue))))
    append_each(entries)
    return len([i for i in chosen if i < shards])


def _final_word(state: ChainState) -> str:
    if state.cancelled:
        return "CANCELLED"
    return str(state.last_decision.decision) if state.last_decision else "not started"


def main(argv: list[str]) -> int:
    """``gymslurm cancel``: parse its arguments and run it."""
    parser = argparse.ArgumentParser(prog="gymslurm cancel", description="Cancel every job of a run.")
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.commands.cancel import cancel

    return cancel(args.run, args.run_root)
