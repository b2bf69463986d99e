"""``gymslurm pause RUN`` gives a run's allocation back now; ``gymslurm resume RUN BENCHMARK`` goes on.

**pause** writes a ``paused`` record into every unfinished shard chain's ledger *before* it signals
anything (the link that is signalled reads it), then cancels every live job of those chains with
one ``scancel``: a running link gets TERM as a preemption gives it (its collector saves and exits
75; the link records decision PAUSED, spends no retry and queues nothing), a queued one leaves the
queue (and one that starts anyway, queued in the same instant, finds the record and starts
nothing). A chain that already finished keeps its verdict. The aggregation is left alone: it is
queued only once every shard has finished, holds no GPU, and runs to its end exactly once.

**resume** is ``resubmit`` of the paused shards without resetting their budgets (``resubmit``
with ``reset_budget=False``): every shard goes on where it stopped, with the retries, walltime and
links-without-progress it had spent before the pause, and no more.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from gymslurm.commands.resubmit import resubmit
from gymslurm.commands.runs import DEFAULT_RUN_ROOT
from gymslurm.exitcodes import ExitCode
from gymslurm.launcher.ledger import Paused
from gymslurm.launcher.run_site import live_jobs, run_backend
from gymslurm.launcher.rundir import chain_states, resolve_run_or_job


def pause(ref: str, run_root: str) -> int:
    """``gymslurm pause RUN``: record the pause in every unfinished chain, then cancel its live jobs."""
    run = resolve_run_or_job(ref, Path(run_root).resolve())
    info = run.read_info()
    backend = run_backend(run)
    queue = backend.queue()
    shards = chain_states(run, info.shards)[:-1]
    todo = [i for i, state in enumerate(shards) if not state.finished and not state.paused]
    if not todo:
        paused = sum(state.paused and not state.finished for state in shards)
        ended = Counter(
            str(s.last_decision.decision) if s.last_decision else "not started" for s in shards if s.finished
        )
        words = [f"{n} {word}" for word, n in sorted(ended.items())]
        said = ", ".join(words + ([f"{paused} paused"] if paused else []))
        print(f"run {run.name}: nothing to pause ({said}); nothing was changed")
        return ExitCode.DONE
    for shard in todo:
        run.ledger(shard).append(Paused(job_ids=live_jobs(shards[shard], queue)))
    # Look again after recording: a link that queued a successor before seeing the record is caught
    # here; one that starts after it reads the record and starts nothing.
    queue = backend.queue()
    again = chain_states(run, info.shards)
    jobs = [job for shard in todo for job in live_jobs(again[shard], queue)]
    backend.cancel(jobs)
    shown = " ".join(jobs[:10]) + (f" ... ({len(jobs) - 10} more)" if len(jobs) > 10 else "")
    print(
        f"run {run.name}: paused {len(todo)} chain(s); stopped {len(jobs)} job(s) "
        f"({shown or 'none live'}): running links save their work and end with PAUSED, spending no retry; "
        f"'gymslurm resume {run.name} {info.benchmark}' goes on where they stopped"
    )
    return ExitCode.DONE


def resume(ref: str, benchmark: str, overrides: list[str], run_root: str | None) -> int:
    """``gymslurm resume RUN BENCHMARK``: new links for the paused shards, with the budgets they had."""
    return resubmit(ref, benchmark, overrides, run_root, "paused", reset_budget=False)


def main(argv: list[str]) -> int:
    """``gymslurm pause``: parse its arguments and run it."""
    parser = argparse.ArgumentParser(
        prog="gymslurm pause", description="Give a run's allocation back now; 'gymslurm resume' goes on."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.commands.pause import pause

    return pause(args.run, args.run_root)
