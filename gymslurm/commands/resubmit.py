"""``gymslurm resubmit``: fresh budgets and new chains for a run's unfinished (or selected) shards.

Also the restart behind ``gymslurm resume`` (pause.py), which keeps the budgets the shards had.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from gymslurm.errors import ConfigError
from gymslurm.exitcodes import ExitCode
from gymslurm.job.first_links import (
    array_indices,
    queue_first_links,
    queuing_taken_over,
)
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import Resubmitted, Submitted
from gymslurm.launcher.links import gpu_budget
from gymslurm.launcher.run_site import live_jobs, run_backend
from gymslurm.launcher.rundir import (
    SECRETS_ENV,
    RunDir,
    RunInfo,
    chain_states,
    is_suite,
    resolve_run_or_job,
)
from gymslurm.launcher.settings import (
    BenchmarkSettings,
    load_benchmark,
    merge_secrets,
    split_secrets,
)
from gymslurm.site.backend import (
    Backend,
    ClusterSetBackend,
    SlurmBackend,
)
from gymslurm.site.placement import parse_shard_numbers


def parse_shard_selection(text: str, shards: int) -> tuple[str | None, set[int]]:
    """``--shards``: ``failed`` / ``stalled`` (a verdict, chosen by status) or ``0,3,7-9`` (pure).

    Returns the verdict word (None for explicit numbers) and the explicit shards; a number outside
    0..shards-1 or an unreadable item is a ConfigError before anything is written.
    """
    word = text.strip().lower()
    if word in SELECTABLE_VERDICTS:
        return SELECTABLE_VERDICTS[word], set()
    if not all(part.strip().replace("-", "").isdigit() for part in word.split(",")):
        raise ConfigError(
            f"--shards {text!r}: expected failed, stalled, exhausted, cancelled, paused or shard numbers "
            "such as 0,3,7-9"
        )
    return None, parse_shard_numbers(word, shards, "--shards")


SELECTABLE_VERDICTS = {
    "failed": "FAILED",
    "stalled": "STALLED",
    "exhausted": "EXHAUSTED",
    "cancelled": "CANCELLED",
    "paused": "PAUSED",
}


def _say_new_chains(todo: list[int], jobs: dict[int, str], fresh: bool = True) -> None:
    budgets = "fresh retry and walltime budgets" if fresh else "the budgets they had spent"
    if len(todo) <= 20:
        for shard in todo:
            print(f"shard {shard}: new chain, first link {jobs[shard]} ({budgets})")
    else:
        arrays = " ".join(sorted({job.split("_")[0] for job in jobs.values()}))
        print(
            f"{len(todo)} shards ({array_indices(todo, None)}): new chains with {budgets}, first links "
            f"in job array(s) {arrays}"
        )


def _budget_to_raise(run: RunDir, info: RunInfo, gpu_hours_added: float) -> float | None:
    """The run's GPU budget now; refused when ``--gpu-hours`` would raise a budget it does not have."""
    budget = gpu_budget(info.gpu_budget, run.aggregate_ledger.read())
    if gpu_hours_added and budget is None:
        raise ConfigError(
            f"run {run.name} has no budget.gpu_hours to raise; --gpu-hours applies to a run with one"
        )
    return budget


def _record_resubmit(run: RunDir, gpu_hours_added: float, budget: float | None) -> None:
    run.aggregate_ledger.append(Resubmitted(gpu_hours_added=gpu_hours_added))
    if gpu_hours_added:
        print(f"budget.gpu_hours raised by {gpu_hours_added:g} to {(budget or 0) + gpu_hours_added:g}")


def load_run_config(
    name: str, overrides: list[str], chains: int | None = None
) -> tuple[BenchmarkSettings, dict[str, Any]]:
    """A benchmark's settings, or a suite's link settings (its stack and chains: docs/suites.md;
    ``chains``: the run's, which an edited suite file does not change)."""
    from gymslurm.launcher.suite_settings import chain_settings, is_suite_file, load_suite, suite_path

    path = suite_path(name)
    if path is not None and is_suite_file(path):
        return chain_settings(load_suite(name, overrides), chains)
    return load_benchmark(name, overrides)


def resubmit(
    ref: str,
    benchmark: str,
    overrides: list[str],
    run_root: str | None,
    shards: str | None = None,
    *,
    gpu_hours_added: float = 0.0,
    reset_budget: bool = True,
) -> int:
    """``gymslurm resubmit RUN|JOB_ID BENCHMARK [--shards SEL] [--gpu-hours +H]``: fresh budgets and new
    chains for the unfinished (or selected) shards, one ``sbatch`` per job array; ``--gpu-hours``
    raises ``budget.gpu_hours``, recorded in the aggregate ledger before any new link starts."""
    workdir = Path.cwd()
    settings, data = load_run_config(benchmark, overrides)
    run = resolve_run_or_job(ref, (workdir / (run_root or settings.run_root)).resolve())
    info = run.read_info()
    settings, data = load_run_config(benchmark, [*info.overrides, *overrides], chains=info.shards)
    if settings.name != info.benchmark:
        raise ConfigError(f"run {run.name} is of benchmark {info.benchmark!r}, not {settings.name!r}")
    verdict_word, explicit = parse_shard_selection(shards, info.shards) if shards else (None, set())
    clean, secrets = split_secrets(data)
    saved = saved_config(run)
    merge_secrets(saved, secrets)  # run.json keeps no secret: one given as an override must be given again
    if clean != saved:
        raise ConfigError(
            f"the benchmark {settings.name!r} no longer matches what run {run.name} was submitted with "
            f"({run.config_path}); resubmit with the same configuration, or submit a new run"
        )
    reopened: tuple[int, ...] = ()
    if is_suite(run):  # an edited suite file: benchmarks added or dropped (suite_change.py)
        from gymslurm.commands.suite_change import apply_change, check_unchanged
        from gymslurm.launcher.suite_settings import load_suite

        suite = load_suite(benchmark, [*info.overrides, *overrides])
        if shards:  # the shards' own benchmarks run again as saved: a file edited since is refused
            secrets = {**secrets, **check_unchanged(run, suite, info.shards, workdir)}
        else:
            change, members = apply_change(run, suite, info.shards, workdir)
            secrets, reopened = {**secrets, **members}, tuple(change.reopened)
    backend = run_backend(run)
    with queuing_taken_over(run, backend, settings.slurm.lookahead, complete=bool(shards)) as free:
        if not free:
            raise ConfigError(f"run {run.name}: its submit is still queuing first links; wait for it to end")
        selection = (verdict_word, explicit)
        return _restart(
            run,
            settings,
            backend,
            shards=shards,
            secrets=secrets,
            selection=selection,
            gpu_hours_added=gpu_hours_added,
            reset_budget=reset_budget,
            reopened=list(reopened),
        )


def saved_config(run: RunDir) -> Any:
    """The configuration ``run`` was submitted with (its ``benchmark.yaml``); a file that cannot be
    read as YAML (corrupt, truncated, not UTF-8) is a one-line error naming it, never a traceback."""
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    try:
        return OmegaConf.to_container(OmegaConf.load(run.config_path), resolve=False)
    except (OSError, UnicodeDecodeError, YAMLError, OmegaConfBaseException, ValueError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(
            f"run {run.name}: its saved configuration {run.config_path} cannot be read ({first}); "
            "restore it from a backup of the run folder, or submit a new run"
        ) from None


def _restart(
    run: RunDir,
    settings: BenchmarkSettings,
    backend: Backend,
    *,
    shards: str | None,
    secrets: dict[str, Any],
    selection: tuple[str | None, set[int]],
    gpu_hours_added: float,
    reset_budget: bool,
    reopened: list[int] = (),  # type: ignore[assignment]
) -> int:
    """resubmit's restart of the chosen shards, under the run's submit lock; ``reopened``: DONE
    suite chains that run again for a benchmark added to the suite."""
    info, (verdict_word, explicit) = run.read_info(), selection
    queue = backend.queue()
    budget = _budget_to_raise(run, info, gpu_hours_added)
    states = chain_states(run, info.shards)[:-1]
    unfinished = [
        shard
        for shard, state in enumerate(states)
        if not (
            state.last_decision is not None
            and state.last_decision.decision == Decision.DONE
            and not state.cancelled
        )
    ]
    if verdict_word is not None:
        from gymslurm.launcher.views.status import run_status

        rows = run_status(run, backend).shards
        todo = [row.shard for row in rows if row.verdict == verdict_word]
    elif shards:
        todo = sorted(explicit)
    else:
        todo = sorted({*unfinished, *(reopened or [])})
        unfinished = todo
    live = [s for s in (todo if shards else range(info.shards)) if live_jobs(states[s], queue)]
    live_aggregation = live_jobs(chain_states(run, info.shards)[-1], queue)
    if live or (not shards and live_aggregation):
        which = f"shard(s) {array_indices(live, None)}" if live else "the aggregation"
        raise ConfigError(
            f"run {run.name}: {which} still has live jobs; wait for them or 'gymslurm cancel {run.name}'"
        )
    done = [s for s in todo if s not in unfinished]
    if done:
        raise ConfigError(
            f"run {run.name}: shard(s) {array_indices(done, None)} are DONE; nothing to restart there"
        )
    os.environ[SECRETS_ENV] = json.dumps(secrets)
    if todo or not shards:  # before any new link starts: links read the budget's raises there
        _record_resubmit(run, gpu_hours_added, budget)
    for shard in todo:
        run.ledger(shard).append(Resubmitted(reset_budget=reset_budget))
    lookahead = settings.slurm.lookahead
    jobs = _resubmit_links(run, backend, info, todo, settings.slurm.max_running, lookahead=lookahead)
    _say_new_chains(todo, jobs, fresh=reset_budget)
    if shards and not todo:
        print(f"run {run.name}: no shard matches --shards {shards}; nothing was submitted")
        return ExitCode.DONE
    if not unfinished:
        from gymslurm.job.aggregation import maybe_submit_aggregation

        job_id = maybe_submit_aggregation(run, settings, backend, None)
        print(f"every shard is done; aggregation {'queued as ' + job_id if job_id else 'not needed'}")
    return ExitCode.DONE


def _resubmit_links(
    run: RunDir,
    backend: Backend,
    info: RunInfo,
    todo: list[int],
    max_running: int | None,
    *,
    lookahead: int,
) -> dict[int, str]:
    """The new first links: one array per links script (one ``sbatch`` for up to MaxArraySize shards);
    link by link, each with its lookahead (recorded)."""
    array = run.read_array() if info.array else None
    if array is None or not isinstance(backend, SlurmBackend | ClusterSetBackend):
        return {shard: queue_first_links(run, shard, backend, "resubmit", lookahead)[0] for shard in todo}
    jobs: dict[int, str] = {}
    by_base: dict[tuple[int, str | None], list[int]] = {}  # a run across clusters: by base and cluster
    for shard in todo:
        by_base.setdefault((array.base(shard), info.cluster_of(shard)), []).append(shard)
    for (base, cluster), group in by_base.items():
        target = backend.on(cluster) if isinstance(backend, ClusterSetBackend) and cluster else backend
        assert isinstance(target, SlurmBackend)
        indices = array_indices([s - base for s in group], max_running)
        job = target.submit_array(run.links_script_for(base), indices)
        jobs.update({s: f"{job}_{s - base}" for s in group})
        for shard in group:
            run.ledger(shard).append(Submitted(job_id=jobs[shard], by="resubmit"))
        after = job
        for _ in range(lookahead - 1):  # the first links' spares, as submit queues them
            after = target.submit_array(run.links_script_for(base), indices, after=[after])
            for shard in group:
                run.ledger(shard).append(Submitted(job_id=f"{after}_{shard - base}", by="resubmit (spare)"))
    return jobs


def main(argv: list[str]) -> int:
    """``gymslurm resubmit``: parse its arguments and run it."""
    parser = argparse.ArgumentParser(
        prog="gymslurm resubmit", description="Fresh budgets and new chains for a run's unfinished shards."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("benchmark", help="the benchmark the run was submitted with")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (must not change the experiment)")
    parser.add_argument(
        "--run-root", default=None, help="where runs live (default: the benchmark's run_root)"
    )
    parser.add_argument(
        "--shards",
        default=None,
        metavar="SEL",
        help="restart only these shards: failed, stalled, exhausted, cancelled (by status), or 0,3,7-9",
    )
    parser.add_argument(
        "--gpu-hours",
        type=_gpu_hours_raise,
        default=0.0,
        metavar="+H",
        help="raise the run's budget.gpu_hours by H GPU-hours (docs/cost.md)",
    )
    args = parser.parse_intermixed_args(argv)

    return resubmit(
        args.run, args.benchmark, args.overrides, args.run_root, args.shards, gpu_hours_added=args.gpu_hours
    )


def _gpu_hours_raise(text: str) -> float:
    """``+H`` (or ``H``): a positive number of GPU-hours to add to the budget."""
    try:
        value = float(text.removeprefix("+"))
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a raise of the budget: give +H, H > 0 GPU-hours")
    return value
