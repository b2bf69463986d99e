"""``gymslurm submit --reverify RUN``: judge-only re-grading of a run's saved answers, as Slurm jobs.

A re-grading is a run of its own (``<benchmark>-reverify-<time>``, beside the source run), made of the
same parts as a collection: the source run's saved benchmark (its ``config.yaml``, with the overrides
given now on top), one chain per shard of the source run, the benchmark's servers started in each
job's allocation, the aggregation job at the end. Only the command a link runs differs: instead of
``gymslurm collect`` it runs ``gymslurm reverify --judge-failed-only +require_complete=true`` from the
source run's shard output into the new run's (job/collector_process.py, ``reverify_argv``),
with the grader the collector is given (docs/aggregation.md, "Judge-only reverification").

Resumable like a collection: each re-grade is journaled as the judge answers it; a link stopped by
its time limit, a signal or a failure leaves the journal, and the next link of the chain asks the
judge only for what is missing. A judge that does not answer is a retry of the chain (exit 1); the
shard's output is published once every eligible answer is re-graded. The source run is never
written (spec 000, "judge-only recovery").

Refused before anything is written: a source run that is still live (its collection could add
answers while they are re-graded), a source that is itself a re-grading, a shard count other than
the source's, and a benchmark whose collector is given neither ``+environment_server_url`` nor NeMo
Gym's ``+environment_server_name`` (with the head server: reverify finds the grader as collect finds
its server; ``reverify.overrides`` can give it, ``{servers.NAME.url}`` included).
"""

from __future__ import annotations

from pathlib import Path

from gymslurm.commands.new_run import chain_is_live, create_run
from gymslurm.errors import ConfigError
from gymslurm.job.collector_process import reverify_argv
from gymslurm.launcher.run_site import run_backend
from gymslurm.launcher.rundir import RunDir, resolve_run_or_job
from gymslurm.launcher.settings import BenchmarkSettings, load_benchmark, validate

SUFFIX = "-reverify"


def grader_problem(settings: BenchmarkSettings, source: RunDir) -> str | None:
    """Why a job could not name its grader (no ``+environment_server_url`` or ``+environment_server_name``
    would reach reverify), or None."""
    urls = {server.name: f"http://{server.name}.invalid:1" for server in settings.servers}
    argv = reverify_argv(settings, source, 0, urls, source)
    named = ("environment_server_url=", "environment_server_name=")
    if any(item.lstrip("+~").startswith(named) for item in argv):
        return None
    return (
        "the benchmark gives its collector neither +environment_server_url nor NeMo Gym's "
        "+environment_server_name (a server's collector_override or collector.overrides), and reverify "
        "needs its grader: give it with reverify.overrides='[+environment_server_url={servers.NAME.url}]' "
        "(NAME: the server that grades; for a NeMo Gym legacy server, its resources server, with "
        "+environment_protocol=legacy_agent)"
    )


def submit_reverify(
    ref: str, overrides: list[str], backend_name: str | None, dry_run: bool, *, wait: bool, run_root: str
) -> int:
    """``gymslurm submit --reverify RUN [overrides]``: queue the re-grading of RUN's saved answers."""
    source = resolve_run_or_job(ref, (Path.cwd() / run_root).resolve())
    info = source.read_info()
    if info.reverify_of is not None:
        raise ConfigError(
            f"run {source.name} is itself a re-grading (of {info.reverify_of}); give the run whose answers "
            "it re-graded"
        )
    workdir = Path(info.workdir)  # the saved benchmark's relative paths resolve where it was submitted
    _, data = load_benchmark(str(source.config_path), overrides)
    if data.get("shards", info.shards) != info.shards:
        raise ConfigError(
            f"run {source.name} has {info.shards} shards; a re-grading keeps them (shard N re-grades shard "
            f"N's answers): drop the shards= override"
        )
    data = {**data, "name": f"{info.benchmark}{SUFFIX}", "shards": info.shards}
    settings = validate(data, f"{source.config_path} (re-grading)")
    if problem := grader_problem(settings, source):
        raise ConfigError(f"cannot re-grade run {source.name}: {problem}")
    if not dry_run and chain_is_live(source, run_backend(source).queue(), info.shards):
        raise ConfigError(
            f"run {source.name} is still live: its collection may add answers while they are re-graded. Wait "
            f"for it ('gymslurm status {source.name}') or cancel it first"
        )
    kind = backend_name or info.backend
    if kind not in ("slurm", "local"):
        raise ConfigError(f"--backend {kind!r}: use slurm or local")
    print(f"re-grading the saved judge-failed answers of run {source.name} ({info.shards} shards)")
    return create_run(
        settings,
        data,
        overrides,
        "slurm" if kind == "slurm" else "local",
        workdir,
        dry_run=dry_run,
        wait=wait,
        reverify_of=str(source.root),
    )
