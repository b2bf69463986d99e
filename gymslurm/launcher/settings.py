"""The benchmark configuration: composed once with Hydra, validated once into pydantic models.

A benchmark is ``configs/benchmarks/<name>.yaml`` (or a path to a YAML file) plus Hydra
command-line overrides (``gymslurm submit demo slurm.partition=low shards=3``). Everything the
launcher needs is resolved here, before anything is written or submitted; unknown keys are errors
so a typo never silently falls back to a default.

Secrets: whatever the identity's one redaction rule redacts (:func:`gymslurm.identity.redact_value`:
credential-named keys such as ``api_key``, ``HF_TOKEN``, ``password`` but not ``max_tokens``;
``--api-key V``; ``NAME=V``; Bearer/Basic; URL passwords; name/value pairs) is a secret.
:func:`split_secrets` takes them out of the config that is saved in the run directory; the job
gets them back from its environment (``GYMSLURM_SECRETS``, exported by ``sbatch``), and hands each
process only its own (docs/security.md).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gymslurm.errors import ConfigError
from gymslurm.launcher.benchmark_checks import env_name_problem, override_grammar_problem
from gymslurm.launcher.server_refs import check_references, credential_url_on_argv
from gymslurm.launcher.settings_sections import (
    BudgetSettings,
    ContainerSettings,
    NotifyTarget,
    ReportSettings,
    RouterSettings,
    Strict,
    gpus_in_directives,
    placement_problem,
)
from gymslurm.redaction import REDACTED, learn, redact_value
from gymslurm.resources import configs_dir
from gymslurm.site import scriptsafe
from gymslurm.site.slurm import slurm_seconds

SECRETS_HINT = "GYMSLURM_SECRETS, exported by sbatch from where the run was submitted"
# A command item that stands for the interpreter running gymslurm (slurm.python overrides it).
PYTHON = "{python}"


_Strict = Strict  # every section: unknown keys refused, frozen (settings_sections.py)


def _refuse(problem: str | None) -> None:
    if problem is not None:
        raise ValueError(problem)


def _one_line(value: str | None, info: ValidationInfo) -> str | None:
    """A value that reaches a job script: one line, no control characters (site/scriptsafe.py)."""
    if value is not None:
        _refuse(scriptsafe.control_problem(str(info.field_name), value))
    return value


def _slug(value: str, info: ValidationInfo) -> str:
    """A name that becomes a folder, file or job name: a safe slug (site/scriptsafe.py)."""
    _refuse(scriptsafe.slug_problem(str(info.field_name), value))
    return value


def _credential_in_script(key: str, line: str) -> str | None:
    """A script line may not carry a credential: scripts are saved, printed by --dry-run, read by admins."""
    if redact_value(line) == line:
        return None
    return (
        f"{key} carries a credential (it would be {redact_value(line)!r} with it redacted); a job script is "
        "saved in the run directory and printed by --dry-run. Export the variable in your shell before "
        "submitting (sbatch passes your environment to the job), or put it in collector.env / servers[].env"
    )


def _nul_free(value: Any, key: str) -> None:
    """No string anywhere in a benchmark holds a NUL: it could reach no process intact."""
    if isinstance(value, str):
        _refuse(scriptsafe.nul_problem(key, value))
    elif isinstance(value, dict):
        for name, item in value.items():
            _nul_free(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _nul_free(item, f"{key}[{index}]")


class ServerSettings(_Strict):
    """One server of the job's stack: a running address, or a command the job starts in its allocation.

    Servers start in the order listed; a later server's ``command``, ``env`` and the collector's
    overrides may name an earlier one's address as ``{servers.NAME.url}`` (or ``.host``, ``.port``).
    ``collector_override`` null: the collector is not given this server's URL (a model server that
    only the Environment Servers call).
    """

    name: str = "env"
    url: str | None = None
    command: list[str] | None = None
    host: str = "127.0.0.1"
    port: int = 0
    health_path: str | None = None
    startup_timeout_s: float = 60.0
    env: dict[str, str] = Field(default_factory=dict)
    collector_override: str | None = "+environment_server_url"
    # The start-up and supervision probe: health (GET health_path, or a TCP connection when it is
    # null), or a one-token chat_completions / completions request that must return text.
    probe: Literal["health", "chat_completions", "completions"] = "health"
    probe_model: str | None = None
    container: ContainerSettings | None = None
    # Supervision while the collector runs (docs/servers.md): probe every probe_interval_s, a probe
    # answering after probe_timeout_s fails; probe_failures failures in a row (or the process
    # exiting) make the server down; it is restarted in place at most restart_limit times.
    probe_interval_s: float = Field(default=5.0, gt=0)
    probe_timeout_s: float = Field(default=5.0, gt=0)
    probe_failures: int = Field(default=2, ge=1)
    restart_limit: int = Field(default=3, ge=0)
    nodes: int | None = Field(default=None, ge=1)
    worker_command: list[str] | None = None
    # nodes N: N nodes of its own per instance; replicas K: K instances behind router (docs/servers.md).
    replicas: int = Field(default=1, ge=1)
    router: RouterSettings = Field(default_factory=RouterSettings)
    gpus: int = Field(default=0, ge=0)  # GPUs each instance takes on each node it spans: --gres follows

    _name_is_slug = field_validator("name")(_slug)

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("command must name a program; leave it unset to use url")
        return value

    def model_post_init(self, _context: Any) -> None:
        """Exactly one of url and command."""
        if (self.url is None) == (self.command is None):
            raise ValueError(f"server {self.name!r}: set exactly one of url (a running server) or command")
        _refuse(placement_problem(self.name, self.command, self.nodes, self.replicas, self.worker_command))


class CollectorSettings(_Strict):
    """How each job runs the collector: the command (swappable) and Hydra overrides passed through."""

    command: list[str] = Field(default_factory=lambda: [PYTHON, "-m", "gymslurm", "collect"])
    overrides: list[str] = Field(default_factory=list)
    resubmit_override: str = "+resubmit=true"
    env: dict[str, str] = Field(default_factory=dict)


class ReverifySettings(_Strict):
    """``gymslurm submit --reverify RUN``: how each job re-grades the run's saved judge-failed answers.

    The job runs ``gymslurm reverify --judge-failed-only +require_complete=true`` with the grader the
    collector is given (its ``+environment_server_url``/``+environment_protocol``/``+request_timeout_s``
    among the collector's overrides) and then these ``overrides`` (``{servers.NAME.url}`` works), e.g.
    a judge that is not the collector's Environment Server.
    """

    overrides: list[str] = Field(default_factory=list)


RETIRED_ARRAY_KEY = "array"  # slurm.array, removed (issue 29): refused by name, dropped from saved runs


class SlurmSettings(_Strict):
    """The Slurm section: where jobs run, how long, and the chain's caps."""

    partition: str | None = None
    # The Slurm cluster every job of the run goes to (``--clusters=C`` on each Slurm command; it
    # needs slurmdbd). None: the cluster the login node's slurm.conf names.
    cluster: str | None = None
    # Shards across clusters (docs/launcher.md): ``[a, b]`` (equal weights) or ``{a: 3, b: 1}``; the
    # shards are cut into one contiguous block per cluster by weight (placement.py). The aggregation
    # runs on ``aggregate_on`` (default: the first cluster listed).
    clusters: list[str] | dict[str, int | str] | None = None
    aggregate_on: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "01:00:00"
    max_walltime: str | None = None
    infra_retry_limit: int = Field(default=3, ge=0)
    max_links_without_progress: int | None = Field(default=5, ge=1)
    # Jobs queued behind a running one (docs/launcher.md, "The invariant"): k survives k-1
    # consecutive jobs killed before their first act; the default 3 survives any two (the next link
    # and a spare behind it); 1 is the chain of old (no spare).
    lookahead: int = Field(default=3, ge=1, le=5)
    # A link ends its collector (exit 1: the next link goes on) when its progress record stops or no
    # outcome is saved with requests in flight for this long (null: never; docs/launcher.md).
    stall_window_s: float | None = Field(default=600.0, gt=0)
    signal_lead_s: int = Field(default=90, ge=0)
    extra_directives: list[str] = Field(default_factory=list)
    env_setup: list[str] = Field(default_factory=list)
    python: str | None = None
    max_running: int | None = Field(default=None, ge=1)
    # At most this many shards per job array (null: the site's MaxArraySize).
    array_size: int | None = Field(default=None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _no_array_knob(cls, data: Any) -> Any:
        """``slurm.array`` is gone (it could only be true): said by name, not as an unknown key."""
        if isinstance(data, dict) and RETIRED_ARRAY_KEY in data:
            raise ValueError(
                f"'array' ({data[RETIRED_ARRAY_KEY]!r}) is no longer a setting: every Slurm run submits its "
                "links as job arrays, split over several past the site's MaxArraySize (docs/launcher.md, "
                "'Scale'); remove 'array' from the benchmark's slurm section (or the slurm.array override)"
            )
        return data

    # GPUs each link holds: rendered as #SBATCH --gres=gpu:N on link scripts (not the aggregation's);
    # 0 counts a --gres=gpu:N / --gpus=N line of extra_directives instead (docs/cost.md).
    gpus: int = Field(default=0, ge=0)
    # Slurm's own e-mail (sbatch --mail-type/--mail-user), beside notify: (docs/notifications.md).
    mail_type: str | None = None
    mail_user: str | None = None

    @field_validator("time", "max_walltime")
    @classmethod
    def _valid_time(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            _one_line(value, info)
            slurm_seconds(value)
        return value

    @field_validator("partition", "cluster", "account", "qos")
    @classmethod
    def _valid_directive(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            _refuse(scriptsafe.directive_problem(str(info.field_name), value))
        return value

    @field_validator("extra_directives")
    @classmethod
    def _valid_extra(cls, value: list[str]) -> list[str]:
        for index, line in enumerate(value):
            _refuse(scriptsafe.extra_directive_problem(f"extra_directives[{index}]", line))
            _refuse(_credential_in_script(f"extra_directives[{index}]", line))
        return value

    @field_validator("env_setup")
    @classmethod
    def _one_line_each(cls, value: list[str]) -> list[str]:
        """Each item runs as written, as one line of the job's shell (docs/security.md)."""
        for index, line in enumerate(value):
            _refuse(scriptsafe.control_problem(f"env_setup[{index}]", line, allow_tab=True))
            _refuse(_credential_in_script(f"env_setup[{index}]", line))
        return value

    _python_one_line = field_validator("python")(_one_line)

    @field_validator("clusters")
    @classmethod
    def _valid_clusters(
        cls, value: list[str] | dict[str, int | str] | None
    ) -> list[str] | dict[str, int | str] | None:
        if value is None:
            return None
        names = list(value)
        if not names:
            raise ValueError("slurm.clusters is empty: name at least one cluster, or remove it")
        if len(set(names)) != len(names):
            raise ValueError(f"slurm.clusters names a cluster twice: {names}")
        for name in names:
            _refuse(scriptsafe.directive_problem("slurm.clusters", str(name)))
        weights = value.values() if isinstance(value, dict) else []
        named = all(isinstance(w, str) for w in weights)
        if not named and any(not isinstance(w, int) or w < 1 for w in weights):
            raise ValueError(
                f"slurm.clusters takes weights (whole numbers >= 1) or the shards of each cluster ('0-5,9'), "
                f"not both: {value}"
            )
        return value

    def model_post_init(self, _context: Any) -> None:
        """``cluster`` and ``clusters`` exclude each other; ``aggregate_on`` is one of ``clusters``."""
        if self.clusters is not None and self.cluster is not None:
            raise ValueError("set slurm.cluster (the whole run on one cluster) or slurm.clusters, not both")
        if self.aggregate_on is not None and self.aggregate_on not in (self.clusters or []):
            raise ValueError(
                f"slurm.aggregate_on {self.aggregate_on!r} is not one of slurm.clusters "
                f"{list(self.clusters or [])}"
            )

    @property
    def aggregation_cluster(self) -> str | None:
        """Where the aggregation of a run across clusters runs: ``aggregate_on``, else the first listed."""
        return self.aggregate_on or (next(iter(self.clusters)) if self.clusters else None)

    @property
    def planned_clusters(self) -> list[str | None]:
        """Every cluster the benchmark names (None: the default one), for doctor and submit's checks."""
        return list(self.clusters or []) or [self.cluster]

    @field_validator("mail_type", "mail_user")
    @classmethod
    def _valid_mail(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            _refuse(scriptsafe.directive_problem(str(info.field_name), value))
        return value

    @property
    def declared_gpus(self) -> int:
        """GPUs a link asks for: ``gpus``, else a ``--gres=gpu[:type]:N`` or ``--gpus=N`` extra directive."""
        return self.gpus or gpus_in_directives(self.extra_directives)

    @property
    def max_walltime_s(self) -> float | None:
        """``max_walltime`` in seconds, None when no cap is configured."""
        return None if self.max_walltime is None else float(slurm_seconds(self.max_walltime))

    @property
    def interpreter(self) -> str:
        """The Python that runs gymslurm in jobs: ``python`` when set, else the one running now.

        On Slurm the login node and the compute nodes share the filesystem, so the path of the
        interpreter that runs ``submit`` is the right default there too.
        """
        return self.python or sys.executable


class AggregationSettings(_Strict):
    """The aggregation job run once after every shard's chain ended."""

    enabled: bool = True
    on_failed_shard: Literal["fail", "aggregate-what-exists"] = "fail"
    command: list[str] = Field(
        default_factory=lambda: [
            PYTHON,
            "-m",
            "gymslurm",
            "aggregate",
            "{inputs_glob}",
            "+output_jsonl_fpath={output}",
        ]
    )
    time: str = "00:30:00"

    @field_validator("time")
    @classmethod
    def _valid_time(cls, value: str, info: ValidationInfo) -> str:
        _one_line(value, info)
        slurm_seconds(value)
        return value


class BenchmarkSettings(_Strict):
    """A whole benchmark, as ``submit`` uses it."""

    name: str
    dataset: str
    dataset_command: list[str] | None = None
    output_stem: str = "rollouts"
    shards: int = Field(default=1, ge=1)
    run_root: str = "gymslurm_runs"
    backend: Literal["auto", "slurm", "local"] = "auto"
    servers: list[ServerSettings] = Field(default_factory=list)
    collector: CollectorSettings = Field(default_factory=CollectorSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    aggregation: AggregationSettings = Field(default_factory=AggregationSettings)
    reverify: ReverifySettings = Field(default_factory=ReverifySettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    notify: list[NotifyTarget] = Field(default_factory=list)

    _names_are_slugs = field_validator("name", "output_stem")(_slug)

    @field_validator("run_root")
    @classmethod
    def _run_root_fits(cls, value: str, info: ValidationInfo) -> str:
        """One line, and short enough that every run file's path fits the filesystem's limits."""
        _one_line(value, info)
        _refuse(scriptsafe.path_length_problem("run_root", value))
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_nul_anywhere(cls, data: Any) -> Any:
        _nul_free(data, "")
        return data

    def model_post_init(self, _context: Any) -> None:
        """Server names are unique and ``{servers.NAME.*}`` names a server listed earlier."""
        seen: list[str] = []
        for server in self.servers:
            if server.name in seen:
                raise ValueError(f"servers: two servers are named {server.name!r}")
            texts = [*(server.command or []), *(server.worker_command or []), *server.env.values()]
            check_references(texts, seen, f"server {server.name!r}")
            urls = {s.name: s.url for s in self.servers if s.name in seen}
            argv = [*(server.command or []), *(server.worker_command or [])]
            if problem := credential_url_on_argv(argv, urls):
                raise ValueError(f"server {server.name!r}: {problem}")
            seen.append(server.name)
        check_references(self.collector.overrides, seen, "collector.overrides")
        envs = {
            **{f"servers[{i}].env": server.env for i, server in enumerate(self.servers)},
            "collector.env": self.collector.env,
            **{f"notify[{i}].env": target.env for i, target in enumerate(self.notify)},
        }
        for where, env in envs.items():
            _refuse(env_name_problem(env, where))
        _refuse(override_grammar_problem(self.collector.overrides, "collector.overrides"))


SLURM_LIMIT_TICK_S = 30  # slurmctld checks time limits (and sends --signal warnings) about this often
MIN_WORK_BEFORE_SIGNAL_S = 60


def early_signal_warning(slurm: SlurmSettings) -> str | None:
    """A warning when Slurm may send USR1 before a job had a minute to work, else None.

    slurmctld sends the ``--signal=B:USR1@lead`` warning at the first limit check (every ~30 s)
    that finds at most ``lead + 30`` s left, so USR1 can come ``time - lead - 30`` s into a job.
    A job signalled before the collector saved anything exits 75 without progress, which spends
    an infrastructure retry: a chain of such jobs stops EXHAUSTED having done nothing.
    """
    window = slurm_seconds(slurm.time) - slurm.signal_lead_s - SLURM_LIMIT_TICK_S
    if window >= MIN_WORK_BEFORE_SIGNAL_S:
        return None
    return (
        f"slurm.time={slurm.time} with slurm.signal_lead_s={slurm.signal_lead_s}: Slurm may send USR1 "
        f"{max(window, 0)} s into each job (it signals up to one ~{SLURM_LIMIT_TICK_S} s limit check early), "
        "possibly before the collector saves an outcome, and a link without progress spends an "
        "infrastructure retry; make slurm.time at least signal_lead_s + "
        f"{SLURM_LIMIT_TICK_S + MIN_WORK_BEFORE_SIGNAL_S} s or lower slurm.signal_lead_s"
    )


def benchmark_path(name: str) -> Path:
    """The YAML file of a benchmark name (``configs/benchmarks/<name>.yaml``) or of a path."""
    given = Path(name)
    if given.suffix in (".yaml", ".yml"):
        if not given.is_file():
            raise ConfigError(f"benchmark file {given} does not exist")
        return given.resolve()
    path = configs_dir() / "benchmarks" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (configs_dir() / "benchmarks").glob("*.yaml"))
        raise ConfigError(
            f"unknown benchmark {name!r}: no {path}. Known benchmarks: {', '.join(known) or 'none'}"
        )
    return path


def compose_benchmark(name: str, overrides: list[str]) -> dict[str, Any]:
    """The benchmark config as a plain dict, composed by Hydra with command-line overrides."""
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    learn(overrides)  # a Hydra error repeats an override
    path = benchmark_path(name)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base=None, job_name="gymslurm"):
            config = compose(config_name=path.stem, overrides=[_add_or_override(o) for o in overrides])
        data = OmegaConf.to_container(config, resolve=False)
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as error:
        raise ConfigError(f"benchmark {name!r} ({path}) with overrides {overrides}: {error}") from error
    finally:
        GlobalHydra.instance().clear()
    if not isinstance(data, dict):
        raise ConfigError(f"benchmark {path} is not a mapping")
    learn(data)
    data.setdefault("name", path.stem)
    return {str(key): value for key, value in data.items()}


def _add_or_override(override: str) -> str:
    """``key=value`` → ``++key=value``: a benchmark may leave keys at their defaults, and the
    settings model (not Hydra) rejects misspelt keys."""
    return override if override.startswith(("+", "~")) else f"++{override}"


def validate(data: dict[str, Any], where: str) -> BenchmarkSettings:
    """Validate a composed benchmark; errors name the dotted key and the file."""
    try:
        settings = BenchmarkSettings.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg'].removeprefix('Value error, ')}"
            for e in error.errors()
        )
        raise ConfigError(f"benchmark {where} is invalid: {problems}") from error
    return with_interpreter(settings)


def with_interpreter(settings: BenchmarkSettings) -> BenchmarkSettings:
    """``settings`` with every ``{python}`` command item replaced by ``slurm.interpreter``.

    The one place the interpreter is chosen: the dataset, server, collector and aggregation
    commands and the chain-step line of every script all run the same Python.
    """
    python = settings.slurm.interpreter

    def fill(command: list[str]) -> list[str]:
        return [python if part == PYTHON else part for part in command]

    servers = [
        server
        if server.command is None
        else server.model_copy(
            update={
                "command": fill(server.command),
                "worker_command": fill(server.worker_command or []) or None,
                "router": server.router.model_copy(update={"command": fill(server.router.command)}),
            }
        )
        for server in settings.servers
    ]
    return settings.model_copy(
        update={
            "dataset_command": None if settings.dataset_command is None else fill(settings.dataset_command),
            "servers": servers,
            "collector": settings.collector.model_copy(update={"command": fill(settings.collector.command)}),
            "aggregation": settings.aggregation.model_copy(
                update={"command": fill(settings.aggregation.command)}
            ),
        }
    )


def load_benchmark(name: str, overrides: list[str]) -> tuple[BenchmarkSettings, dict[str, Any]]:
    """Compose and validate a benchmark; returns the settings and the composed dict."""
    data = compose_benchmark(name, overrides)
    return validate(data, name), data


def split_secrets(data: Any) -> tuple[Any, dict[str, Any]]:
    """A copy of ``data`` with every credential redacted, and the original values by dotted path.

    The rule is the identity's (:func:`gymslurm.identity.redact_value`: credential-named keys,
    ``secrets`` mappings, ``--api-key V`` items, ``NAME=V`` strings, Bearer/Basic, URL passwords,
    name/value pairs, credential-named ``${oc.env:...}``): wherever redaction changed a value, the
    saved config has the redacted form and the original travels in the job's environment.
    """
    clean = redact_value(data)
    secrets: dict[str, Any] = {}
    _differences(data, clean, "", secrets)
    return clean, secrets


def _differences(original: Any, clean: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(original, dict) and isinstance(clean, dict):
        for key, value in original.items():
            _differences(value, clean[key], f"{path}.{key}" if path else str(key), out)
    elif isinstance(original, list) and isinstance(clean, list) and len(original) == len(clean):
        for index, (value, redacted) in enumerate(zip(original, clean, strict=True)):
            _differences(value, redacted, f"{path}[{index}]", out)
    elif original != clean:
        out[path] = original


def merge_secrets(data: Any, secrets: dict[str, Any], path: str = "") -> Any:
    """Put secrets taken out by :func:`split_secrets` back; a missing one is a clear error."""
    if path in secrets:
        return secrets[path]
    if isinstance(data, dict):
        return {k: merge_secrets(v, secrets, f"{path}.{k}" if path else str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [merge_secrets(v, secrets, f"{path}[{i}]") for i, v in enumerate(data)]
    if isinstance(data, str) and REDACTED in data:
        raise ConfigError(
            f"the secret {path} is not in this job's environment ({SECRETS_HINT}); submit the run again "
            "from an environment that has it, or resubmit passing it again as an override"
        )
    return data
