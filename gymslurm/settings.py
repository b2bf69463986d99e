"""The settings of ``gymslurm collect``, validated once from a Hydra config before anything is built.

Why Hydra's compose API: users move between NeMo Gym and gymslurm with the same command-line
spellings (``+output_jsonl_fpath=...``, ``+num_repeats=4``, interpolations such as ``${oc.env:X}``).
The defaults live in ``configs/collect.yaml`` (every key commented); overrides are applied on top.
Hydra's ``+key=value`` means "append a new key" and fails for a key that already has a value, so the
NeMo Gym spelling is rewritten to ``++key=value`` (add or override); the plain ``key=value`` spelling
works for keys that ``collect.yaml`` defines. A misspelled key is then rejected by the pydantic model
(unknown keys are errors), naming the key and the valid ones.

Two views of the configuration come out of here:

- :class:`CollectSettings`, the typed, resolved settings the collector runs with;
- the *unresolved* configuration (``OmegaConf.to_container(resolve=False)``), kept for the run's
  identity: credentials must be redacted before interpolations are resolved, so identity never sees
  a resolved secret (identity.py does the redaction).

Trade-off: validation happens once, here; nothing deeper in the collector reads the raw config.
Every error is a :class:`~gymslurm.errors.ConfigError` that says what is wrong and what to do,
raised before any file is written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gymslurm.errors import ConfigError
from gymslurm.nemogym_flags import refuse_unsupported
from gymslurm.process_env import MAX_ATTEMPTS_ENV
from gymslurm.records import DEFAULT_MAX_ROLLOUT_ATTEMPTS, Protocol
from gymslurm.redaction import REDACTED, is_credential_name, learn, redact_text, redact_value

FROM_ENVIRONMENT = "max_rollout_attempts"  # the one setting that comes from the environment
CONCURRENCY_ALIASES = ("num_samples_in_parallel",)
# NeMo Gym's head server default address (nemo_gym/global_config.py: host 127.0.0.1, port 11000).
DEFAULT_HEAD_SERVER_URL = "http://127.0.0.1:11000"


class CollectSettings(BaseModel):
    """Everything ``gymslurm collect`` needs, typed and checked (see configs/collect.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_jsonl_fpath: Path
    output_jsonl_fpath: Path
    num_repeats: int = Field(default=1, ge=1)
    limit: int | None = Field(default=None, ge=0)
    taskset: str | None = None
    prompt_template: str | None = None
    prompt_field: str = Field(default="prompt", min_length=1)
    prompt_config: str | None = Field(default=None, min_length=1)  # NeMo Gym's (gymslurm/nemogym_rows.py)
    responses_create_params: dict[str, Any] | None = None  # NeMo Gym's overrides of each flat row's
    num_repeats_add_seed: bool = False  # NeMo Gym's seed per repeat (gymslurm/nemogym_rows.py)

    resume_from_cache: bool = False
    allow_unsafe_resume: bool = False
    resubmit: bool = False
    route_failures_to_sidecar: bool = False
    require_complete: bool = False
    retry_terminal_timeouts: bool | None = None
    retry_in_invocation: bool = True
    count_failure_classes_as_zero: list[str] = Field(default_factory=list)

    concurrency: int = Field(default=64, ge=1)
    dispatch_budget_s: float | None = Field(default=None, ge=0)
    dispatch_longest_first: bool = False
    dispatch_breaker_failures: int = Field(default=3, ge=0)
    dispatch_breaker_wait_s: float = Field(default=60.0, ge=0)
    dispatch_adaptive: Literal["off", "latency", "metrics"] = "off"  # +concurrency stays the cap
    # the model server's Prometheus /metrics (vLLM names); replicas: their URLs, comma-separated
    dispatch_model_metrics_url: str | None = None
    # its share of the model server's capacity when other collectors share it (a suite link gives it)
    dispatch_load_share: float = Field(default=1.0, gt=0, le=1)
    request_timeout_s: float = Field(default=3600, gt=0)
    stall_window_s: float | None = Field(default=None, gt=0)
    max_reply_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    max_inflight_reply_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)

    environment_server_url: str | None = None
    environment_server_urls: dict[str, str] = Field(default_factory=dict)
    environment_config: dict[str, Any] | None = None
    head_server_url: str | None = None
    environment_protocol: Protocol | None = None  # None: each server's declared type (routing)
    # NeMo Gym's spellings (docs/nemo-gym.md): servers named in the head server's configuration.
    environment_routing_mode: Literal["agent", "legacy", "taskset"] | None = None
    environment_server_name: str | None = Field(default=None, min_length=1)
    environment_server_routes: dict[str, str] | None = None  # None (not {}): older identities stay equal
    agent_name: str | None = Field(default=None, min_length=1)
    disable_aggregation: bool | None = None  # None: false
    disable_health_check: bool | None = None  # None: false

    progress: Literal["auto", "bar", "plain", "none"] = "auto"
    progress_interval_s: float = Field(default=30, gt=0)
    live_progress_interval_s: float = Field(default=5, gt=0)
    summary: bool = True

    # Not a config key: resolved from NEMO_GYM_MAX_ROLLOUT_ATTEMPTS by validate_settings (as NeMo
    # Gym reads it), saved in a new run's manifest; a resume keeps the saved value.
    max_rollout_attempts: int = Field(default=DEFAULT_MAX_ROLLOUT_ATTEMPTS, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _fold_concurrency_aliases(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for alias in CONCURRENCY_ALIASES:
                if alias in data:
                    data = dict(data)
                    data["concurrency"] = data.pop(alias)
            if "head_server" in data:
                data = dict(data)
                data.setdefault("head_server_url", None)
                data["head_server_url"] = data["head_server_url"] or head_server_url(data.pop("head_server"))
        return data

    @field_validator("environment_server_url", "head_server_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            _check_url(value)
            return value.rstrip("/")
        return value

    @field_validator("dispatch_model_metrics_url")
    @classmethod
    def _http_url_list(cls, value: str | None) -> str | None:
        if value is not None:
            for url in value.split(","):
                _check_url(url.strip())
        return value

    @property
    def model_metrics_urls(self) -> list[str]:
        """``dispatch_model_metrics_url`` as a list: one URL per replica, their load summed."""
        raw = self.dispatch_model_metrics_url or ""
        return [url.strip().rstrip("/") for url in raw.split(",") if url.strip()]

    @field_validator("environment_server_urls")
    @classmethod
    def _http_urls(cls, value: dict[str, str]) -> dict[str, str]:
        for url in value.values():
            _check_url(url)
        return {taskset: url.rstrip("/") for taskset, url in value.items()}

    @model_validator(mode="after")
    def _consistent(self) -> CollectSettings:
        if self.allow_unsafe_resume and not self.resume_from_cache:
            raise ValueError(
                "allow_unsafe_resume=true only applies to a resume: add +resume_from_cache=true, "
                "or drop +allow_unsafe_resume=true"
            )
        if self.resubmit and not self.resume_from_cache:
            raise ValueError(
                "resubmit=true resets the failure budget of a saved run: add +resume_from_cache=true"
            )
        if self.environment_routing_mode == "legacy" and self.environment_server_name is None:
            raise ValueError(
                "environment_server_name is required when environment_routing_mode=legacy (as in NeMo Gym): "
                "add +environment_server_name=NAME"
            )
        if self.environment_routing_mode == "taskset" and not (
            self.environment_server_routes or self.environment_server_urls
        ):
            raise ValueError(
                "environment_server_routes are required when environment_routing_mode=taskset (as in NeMo "
                "Gym): add +environment_server_routes={taskset: NAME}"
            )
        if self.environment_server_url and self.environment_server_name:
            raise ValueError(
                "both environment_server_url and environment_server_name name the default server: keep one"
            )
        if self.prompt_config and self.prompt_template:
            raise ValueError(
                "prompt_config (NeMo Gym's) and prompt_template (gymslurm's) both build the prompt: keep one"
            )
        if self.environment_routing_mode == "agent" and not self.routes_by_agent:
            raise ValueError(
                "environment_routing_mode=agent routes each row by its agent_ref (as in NeMo Gym): drop the "
                "server settings (+environment_server_url/_urls/_name/_routes, +agent_name) or the mode"
            )
        if self.dispatch_adaptive == "metrics" and self.dispatch_model_metrics_url is None:
            raise ValueError(
                "dispatch_adaptive=metrics reads the model server's queue: set "
                "+dispatch_model_metrics_url=http://HOST:PORT/metrics, or use dispatch_adaptive=latency"
            )
        if self.input_jsonl_fpath.resolve() == self.output_jsonl_fpath.resolve():
            raise ValueError(
                "input_jsonl_fpath and output_jsonl_fpath are the same file: choose another output path"
            )
        return self

    @property
    def routes_by_agent(self) -> bool:
        """NeMo Gym's default routing: no server named, each row goes to its ``agent_ref``'s server."""
        return not (
            self.environment_server_url
            or self.environment_server_urls
            or self.environment_server_name
            or self.environment_server_routes
            or self.agent_name
        )

    def config_sources(self) -> list[str]:
        """Where ``GET /global_config_dict_yaml`` is asked for the environment configuration, in order.

        ``head_server_url`` alone when set. Otherwise the Environment Server itself when there is one
        (gymslurm's demo server serves its own configuration), then NeMo Gym's default, the head server
        at its default address (:data:`DEFAULT_HEAD_SERVER_URL`, as ``gym eval run --no-serve`` does):
        NeMo Gym's Environment Servers do not serve the endpoint. With several servers, each is asked
        (prepare.environment_config) before the default head server.
        """
        if self.head_server_url:
            return [self.head_server_url]
        servers = [self.environment_server_url] if self.environment_server_url else []
        urls = set(self.environment_server_urls.values())
        if not servers and len(urls) == 1:
            servers = [urls.pop()]
        return [*servers, DEFAULT_HEAD_SERVER_URL]

    @property
    def explicit_retry_terminal_timeouts(self) -> bool:
        """Whether the terminal-timeout policy was set on this invocation (else the saved one holds)."""
        return self.retry_terminal_timeouts is not None


def head_server_url(block: Any) -> str | None:
    """NeMo Gym's ``+head_server.host=H +head_server.port=P`` as gymslurm's ``head_server_url``."""
    if block is None:
        return None
    if not isinstance(block, dict) or not set(block) <= {"host", "port"} or "port" not in block:
        raise ValueError(
            f"head_server must be NeMo Gym's {{host, port}} (got {block!r}): write +head_server.host=HOST "
            "+head_server.port=PORT, or +head_server_url=http://HOST:PORT"
        )
    return f"http://{block.get('host') or '127.0.0.1'}:{block['port']}"


def _check_url(url: str) -> None:
    if not (url.startswith("http://") or url.startswith("https://")) or len(url) <= len("http://"):
        raise ValueError(f"{redact_text(url)!r} is not an http(s) URL: write it as http://HOST:PORT")


def max_rollout_attempts(environ: Mapping[str, str] | None = None) -> int:
    """``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS`` (a positive integer) or 3; saved in a new run's manifest."""
    env = os.environ if environ is None else environ
    raw = env.get(MAX_ATTEMPTS_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_MAX_ROLLOUT_ATTEMPTS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{MAX_ATTEMPTS_ENV}={raw!r} is not a positive integer: unset it or set e.g. 3")
    return value


# --- composing the Hydra configuration -------------------------------------------------------------


def normalize_overrides(overrides: list[str]) -> list[str]:
    """NeMo Gym's ``+key=value`` becomes ``++key=value`` so it also overrides a key collect.yaml sets."""
    return ["+" + item if item.startswith("+") and not item.startswith("++") else item for item in overrides]


def compose_config(
    overrides: list[str], config_dir: Path | None = None, config_name: str = "collect"
) -> dict[str, Any]:
    """Compose ``config_name`` with ``overrides``; return the *unresolved* configuration as a dict.

    ``config_dir`` defaults to gymslurm's own configs; a user's folder is searched before it, so a
    benchmark config there can start with ``defaults: [collect, _self_]``.
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from gymslurm.resources import configs_dir

    shipped = configs_dir()
    folder = (config_dir or shipped).resolve()
    extra = [] if folder == shipped.resolve() else [f"hydra.searchpath=[file://{shipped}]"]
    try:
        with initialize_config_dir(config_dir=str(folder), version_base=None):
            cfg = compose(config_name=config_name, overrides=normalize_overrides(overrides) + extra)
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(
            f"cannot compose the collect configuration from {folder}/{config_name}.yaml with overrides "
            f"{redact_value(overrides)}: {redact_text(str(error))}. Write overrides as +key=value "
            "(see configs/collect.yaml)"
        ) from error
    container = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(container, dict)
    container.pop("hydra", None)
    return {str(key): value for key, value in container.items()}


# Settings the collector never interprets: they only enter the run's identity (the Environment
# Server's configuration, one block per server). A value there that cannot be resolved (an unset
# ``${oc.env:...}`` of a server this run does not use) stays as written instead of stopping the run:
# 000, "unused server configurations need not resolve in the collector".
IDENTITY_ONLY_KEYS = ("environment_config",)


def resolve_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Resolve the interpolations of an unresolved configuration (``${oc.env:...}`` and references).

    Every setting the collector uses must resolve; below :data:`IDENTITY_ONLY_KEYS` each value is
    resolved on its own and one that cannot be stays as written.
    """
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    def strictly(value: Any) -> Any:
        container = isinstance(value, DictConfig | ListConfig)
        return OmegaConf.to_container(value, resolve=True) if container else value

    try:
        config = OmegaConf.create(raw)
        resolved = {
            str(key): _resolve_leniently(config[key]) if key in IDENTITY_ONLY_KEYS else strictly(config[key])
            for key in config
        }
    except OmegaConfBaseException as error:
        raise ConfigError(
            f"cannot resolve the collect configuration: {redact_text(str(error))}. Fix the interpolation "
            "or set the variable"
        ) from error
    return resolved


def _resolve_leniently(node: Any) -> Any:
    """The plain value of an OmegaConf node, child by child; an unresolvable child stays as written."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(node, DictConfig | ListConfig):
        return node
    keys = list(node) if isinstance(node, DictConfig) else range(len(node))
    written = OmegaConf.to_container(node, resolve=False)
    out: dict[Any, Any] | list[Any] = {} if isinstance(node, DictConfig) else []
    for key in keys:
        try:
            value = _resolve_leniently(node[key])
        except OmegaConfBaseException:
            value = written[key]  # type: ignore[index]
        if isinstance(out, dict):
            out[key] = value
        else:
            out.append(value)
    return out


def validate_settings(
    resolved: dict[str, Any], environ: Mapping[str, str] | None = None, raw: dict[str, Any] | None = None
) -> CollectSettings:
    """Validate a resolved configuration into :class:`CollectSettings`, with messages a user can act on.

    ``raw`` (the unresolved configuration) lets a message show an interpolation as written rather
    than its resolved value. ``max_rollout_attempts`` is resolved here too, from ``environ`` (default
    ``os.environ``), so that nothing deeper reads the environment and a bad value is refused before
    anything is written.
    """
    missing = [key for key in ("input_jsonl_fpath", "output_jsonl_fpath") if resolved.get(key) in (None, "")]
    if missing:
        spelled = " ".join(f"+{key}=PATH" for key in missing)
        raise ConfigError(f"missing required setting(s) {', '.join(missing)}: add {spelled}")
    refuse_unsupported(resolved)
    if FROM_ENVIRONMENT in resolved:
        raise ConfigError(
            f"unknown setting {FROM_ENVIRONMENT!r}: the failure budget comes from the environment, as in "
            f"NeMo Gym; drop the override and set {MAX_ATTEMPTS_ENV}=N instead. Valid settings: {_valid()}"
        )
    try:
        return CollectSettings.model_validate({**resolved, FROM_ENVIRONMENT: max_rollout_attempts(environ)})
    except ValidationError as error:
        raise ConfigError(_explain(error, raw or {})) from error


def setting_names() -> frozenset[str]:
    """The names an override of collect may set (what tells them from a NeMo Gym server's)."""
    return frozenset(CollectSettings.model_fields)


def _valid() -> str:
    return ", ".join(sorted(name for name in CollectSettings.model_fields if name != FROM_ENVIRONMENT))


def _shown(loc: tuple[Any, ...], value: Any, raw: dict[str, Any]) -> str:
    """A rejected value as a message may show it: redacted by the identity's rule (and by its name).

    A value that came from an interpolation (``${oc.env:MY_API_KEY}``) is shown as the interpolation
    as written, never as what it resolved to.
    """
    if any(is_credential_name(part) for part in loc if isinstance(part, str)):
        return repr(REDACTED)
    written: Any = raw
    for part in loc:
        written = written.get(part) if isinstance(written, dict) else None
    if isinstance(written, str) and "${" in written:
        return f"{redact_text(written)!r} resolved"
    return redact_text(repr(value))


def _explain(error: ValidationError, raw: dict[str, Any]) -> str:
    lines = []
    valid = _valid()
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "configuration"
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown setting {where!r} (a typo?). Valid settings: {valid}")
        else:
            value = item.get("input")
            shown = "" if isinstance(value, dict) else f" (got {_shown(item['loc'], value, raw)})"
            lines.append(f"{where}: {item['msg'].removeprefix('Value error, ')}{shown}")
    body = "\n  ".join(lines)
    return f"invalid collect configuration:\n  {body}\nSee configs/collect.yaml and docs/collector.md."


def load_settings(
    overrides: list[str], config_dir: Path | None = None, config_name: str = "collect"
) -> tuple[CollectSettings, dict[str, Any]]:
    """Compose, resolve and validate; return the settings and the unresolved config (for identity).

    The secrets of the overrides are learned before composing (a Hydra error repeats an override)
    and those of the resolved configuration before validating (a pydantic error shows a value).
    """
    learn(overrides)
    raw = compose_config(overrides, config_dir, config_name)
    resolved = resolve_config(raw)
    learn(resolved)
    return validate_settings(resolved, raw=raw), raw
