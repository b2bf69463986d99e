"""Preparing a run before any dispatch: fresh, resume, legacy import, or a partial initial cache.

Order matters and is the point of this module (spec 000): with the run lock held, a resume
validates the experiment's identity (semantic change refused naming the keys, operational drift
accepted with a warning and a journal line) and then the saved history, before a single byte
changes; only then are the resume's metadata writes made and torn tails repaired. A fresh
collection materializes (and so refuses bad rows) before it replaces an existing run.
``collector/collect.py`` runs the loop on what :func:`prepare` returns.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from gymslurm.collector.routing import Routing, nemo_gym_rows
from gymslurm.errors import ConfigError, EnvironmentUnreachableError, IdentityMismatchError, ManifestError
from gymslurm.identity import (
    IdentityDiff,
    build_identity,
    classify_differences,
    config_digest,
    describe_differences,
    identity_digest,
)
from gymslurm.nemogym_rows import RowPreparation, prompt_templates, unreadable_prompt_config
from gymslurm.progress import say
from gymslurm.resources import configs_dir
from gymslurm.settings import CollectSettings
from gymslurm.store.existing import ExistingRun, existing_run
from gymslurm.store.jsonl import bounded_lines
from gymslurm.store.manifest import Manifest
from gymslurm.store.paths import RunPaths, companion_refusal, others_own
from gymslurm.store.run_files import RunSpec
from gymslurm.store.store import Reconciliation, ResumePlan, RunStore
from gymslurm.tasks import (
    IdenticalRows,
    MaterializeOptions,
    TaskScan,
    identical_rows,
    iter_rows,
    iter_tasks,
    materialize,
    scan_tasks,
)
from gymslurm.version import __version__

Task = dict[str, Any]


# --- the Environment Server's resolved configuration (part of the identity) ------------------------


def unreadable_input(path: Path, error: OSError) -> str:
    """The refusal of an input dataset that cannot be read."""
    return f"cannot read the input dataset {path}: {error.strerror or error}. Check +input_jsonl_fpath="


def refuse_before_writing(settings: CollectSettings, paths: RunPaths) -> None:
    """The refusals that need no run file, made before the output folder or the run lock exist.

    A refusal writes nothing (docs/troubleshooting.md): an unreadable dataset, an output path that is
    a directory, a run's companion (either spelling), or a folder or run file of another user's are
    found here, before ``collect`` creates the folder and the lock.
    """
    output = paths.output
    try:
        with open(settings.input_jsonl_fpath, "rb"):
            pass
    except OSError as error:
        raise ConfigError(unreadable_input(settings.input_jsonl_fpath, error)) from None
    if output.is_dir():
        raise ConfigError(
            f"the output path {output} is a directory; +output_jsonl_fpath= names the results file "
            f"(e.g. {output / 'rollouts.jsonl'})"
        )
    if refusal := companion_refusal(paths.output_as_given, "the output path"):
        raise ConfigError(refusal)
    if theirs := others_own(paths):
        raise ConfigError(
            f"the output path {paths.output_as_given} would write where another user owns "
            f"{', '.join(map(str, theirs))}; gymslurm writes a run only into a folder and files of "
            "yours. Choose an output path in a folder of your own"
        )


def environment_config(settings: CollectSettings, fetch: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The Environment Server configuration for identity: given in settings, else fetched.

    Asked in the order of :meth:`CollectSettings.config_sources`: the head server when one is named;
    else the Environment Server(s) — several are each asked, and their answers keyed by the tasksets
    they serve (addresses are operational; what they serve is not) — and, when a server answers
    without a configuration (NeMo Gym's do not serve the endpoint), NeMo Gym's default head server.
    An Environment Server that cannot be reached stops here, retryably: it is needed to run anyway.
    """
    if settings.environment_config:
        return settings.environment_config
    if settings.head_server_url:
        return fetch(settings.head_server_url)
    by_url: dict[str, list[str]] = collections.defaultdict(list)
    for taskset, url in sorted(settings.environment_server_urls.items()):
        by_url[url].append(taskset)
    *servers, default_head = settings.config_sources()
    if not servers and not by_url:  # servers named, not addressed: the head server's config names them
        try:
            return fetch(default_head)
        except EnvironmentUnreachableError:
            raise
        except ConfigError as error:
            raise no_config_error([(default_head, error)]) from None
    try:
        if servers:
            return fetch(servers[0])
        by_tasksets = sorted(by_url.items(), key=lambda kv: kv[1])
        return {",".join(tasksets): fetch(url) for url, tasksets in by_tasksets}
    except EnvironmentUnreachableError:
        raise
    except ConfigError as refusal:
        asked = servers[0] if servers else "the Environment Servers"
        try:
            return fetch(default_head)
        except ConfigError as error:
            raise no_config_error([(asked, refusal), (default_head, error)]) from None


def no_config_error(refusals: list[tuple[str, ConfigError]]) -> ConfigError:
    """No source gave a configuration: a config error naming +head_server_url (exit 2)."""
    asked = "; ".join(
        f"{url} ({'unreachable' if isinstance(error, EnvironmentUnreachableError) else 'no configuration'})"
        for url, error in refusals
    )
    message = (
        f"no server answered GET /global_config_dict_yaml with the environment configuration the run's "
        f"identity needs (asked, in order: {asked}). Point +head_server_url=http://HOST:PORT at the "
        "NeMo Gym head server (gym env start prints its address; NeMo Gym's default is "
        "127.0.0.1:11000), or give the configuration with +environment_config={...}"
    )
    return ConfigError(message)


def identity_config(raw: dict[str, Any], env_config: dict[str, Any]) -> dict[str, Any]:
    """The unresolved collect configuration with the Environment Server's configuration filled in."""
    return {**raw, "environment_config": raw.get("environment_config") or env_config}


# --- preparing the run --------------------------------------------------------------------------


class Inputs:
    """The source dataset as read, and the tasks it materializes to (materialized on first use).

    A fresh collection never holds its tasks: :meth:`scan` materializes once as a stream to refuse
    bad rows (and to count and digest the tasks) before anything is replaced, and :attr:`stream`
    materializes again, as the store writes each task (docs/collector.md, "Memory"). A resume of a
    finished run whose source digest and identity match never needs the tasks. :attr:`tasks` (the
    whole list) is for a legacy import, which reads history against them before writing.
    """

    def __init__(self, settings: CollectSettings, routing: Routing | None = None) -> None:
        self.source_path = settings.input_jsonl_fpath
        self.nemo_gym_row = nemo_gym_rows(routing) if routing is not None else None
        self.agents = frozenset(routing.by_taskset) if routing is not None and routing.by_agent else None
        self.preparation = row_preparation(settings)
        self.source_digest = self._digest()  # streamed: a resume that needs no tasks holds no bytes
        self._settings = settings
        self._tasks: list[Task] | None = None
        self._scan: TaskScan | None = None
        self._identical: IdenticalRows | None = None

    @property
    def tasks(self) -> list[Task]:
        """The materialized tasks (ConfigError / InvalidRolloutIdError when the rows are bad)."""
        if self._tasks is None:
            self._tasks = materialize(self._rows(), self._options())
            self._no_tasks(len(self._tasks))
        return self._tasks

    def scan(self) -> TaskScan:
        """Count and digest of the tasks, every id checked, holding none (raises as :attr:`tasks`)."""
        if self._scan is None:
            self._scan = scan_tasks(self._iter_tasks)
            self._no_tasks(self._scan.count)
        return self._scan

    @property
    def stream(self) -> TaskStream:
        """The checked tasks as a stream the store writes one at a time (:meth:`scan` first)."""
        return TaskStream(self.scan().count, self._iter_tasks)

    def _iter_tasks(self) -> Iterator[Task]:
        if self._identical is None:  # a pass of its own, holding 8 bytes a row (tasks.py)
            self._identical = identical_rows(self._rows(), self._options())
        return iter_tasks(self._rows(), self._options(), self._identical)

    def _digest(self) -> str:
        sha = hashlib.sha256()
        try:
            with open(self.source_path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    sha.update(chunk)
        except OSError as error:
            raise ConfigError(unreadable_input(self.source_path, error)) from None
        return "sha256:" + sha.hexdigest()

    def _options(self) -> MaterializeOptions:
        settings = self._settings
        return MaterializeOptions(
            dataset_name=settings.taskset or self.source_path.stem,
            num_repeats=settings.num_repeats,
            limit=settings.limit,
            prompt_template=settings.prompt_template,
            prompt_field=settings.prompt_field,
            agents=self.agents,
            nemo_gym=self.preparation,
        )

    def _rows(self) -> Iterator[Task]:
        """The dataset's rows, read as they go; a dataset changed since its digest raises at the end."""
        path = self.source_path
        sha = hashlib.sha256()
        try:
            with open(path, "rb", buffering=1 << 20) as handle:
                lines = _hashed(bounded_lines(handle, path), sha.update)  # no line held past the limit
                yield from iter_rows(lines, str(path), self._settings.limit)
                for _ in lines:  # rows past the limit still count towards the digest
                    pass
        except OSError as error:
            raise ConfigError(unreadable_input(path, error)) from None
        if "sha256:" + sha.hexdigest() != self.source_digest:
            raise ConfigError(f"the input dataset {path} changed while it was read; run again once written")

    def _no_tasks(self, count: int) -> None:
        if not count:
            raise ConfigError(
                f"the input dataset {self.source_path} has no tasks (after limit={self._settings.limit}): "
                "nothing to collect"
            )


def load_prompt_config(path: str) -> tuple[str, str | None]:
    """``(user, system)`` of the NeMo Gym prompt config file at ``path`` (read from the working directory)."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise unreadable_prompt_config(path, error) from None
    return prompt_templates(path, text)


def row_preparation(settings: CollectSettings) -> RowPreparation:
    """NeMo Gym's preparation of flat rows the settings ask for (its prompt config file read here)."""
    user, system = load_prompt_config(settings.prompt_config) if settings.prompt_config else (None, None)
    overrides = settings.responses_create_params or {}
    return RowPreparation(user, system, overrides, seed=settings.num_repeats_add_seed)


def _hashed(handle: Iterable[bytes], update: Callable[[bytes], object]) -> Iterator[bytes]:
    for line in handle:
        update(line)
        yield line


@dataclass(frozen=True)
class TaskStream:
    """Checked tasks the store writes one at a time: their count, and a fresh pass on each ``iter``."""

    count: int
    make: Callable[[], Iterator[Task]]

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Task]:
        return self.make()


# --- preparing the run: fresh, resume, import ------------------------------------------------------

# Settings of one invocation that say nothing about what a run measures: left out of the identity so
# that they are not even reported as drift (resume_from_cache is always "changed" on a resume).
INVOCATION_KEYS = (
    "progress",
    "progress_interval_s",
    "summary",
    "resume_from_cache",
    "allow_unsafe_resume",
    "resubmit",
    "live_progress_interval_s",
    "stall_window_s",
)


@dataclass
class Prepared:
    """An open, validated, reconciled run, ready to dispatch."""

    store: RunStore
    load_tasks: Callable[[], list[Task]]
    reconciliation: Reconciliation
    # Whether preparing this run again with the same command would write and say nothing (no drift,
    # no overridden identity, no torn tail; an unverified identity is not vouched for): what a
    # finished run's seal assumes (collector/seal.py).
    repeats_quietly: bool = False


def build_run_identity(
    settings: CollectSettings, raw: dict[str, Any], fetch: Callable[[str], dict[str, Any]]
) -> dict[str, Any]:
    """The identity: the collect settings (invocation controls aside) and the server's resolved config."""
    config = {key: value for key, value in raw.items() if key not in INVOCATION_KEYS}
    if settings.prompt_config:  # the run measures the prompt the file holds, not its path alone
        user, system = load_prompt_config(settings.prompt_config)
        config["prompt_config_templates"] = {"user": user, "system": system}
    # collect.yaml's defaults: a null setting whose default is null is left out of the identity, so a
    # setting added later with a null default does not make older runs look different.
    defaults = yaml.safe_load((configs_dir() / "collect.yaml").read_text()) or {}
    return build_identity(identity_config(config, environment_config(settings, fetch)), defaults=defaults)


def prepare(
    settings: CollectSettings,
    raw: dict[str, Any],
    paths: RunPaths,
    stderr: IO[str],
    fetch: Callable[[str], dict[str, Any]],
    *,
    routing: Routing | None = None,
) -> Prepared:
    """Validate or create the run at ``paths`` (the lock is held); nothing is written before validation.

    ``routing``: the run's servers, for NeMo Gym's ``<stem>_materialized_inputs.jsonl`` (written beside
    the run's own tasks by a fresh run, and by an import of a NeMo Gym run that has none) and for
    NeMo Gym's default routing by ``agent_ref`` (each flat row's taskset is its agent)."""
    inputs = Inputs(settings, routing)
    identity = build_run_identity(settings, raw, fetch)
    existing = existing_run(paths)
    if settings.resume_from_cache:
        if existing is ExistingRun.MANIFEST:
            store, plan = _open_for_resume(settings, paths, inputs, identity)
            return _reconciled(store, stderr, store.inputs, plan)
        if existing is ExistingRun.LEGACY:
            store = _import_legacy(settings, paths, inputs, identity, stderr)
            return _reconciled(store, stderr, store.inputs, ResumePlan(resubmit=settings.resubmit))
        if existing is ExistingRun.PARTIAL_INITIAL_CACHE:
            say(
                stderr,
                f"Skipping resume_from_cache: {paths.output} holds only part of an initial cache "
                "(no manifest, no saved outcomes); starting fresh from the current inputs",
            )
        else:
            say(stderr, f"nothing to resume at {paths.output}; starting a fresh run")
    inputs.scan()  # materialize as a stream, and refuse bad rows, before anything is replaced
    if not settings.resume_from_cache and existing is not ExistingRun.NOTHING:
        replaced = [str(p) for p in paths.companions().values() if p.exists() and p != paths.lock]
        say(
            stderr,
            f"replacing the existing run at {paths.output} (a fresh collection; add "
            f"+resume_from_cache=true to resume instead): {', '.join(replaced)}",
        )
    store = _create_fresh(settings, paths, inputs, identity)
    return _reconciled(store, stderr, store.inputs, ResumePlan())  # each task was written as made


def _new_run(
    settings: CollectSettings,
    inputs: Inputs,
    identity: dict[str, Any],
    tasks: list[dict[str, Any]] | None = None,
) -> RunSpec:
    """What a new manifest records, the same for a fresh run and a legacy import (``tasks``: saved ones)."""
    return RunSpec(
        source_path=str(inputs.source_path),
        source_digest=inputs.source_digest,
        inputs=inputs.stream if tasks is None else tasks,
        identity=identity,
        config_digest=config_digest(identity),
        max_rollout_attempts=settings.max_rollout_attempts,
        retry_terminal_timeouts=bool(settings.retry_terminal_timeouts),
        nemo_gym_row=inputs.nemo_gym_row,
    )


def _create_fresh(
    settings: CollectSettings, paths: RunPaths, inputs: Inputs, identity: dict[str, Any]
) -> RunStore:
    return RunStore.create_fresh(paths, _new_run(settings, inputs, identity))


def _import_legacy(
    settings: CollectSettings, paths: RunPaths, inputs: Inputs, identity: dict[str, Any], stderr: IO[str]
) -> RunStore:
    if not settings.allow_unsafe_resume:
        raise ManifestError(
            f"{paths.output} has saved outcomes but no run manifest ({paths.manifest}), so its identity "
            "cannot be checked. Restore the manifest with its companions from a backup; or, to reuse these "
            "legacy results deliberately, add +allow_unsafe_resume=true (the run is then marked "
            "identity_verified=false for good); or choose a new output path"
        )
    saved = RunStore.legacy_inputs(paths)
    if saved is not None and not all(is_gymslurm_task(row) for row in saved):
        saved = nemo_gym_tasks(saved, settings, inputs, paths)
    reused = (
        f"reusing its {len(saved)} saved materialized tasks ({paths.materialized_inputs})"
        if saved is not None
        else f"with the tasks materialized from {inputs.source_path} (it saved none)"
    )
    say(
        stderr,
        f"warning: importing the legacy run at {paths.output} without a manifest "
        f"(allow_unsafe_resume), {reused}: its identity is unverified, now and on every later resume "
        "(each needs +allow_unsafe_resume=true)",
    )
    tasks = saved if saved is not None else inputs.tasks
    return RunStore.import_legacy(paths, _new_run(settings, inputs, identity, tasks))


def is_gymslurm_task(row: Task) -> bool:
    """A materialized row gymslurm wrote: a rollout id and a ``{taskset, task_id}`` task id."""
    return type(row.get("_ng_rollout_id")) is str and type(row.get("task_id")) is dict and "task_input" in row


def nemo_gym_tasks(
    rows: list[Task], settings: CollectSettings, inputs: Inputs, paths: RunPaths
) -> list[Task]:
    """NeMo Gym's ``<stem>_materialized_inputs.jsonl`` (one flat row per rollout) as gymslurm's tasks.

    Each row is already one rollout (``_ng_task_index``, ``_ng_rollout_index``): it keeps NeMo Gym's
    rollout id (``<task index>-<rollout index>``), and its task is the row, as a fresh collection of
    that file would make it (tasks.py, "repeated rows"). It is never repeated or templated again.
    """
    options = MaterializeOptions(
        dataset_name=settings.taskset or inputs.source_path.stem, agents=inputs.agents
    )
    try:
        return materialize(rows, options)
    except ConfigError as error:
        raise ConfigError(
            f"the legacy run's saved materialized inputs {paths.materialized_inputs} cannot be read as NeMo "
            f"Gym's (one row per rollout with _ng_task_index and _ng_rollout_index): {error}. Move that file "
            "aside to import the run with the tasks of the current dataset instead"
        ) from None


def _open_for_resume(
    settings: CollectSettings, paths: RunPaths, inputs: Inputs, identity: dict[str, Any]
) -> tuple[RunStore, ResumePlan]:
    """Open the saved run and check it measured the same experiment; raise before changing a byte.

    Returns the store and what the resume changes (override mark, drift line, attempt limit, policy,
    resubmit), applied only once the history has been validated too (see :func:`_reconciled`).
    """
    store = RunStore.open(paths, adopt_attempts=settings.max_rollout_attempts)
    try:
        manifest = store.manifest
        saved = store.saved_identity()
        if saved is not None and manifest.config_digest not in _digests_of(saved):
            raise ManifestError(
                f"the saved identity {paths.identity} does not match the manifest's config_digest: the run's "
                "files were edited or mixed. Restore them together from a backup, or use a new output path"
            )
        diff = classify_differences(saved, identity) if saved is not None else IdentityDiff()
        semantic = [*_input_problems(manifest, inputs), *diff.semantic]
        if saved is None and manifest.config_digest not in _digests_of(identity):
            semantic.append("config_digest (no saved identity to compare keys)")
        if semantic and not settings.allow_unsafe_resume:
            message = describe_differences(IdentityDiff(semantic=semantic, operational=diff.operational))
            raise IdentityMismatchError(message, semantic)
        if not manifest.identity_verified and not settings.allow_unsafe_resume:
            raise IdentityMismatchError(
                f"the run at {paths.output} was {manifest.identity_source} with +allow_unsafe_resume=true "
                f"(its manifest {paths.manifest} says identity_verified=false), so its identity cannot be "
                "verified: every resume of it needs +allow_unsafe_resume=true too (000). Add it to resume "
                "these results deliberately, or choose a new output path for a verified run",
                ["identity_verified"],
            )
    except BaseException:
        store.close()
        raise
    return store, resume_plan(settings, manifest, semantic, diff.operational)


def _digests_of(identity: dict[str, Any]) -> tuple[str, str]:
    """The digests a manifest may hold for this identity: of its semantic part (what gymslurm records
    now), and of the whole identity (what runs saved before the semantic digest recorded)."""
    return config_digest(identity), identity_digest(identity)


def resume_plan(
    settings: CollectSettings, manifest: Manifest, semantic: list[str], operational: list[str]
) -> ResumePlan:
    """The changes an accepted resume makes to the run's metadata (pure)."""
    wanted = settings.retry_terminal_timeouts
    return ResumePlan(
        overridden=tuple(semantic),
        drift=tuple(operational),
        record_attempt_limit=manifest.adopted_max_rollout_attempts,
        retry_terminal_timeouts=wanted if wanted != manifest.retry_terminal_timeouts else None,
        resubmit=settings.resubmit,
    )


def _input_problems(manifest: Manifest, inputs: Inputs) -> list[str]:
    """Semantic differences of the data itself: the source dataset's bytes and the materialized tasks.

    Materialization is a pure function of the source bytes and of settings that are all semantic
    identity keys; so with the same source digest, the same gymslurm version and no semantic identity
    difference the tasks are equal by construction and are not materialized again (fast resume).
    """
    if manifest.source_digest != inputs.source_digest:
        return ["source_digest (the input dataset's content changed)"]
    if manifest.gymslurm_version == __version__:
        return []
    scan = inputs.scan()
    if manifest.rollout_count != scan.count or manifest.inputs_digest != scan.digest:
        return ["inputs_digest (the materialized tasks changed: dataset, limit, repeats or prompt)"]
    return []


def _reconciled(
    store: RunStore, stderr: IO[str], load_tasks: Callable[[], list[Task]], plan: ResumePlan
) -> Prepared:
    """Validate the history and apply ``plan`` (:meth:`RunStore.resume`), then say what it changed.

    ``load_tasks`` gives the tasks to dispatch when some are pending: the saved materialized tasks on
    a resume (equal to the current ones when verified; reused as spec 000 says when overridden), the
    current ones otherwise.
    """
    try:
        resumed = store.resume(plan)
    except BaseException:
        store.close()
        raise
    paths, manifest = store.paths, store.manifest
    if resumed.adopted:  # rows NeMo Gym's collector appended since gymslurm's last turn
        say(
            stderr, f"adopted {resumed.adopted} outcome row(s) NeMo Gym's collector saved ({paths.adoptions})"
        )
    if plan.overridden:
        say(
            stderr,
            f"warning: resuming across a changed identity ({', '.join(plan.overridden)}) because of "
            "allow_unsafe_resume; the run is marked identity_verified=false for good",
        )
    if plan.drift:
        say(
            stderr,
            f"warning: operational settings changed since the run was saved "
            f"({', '.join(plan.drift)}); resuming, and noting it in {paths.resume_drift}",
        )
    if plan.record_attempt_limit:
        say(
            stderr,
            f"the manifest {paths.manifest} had no max_rollout_attempts (an older draft): "
            f"recording the current setting, {manifest.max_rollout_attempts}",
        )
    if repaired := resumed.repaired_bytes:
        say(stderr, f"removed {repaired} byte(s) of an incomplete last line left by an interrupted write")
    if resumed.resubmitted is not None:
        failures, results = resumed.resubmitted
        say(
            stderr,
            f"resubmit: a fresh failure budget; the {failures} failure line(s) (and {results} result "
            f"line(s)) saved so far no longer count against it ({paths.resubmit_offset})",
        )
    quietly = (
        not plan.changes_metadata and not repaired and not resumed.adopted and manifest.identity_verified
    )
    return Prepared(store, load_tasks, resumed.reconciliation, repeats_quietly=quietly)
