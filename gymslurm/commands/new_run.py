"""A new run on the login node: what ``gymslurm submit`` (and ``submit --reverify``) does.

:func:`create_run` resolves the benchmark once, refuses when a run of the same benchmark is still live,
creates the run directory (rundir.py), slices the dataset into shards, renders and saves every
script, then queues the first link of each shard's chain and records it in the shard's ledger.
Everything after that happens inside the jobs (``job/``), so the login-side process may die right
after submitting: a link already queued runs, starts its own successor and writes its own ledger.
Secrets go to the jobs only through the environment (``GYMSLURM_SECRETS``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from secrets import token_hex
from typing import Any, Literal, Protocol
from uuid import uuid4

from omegaconf import OmegaConf

from gymslurm.clock import utc_now_ms
from gymslurm.commands.doctor import Site, read_sites
from gymslurm.commands.wait import wait_for_run
from gymslurm.errors import ConfigError
from gymslurm.exitcodes import ExitCode
from gymslurm.formats import json_object
from gymslurm.identity import redact_value
from gymslurm.job.collector_process import environment_problem
from gymslurm.job.first_links import (
    finish_queuing,
    queue_first_links,
    queuing,
    record_plan,
    submit_arrays,
)
from gymslurm.job.stack import stack_lines
from gymslurm.launcher.notify import notify_submitted
from gymslurm.launcher.run_site import live_jobs, run_backend
from gymslurm.launcher.rundir import (
    SECRETS_ENV,
    RunDir,
    RunInfo,
    atomic_write,
    chain_states,
    dataset_lines,
    find_runs,
    shard_slice,
)
from gymslurm.launcher.server_placement import gres_directive, job_gpus, placement_directives
from gymslurm.launcher.settings import (
    BenchmarkSettings,
    early_signal_warning,
    split_secrets,
)
from gymslurm.launcher.visible_credentials import visible_credential_warnings
from gymslurm.site.arrays import ArrayPlan, plan_arrays
from gymslurm.site.backend import (
    Backend,
    ClusterSetBackend,
    SlurmBackend,
    backend_name,
    choose_backend,
)
from gymslurm.site.job_names import aggregation_job_name, links_job_name, shard_job_name
from gymslurm.site.local import LocalBackend
from gymslurm.site.placement import blocks_for
from gymslurm.site.render import (
    AGGREGATE_TEMPLATE,
    LINK_TEMPLATE,
    ScriptValues,
    command_line,
    directives_block,
    env_setup_block,
    load_template,
    render,
    servers_block,
)
from gymslurm.site.scriptsafe import path_directive_problem
from gymslurm.tasks import stamp_task_indices


def resolve_backend_name(settings: BenchmarkSettings, forced: str | None) -> Literal["slurm", "local"]:
    """``slurm`` or ``local``: the command-line choice, else the benchmark's, else auto."""
    return backend_name(forced or settings.backend)


def backend_for(
    run: RunDir, name: str, accounting: bool | None = None, cluster: str | None = None
) -> Backend:
    """The backend that runs (or ran) ``run`` (``accounting`` False: never ask ``sacct``), on ``cluster``."""
    return choose_backend(name, local_dir=run.local_dir, accounting=accounting, cluster=cluster)


ARRAY_TASK, TASK_VARIABLE = "__SLURM_ARRAY_TASK_ID__", '"$SLURM_ARRAY_TASK_ID"'


def render_scripts(
    run: RunDir, settings: BenchmarkSettings, workdir: Path, plan: ArrayPlan | None = None
) -> dict[Path, str]:
    """Every script of the run, by the path it is saved at (pure apart from reading templates).

    ``plan`` (Slurm): one link script per job array's range of shards (``scripts/links.sbatch``
    for shards 0.., ``scripts/links-BASE.sbatch`` from BASE; the shard is BASE + the array task id)
    instead of one script per shard (the local backend).
    """
    slurm = settings.slurm
    mail = [f"--mail-{k}={v}" for k, v in (("type", slurm.mail_type), ("user", slurm.mail_user)) if v]
    common = {
        "run_name": run.name,
        "signal_lead": slurm.signal_lead_s,
        "workdir": str(workdir),
        "directives": directives_block(
            slurm.partition, slurm.account, slurm.qos, [*slurm.extra_directives, *mail]
        ),
        "env_setup": env_setup_block(slurm.env_setup),
    }
    link_common = {
        **common,
        "directives": directives_block(
            slurm.partition,
            slurm.account,
            slurm.qos,
            [
                *placement_directives(settings.servers, slurm.extra_directives),
                *gres_directive(settings.servers, slurm.gpus, slurm.extra_directives),
                *slurm.extra_directives,
                *mail,
            ],
        ),
    }
    servers = servers_block(stack_lines(settings.servers))
    base = [slurm.interpreter, "-m", "gymslurm", "chain-step", "--run-dir", str(run.root)]
    scripts = {}
    link = load_template(LINK_TEMPLATE)
    for first, _ in [] if plan is None else plan.parts:
        path = run.links_script_for(first)
        task = TASK_VARIABLE if first == 0 else f'"$(({first} + SLURM_ARRAY_TASK_ID))"'
        values = ScriptValues(
            shard=f"{first} + $SLURM_ARRAY_TASK_ID (the array task id)"
            if first
            else "$SLURM_ARRAY_TASK_ID (the array task id)",
            job_name=links_job_name(run.name),
            script_path=f"--array=TASK {path} (TASK = the shard{f' - {first}' if first else ''}; "
            "use the job id the ledger names)",
            log_path=str(run.links_log_pattern_for(first)),
            ledger_path=str(run.root / "shards" / "<shard>" / "ledger.jsonl"),
            time_limit=slurm.time,
            command=command_line([*base, "--shard", ARRAY_TASK]).replace(ARRAY_TASK, task),
            servers=servers,
            **link_common,  # type: ignore[arg-type]
        )
        scripts[path] = render(link, values)
    for shard in range(0 if plan is not None else settings.shards):
        values = ScriptValues(
            shard=f"{shard:03d}",
            job_name=shard_job_name(run.name, shard),
            script_path=str(run.script(shard)),
            log_path=str(run.log_pattern(shard)),
            ledger_path=str(run.ledger(shard).path),
            time_limit=slurm.time,
            command=command_line([*base, "--shard", str(shard)]),
            servers=servers,
            **link_common,  # type: ignore[arg-type]
        )
        scripts[run.script(shard)] = render(link, values)
    values = ScriptValues(
        shard="aggregate",
        job_name=aggregation_job_name(run.name),
        script_path=str(run.script(None)),
        log_path=str(run.log_pattern(None)),
        ledger_path=str(run.aggregate_ledger.path),
        time_limit=settings.aggregation.time,
        command=command_line([*base, "--aggregate"]),
        **common,  # type: ignore[arg-type]
    )
    scripts[run.script(None)] = render(load_template(AGGREGATE_TEMPLATE), values)
    return scripts


def new_run_dir(settings: BenchmarkSettings, workdir: Path, stamp: str | None = None) -> RunDir:
    """A fresh ``<run_root>/<benchmark>-<UTC time>`` (suffixed when taken), always inside ``run_root``.

    Its path lands in ``#SBATCH --output=`` lines, so it must be one that sbatch can read there. A
    name already taken by anything — a folder, a file, a link to nothing planted there — is skipped,
    never followed. ``stamp``: the time part (tests); by default the UTC time and a random tail.
    """
    where = workdir / settings.run_root
    if problem := planted_run_root(where):
        raise ConfigError(problem)
    root = where.resolve()
    if problem := path_directive_problem("run_root", str(root)):
        raise ConfigError(f"run_root {settings.run_root!r} resolves to {root}: {problem}")
    # A random tail: two runs of one benchmark in the same second (in any run_root) never share a
    # run name, nor therefore a job name (gs-<run name>).
    stamp = stamp or f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{token_hex(2)}"
    candidate, n = root / f"{settings.name}-{stamp}", 1
    while os.path.lexists(candidate):
        n += 1
        candidate = root / f"{settings.name}-{stamp}-{n}"
    if candidate.parent != root:  # the name is a slug (settings), so this holds; say so if not
        raise ConfigError(f"the run directory {candidate} would not be inside run_root {root}")
    return RunDir(candidate)


def planted_run_root(path: Path) -> str | None:
    """Why ``run_root`` cannot hold runs when a name other than a folder sits at its path, else None.

    A link to a folder is a folder (a scratch link); a link to nothing is never followed (gymslurm
    would create the folder it names, wherever that is), and a file is not a folder.
    """
    for part in [path, *path.parents]:
        if part.is_symlink() and not part.exists():
            return (
                f"run_root {path}: {part} is a symbolic link to {os.readlink(part)!r}, which does not exist; "
                "gymslurm never creates a folder through a link: remove the link (or create its target), "
                "then submit again"
            )
        if part.exists() and not part.is_dir():
            return f"run_root {path}: {part} is a file, not a folder; move it away or choose another run_root"
    return None


def create_run_dir(run: RunDir) -> None:
    """Create the run directory 0700, exclusively; a name planted there meanwhile is a clear refusal."""
    run.root.parent.mkdir(parents=True, exist_ok=True)
    try:
        run.root.mkdir(mode=0o700)
    except FileExistsError:
        what = (
            f"a symbolic link to {os.readlink(run.root)!r}"
            if run.root.is_symlink()
            else "a folder"
            if run.root.is_dir()
            else "a file"
        )
        raise ConfigError(
            f"the run directory {run.root} was taken while submit ran: {what} appeared at its path "
            "(another process or user put it there); gymslurm never writes into a name it did not "
            "create: nothing was submitted, submit again (and find out who planted it)"
        ) from None
    run.root.chmod(0o700)  # whatever the umask: only the job user reads a run (docs/security.md)


def chain_is_live(run: RunDir, queue: dict[str, Any], shards: int) -> bool:
    """True while a job of any chain (or the aggregation) of ``run`` is queued or running."""
    return any(live_jobs(state, queue) for state in chain_states(run, shards))


def _queue_for(run: RunDir, info: RunInfo, slurm_queue: dict[str, Any] | None) -> dict[str, Any]:
    if info.backend == "local":
        return LocalBackend(run.local_dir).queue()
    if info.placement is not None:  # a run across clusters: one squeue per cluster, ids name theirs
        return run_backend(run).queue()
    if info.cluster is not None:  # a run on another cluster: that cluster's queue
        return backend_for(run, "slurm", cluster=info.cluster).queue()
    return slurm_queue if slurm_queue is not None else SlurmBackend().queue()


def refuse_if_live(
    settings: BenchmarkSettings,
    workdir: Path,
    config: str | None = None,
    secrets: dict[str, Any] | None = None,
) -> None:
    """Refuse to submit a benchmark while one of its runs is live. A run whose submit was killed midway
    is finished first (its first links queued: job/first_links.finish_queuing), with this submit's
    ``secrets`` when it is the same benchmark (its saved ``config`` is this one's)."""
    slurm_queue: dict[str, Any] | None = None
    for run in find_runs((workdir / settings.run_root).resolve()):
        info = run.read_info()
        if info.benchmark != settings.name:
            continue
        same = config is not None and run.config_path.exists() and run.config_path.read_text() == config
        finish_queuing(run, "submit", secrets if same else None)
        queue = _queue_for(run, info, slurm_queue)
        if info.backend == "slurm" and info.cluster is None and info.placement is None:
            slurm_queue = queue
        if chain_is_live(run, queue, info.shards):
            raise ConfigError(
                f"benchmark {settings.name!r} already has a live run: {run.root}. Watch it with "
                f"'gymslurm status {run.name}', or stop it with 'gymslurm cancel {run.name}' first"
            )


def prepare_dataset(settings: BenchmarkSettings, workdir: Path) -> Path:
    """The dataset path, created with ``dataset_command`` when it does not exist yet.

    The path itself is never followed when written: a dangling link there is refused (it would make
    ``dataset_command`` write wherever the link points).
    """
    path = Path(os.path.abspath(workdir / settings.dataset))
    if path.exists():
        return path.resolve()
    if path.is_symlink():
        raise ConfigError(
            f"dataset {path} is a symbolic link to {os.readlink(path)!r}, which does not exist; gymslurm "
            "never creates a dataset through a link: remove the link (or point it at the real file), then "
            "submit again"
        )
    if settings.dataset_command is None:
        raise ConfigError(
            f"dataset {path} does not exist and the benchmark has no dataset_command to create it"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = [part.replace("{dataset}", str(path)) for part in settings.dataset_command]
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not path.exists():
        raise ConfigError(
            f"dataset_command {' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}"
        )
    return path


_FIX_ROW = "fix that line (one task per line, {...}) and submit again"


def check_dataset(path: Path, shards: int) -> int:
    """The dataset's row count, once every row is a JSON object on one UTF-8 line within the line
    limit, and there are at least ``shards`` rows. Read as a stream (a 1 GB line is refused, not held);
    each refusal names the user's file and line, before any run file exists."""
    from gymslurm.store.jsonl import bounded_lines

    rows = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(bounded_lines(handle, path), start=1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ConfigError(
                    f"{path}, line {number}: is not UTF-8 (byte {error.start + 1}); a dataset is JSONL "
                    "in UTF-8: convert the file (e.g. iconv -t UTF-8) and submit again"
                ) from None
            json_object(text, f"{path}, line {number}:", ConfigError, _FIX_ROW)
            rows += 1
    if not rows:
        raise ConfigError(f"the dataset {path} has no rows: nothing to evaluate. Check the file")
    if shards > rows:
        raise ConfigError(
            f"shards={shards} is more than the {rows} row(s) of the dataset {path}: some shards would have "
            f"nothing to do. Use shards={rows} or fewer"
        )
    return rows


def split_dataset(dataset: Path, run: RunDir, shards: int, array: bool = False) -> list[int]:
    """Write each shard's contiguous slice of the dataset, rows stamped with their dataset-wide task
    index (:func:`gymslurm.tasks.stamp_task_indices`); returns the row counts.

    ``array``: write one copy of the dataset instead; each shard's first link cuts its own slice
    (:func:`gymslurm.launcher.rundir.ensure_shard_input`), so submit writes one file, not N.
    """
    lines = stamp_task_indices(dataset_lines(dataset.read_bytes()))
    if array:
        atomic_write(run.dataset_copy, b"".join(lines))
        return [len(shard_slice(lines, shards, shard)) for shard in range(shards)]
    counts = []
    for shard in range(shards):
        part = shard_slice(lines, shards, shard)
        atomic_write(run.shard_input(shard), b"".join(part))
        counts.append(len(part))
    return counts


class RunInputs(Protocol):
    """What a run collects from: prepared after every refusal, written once the run's folder exists."""

    def prepare(self) -> None:
        """Create what is missing (a dataset), before the run folder exists."""

    def write(self, run: RunDir, array: bool) -> list[int]:
        """Write the run's inputs; the rows each chain collects."""
        ...

    def secrets(self) -> dict[str, Any]:
        """Secrets the jobs need besides the run's own config's (added to the bundle)."""
        ...


class BenchmarkInputs:
    """A benchmark's dataset, stamped and cut into its shards (``submit BENCHMARK``)."""

    def __init__(self, settings: BenchmarkSettings, workdir: Path) -> None:
        self.settings, self.workdir, self.dataset = settings, workdir, Path()

    def prepare(self) -> None:
        """Create the dataset with ``dataset_command`` when it does not exist yet, then check it: a bad
        row, an empty dataset or more shards than rows names the user's file before the run exists."""
        self.dataset = prepare_dataset(self.settings, self.workdir)
        check_dataset(self.dataset, self.settings.shards)

    def write(self, run: RunDir, array: bool) -> list[int]:
        """Each shard's slice (or, for an array run, one copy the first links cut)."""
        return split_dataset(self.dataset, run, self.settings.shards, array)

    def secrets(self) -> dict[str, Any]:
        """None besides the benchmark's."""
        return {}


def create_run(
    settings: BenchmarkSettings,
    data: dict[str, Any],
    overrides: list[str],
    backend_kind: Literal["slurm", "local"],
    workdir: Path,
    *,
    dry_run: bool,
    wait: bool,
    reverify_of: str | None = None,
    inputs: RunInputs | None = None,
    after_ok: list[str] | None = None,
) -> int:
    """Create a run of ``settings`` and queue its chains (``submit``; ``submit --reverify`` with the
    run it re-grades in ``reverify_of``; a suite's ``inputs``: its benchmarks); with ``wait``, stay
    until it ended. ``after_ok`` (Slurm): jobs the first links wait for to complete successfully."""
    inputs = BenchmarkInputs(settings, workdir) if inputs is None else inputs
    clean, secrets = split_secrets(data)
    if backend_kind == "local" and (wide := [s.name for s in settings.servers if (s.nodes or 1) > 1]):
        raise ConfigError(
            f"server(s) {', '.join(wide)} span several nodes (nodes > 1), which needs Slurm: the local "
            "backend runs every server on this host (use nodes: 1 or leave nodes unset)"
        )
    site = Site(None, None, {}) if backend_kind != "slurm" or dry_run else read_sites(settings)
    if site.refusal:
        raise ConfigError(site.refusal)
    plan = (
        plan_arrays(
            settings.shards,
            site.limits,
            settings.slurm.max_running,
            settings.slurm.array_size,
            lookahead=settings.slurm.lookahead,
        )
        if backend_kind == "slurm"
        else None
    )
    run = new_run_dir(settings, workdir)
    if too_long := environment_problem(settings, run, secrets):
        raise ConfigError(too_long)
    scripts = render_scripts(run, settings, workdir, plan)
    if backend_kind == "slurm" and (warning := early_signal_warning(settings.slurm)):
        print(f"gymslurm submit: warning: {warning}", file=sys.stderr)
    for warning in visible_credential_warnings(settings):
        print(f"gymslurm submit: warning: {warning}", file=sys.stderr)
    if dry_run:
        for path, text in scripts.items():
            print(f"# ===== {path} (not written: --dry-run) =====\n{text}")
        print(f"# dry run: {settings.shards} chain(s) on the {backend_kind} backend; nothing was submitted")
        return ExitCode.DONE
    saved_config = OmegaConf.to_yaml(OmegaConf.create(clean))
    refuse_if_live(settings, workdir, saved_config, {**secrets, **inputs.secrets()})
    inputs.prepare()
    create_run_dir(run)
    clusters = settings.slurm.clusters if backend_kind == "slurm" else None
    placement = None if clusters is None else blocks_for(settings.shards, clusters)
    info = RunInfo(
        name=run.name,
        benchmark=settings.name,
        overrides=redact_value(overrides),
        created_at=utc_now_ms(),
        backend=backend_kind,
        shards=settings.shards,
        workdir=str(workdir),
        output_stem=settings.output_stem,
        infra_retry_limit=settings.slurm.infra_retry_limit,
        max_walltime_s=settings.slurm.max_walltime_s,
        accounting=site.accounting,
        array=plan is not None,
        cluster=settings.slurm.cluster,
        placement=placement,
        aggregate_cluster=None if placement is None else settings.slurm.aggregation_cluster,
        reverify_of=reverify_of,
        gpus=job_gpus(settings.servers, settings.slurm.declared_gpus),
        gpu_budget=settings.budget.gpu_hours,
        budget_warn_at=settings.budget.warn_at,
        report_share=settings.report.share,
        lookahead=settings.slurm.lookahead,
        uid=uuid4().hex,
        aggregation=settings.aggregation.enabled,
    )
    atomic_write(run.info_path, info.model_dump_json(indent=2).encode())
    backend = (
        run_backend(run)
        if placement is not None
        else backend_for(run, backend_kind, site.accounting, settings.slurm.cluster)
    )
    atomic_write(run.config_path, saved_config.encode())
    if isinstance(backend, LocalBackend):  # its queue runs at most slurm.max_running jobs at once
        backend.limit(settings.slurm.max_running)
    for path, text in scripts.items():
        atomic_write(path, text.encode())
    counts = inputs.write(run, plan is not None)
    (run.root / "logs").mkdir(mode=0o700, exist_ok=True)
    os.environ[SECRETS_ENV] = json.dumps({**secrets, **inputs.secrets()})
    if plan is not None:  # before the mark: whoever completes a killed submit queues from it
        record_plan(run, settings.shards, settings.slurm.max_running, plan, after_ok)
    with queuing(run):  # a submit killed midway leaves the rest to the run's first job (first_links.py)
        if plan is not None:
            assert isinstance(backend, SlurmBackend | ClusterSetBackend)
            throttle = settings.slurm.max_running
            submit_arrays(
                run,
                backend,
                settings.shards,
                plan,
                max_running=throttle,
                counts=counts,
                lookahead=settings.slurm.lookahead,
                placement=placement,
                after_ok=after_ok,
            )
        for block in placement or []:
            print(f"shards {block.first}..{block.first + block.count - 1}: cluster {block.cluster}")
        if placement is not None:
            print(f"the aggregation runs on cluster {info.aggregate_cluster} once every shard's chain ended")
        for shard in [] if plan is not None else range(settings.shards):
            first, *then = queue_first_links(run, shard, backend, "submit", settings.slurm.lookahead)
            print(f"shard {shard}: {counts[shard]} rows, first link {first} (then {' '.join(then)})")
    print(f"run {run.name} submitted ({backend_kind}); watch it with: gymslurm status {run.root}")
    facts = {"shards": settings.shards, "backend": backend_kind, "path": str(run.root)}
    notify_submitted(run, settings.notify, settings.name, facts)
    return wait_for_run(run, backend, settings.aggregation.enabled) if wait else 0
