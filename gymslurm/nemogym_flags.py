"""NeMo Gym's ``gym eval run`` command line under ``gymslurm collect``: what each flag means here.

A NeMo Gym user's command runs unchanged: ``gymslurm collect`` takes ``gym eval run``'s arguments
(Hydra overrides and its ``--flags``). Each of NeMo Gym 0.7.0's collection settings
(``RolloutCollectionConfig`` and its mixins) is either **accepted** — a setting of
``configs/collect.yaml`` of the same name, or folded into one (:data:`FOLDED`) — or **refused by
name** with the reason (:data:`REFUSED`), before anything is written. docs/nemo-gym.md has the table.

Trade-off: a flag whose NeMo Gym meaning gymslurm does not implement is refused rather than
ignored, so a user never gets a run that silently differs from the one they asked for.
"""

from __future__ import annotations

from collections.abc import Collection

from gymslurm.errors import ConfigError

# NeMo Gym settings folded into a gymslurm one (the rest of the accepted ones keep their names).
FOLDED = {
    "num_samples_in_parallel": "concurrency",
    "head_server": "head_server_url (http://HOST:PORT)",
}

_SERVERS = (
    "gymslurm never starts servers in collect: give it to NeMo Gym's `gym env start`, which starts them "
    "(a benchmark config's servers: runs it in each job of `gymslurm submit`)"
)
_TRACKING = (
    "gymslurm uploads nothing: drop it, and log the run's metrics files to your tracker yourself "
    "(`gymslurm aggregate` writes <stem>_gymslurm_metrics.json and NeMo Gym's <stem>_aggregate_metrics.json)"
)
_NEMO_GYMS_OWN = "run such a line with NeMo Gym's own `gym eval run`"
REFUSED: dict[str, str] = {
    "agent_map": "re-routing agents is NeMo Gym's agent routing; name the server with "
    "+environment_server_name or +environment_server_routes",
    "fan_out": "running a row once per agent is not supported; collect once per agent's server",
    "interleave_repeats": "gymslurm dispatches in rollout order (or longest first)",
    "skills": "NeMo Gym's collector stages a skill directory for the agent and stamps each row with its "
    f"skills_ref; gymslurm has no such step: {_NEMO_GYMS_OWN}",
    "max_resident_rollout_tasks": "gymslurm never holds results in memory",
    "retain_results_in_memory": "gymslurm never holds results in memory",
    "health_check_workers": "gymslurm's health report runs in the collector",
    "health_check_ignored_checks": "gymslurm's health report has no per-check switches",
    "count_missing_rollouts_as_zero": "missing rollouts are counted in coverage (coverage/missing), never "
    "scored; `gymslurm aggregate` reports them",
    "rollout_collection_driver": "gymslurm's collection loop is not pluggable (gdpval's driver runs NeMo "
    f"Gym's multistage ELO procedure and its failure contract): {_NEMO_GYMS_OWN}",
    "drain_margin_s": "the drain margin is the launcher's (`gymslurm submit`, slurm.drain_margin_s)",
    "retry_invalid_judge_responses": "use `gymslurm reverify` to re-judge saved answers",
    "upload_rollouts": _TRACKING,
    "wandb_project": _TRACKING,
    "wandb_name": _TRACKING,
    "wandb_api_key": _TRACKING,
    "mlflow_tracking_uri": _TRACKING,
    "mlflow_tracking_token": _TRACKING,
    "mlflow_experiment_name": _TRACKING,
    "mlflow_run_name": _TRACKING,
    "config_paths": _SERVERS,
    "split": "name the dataset file with +input_jsonl_fpath=",
}

# Settings NeMo Gym documents with ``null`` (``+num_repeats=null``, ``+num_samples_in_parallel=null``,
# ``--concurrency null``): null is NeMo Gym's default there (one repeat; no cap of its own), so it is
# gymslurm's default here (one repeat; configs/collect.yaml's concurrency cap). The override is
# dropped before composing, so the run's identity is the same as without it.
NULL_IS_DEFAULT = frozenset({"num_repeats", "num_samples_in_parallel", "concurrency"})

# gym eval run's --flags → the Hydra key each sets (NeMo Gym's nemo_gym/cli/main.py); None: no value.
VALUE_FLAGS = {
    "--agent": "agent_name",
    "-a": "agent_name",
    "--input": "input_jsonl_fpath",
    "-i": "input_jsonl_fpath",
    "--output": "output_jsonl_fpath",
    "-o": "output_jsonl_fpath",
    "--limit": "limit",
    "--num-repeats": "num_repeats",
    "--concurrency": "num_samples_in_parallel",
    "--prompt-config": "prompt_config",
    "--temperature": "responses_create_params.temperature",
    "--top-p": "responses_create_params.top_p",
    "--max-output-tokens": "responses_create_params.max_output_tokens",
}
BOOL_FLAGS = {
    "--resume": "resume_from_cache",
    "--no-health-check": "disable_health_check",
    "--disable-aggregation": "disable_aggregation",
}
# Accepted and without effect: gymslurm's collect always works against servers that are already up.
NO_OP_FLAGS = frozenset({"--no-serve"})
REFUSED_FLAGS = {
    "--config": _SERVERS,
    "--benchmark": _SERVERS,
    "--environment": _SERVERS,
    "--resources-server": _SERVERS,
    "--model-type": _SERVERS,
    "--search-dir": _SERVERS,
    "--agent-type": _SERVERS,
    "--allow-unsupported-pairing": _SERVERS,
    "--model": _SERVERS,
    "--model-url": _SERVERS,
    "--model-api-key": _SERVERS,
    "-m": _SERVERS,
    "--split": REFUSED["split"],
    "--interleave-repeats": REFUSED["interleave_repeats"],
    "--health-check-workers": REFUSED["health_check_workers"],
    "--health-check-ignore": REFUSED["health_check_ignored_checks"],
}

# Spellings NeMo Gym's docs use that are no flag of its `gym eval run` (`-c` is `gym ... submit`'s).
MISSPELLED_FLAGS = {"-c": "--config PATH"}

# gym eval run's flags that choose or start NeMo Gym's servers; `gym env start` takes each of them.
SERVER_FLAGS = frozenset(
    {
        "--config",
        "--benchmark",
        "--environment",
        "--resources-server",
        "--model-type",
        "--agent-type",
        "--allow-unsupported-pairing",
        "--search-dir",
        "--model",
        "-m",
        "--model-url",
        "--model-api-key",
    }
)
# Parts of a NeMo Gym configuration that only its servers read: an override of a server instance
# (``NAME.<server type>.…``), the policy model's and Ray's settings.
SERVER_TYPES = frozenset(
    {"responses_api_models", "resources_servers", "responses_api_agents", "environment_servers"}
)
SERVER_SETTING_PREFIXES = ("policy_", "ray_")
# The server flags that set a credential, and the configuration key each sets (NeMo Gym's MODEL_API_KEY).
VALUE_FLAGS_OF_SERVERS = {"--model-api-key": "policy_api_key"}
# Settings of NeMo Gym's data preparation, which `gym eval run` does only when it starts the servers
# (E2ERolloutCollectionConfig's and TrainDataProcessorConfig's own).
PREPARATION = frozenset(
    {
        "--split",
        "split",
        "reuse_existing_data_preparation",
        "overwrite_metrics_conflicts",
        "data_source",
        "task_data_validation",
    }
)
_WITHOUT_VALUE = frozenset({"--allow-unsupported-pairing", "--interleave-repeats", *NO_OP_FLAGS, *BOOL_FLAGS})


def refuse_unsupported(keys: object) -> None:
    """Refuse, by name and with the reason, NeMo Gym settings that mean nothing under gymslurm."""
    refused = [str(key) for key in keys if str(key) in REFUSED]  # type: ignore[attr-defined]
    if refused:
        lines = "\n  ".join(f"+{key}: {REFUSED[key]}" for key in refused)
        raise ConfigError(
            f"NeMo Gym setting(s) that gymslurm collect does not support:\n  {lines}\n"
            "Drop them (docs/nemo-gym.md lists every `gym eval run` flag and what it maps to)"
        )


def translate_flags(argv: list[str], settings: Collection[str]) -> list[str]:
    """``gym eval run``'s ``--flags`` as Hydra overrides (the overrides themselves pass through).

    ``settings``: the names of collect's settings (``settings.setting_names()``), which tell the
    collection's overrides from the servers' when a line's server flags are refused.
    """
    refuse_server_flags(argv, settings)
    out: list[str] = []
    items = iter(argv)
    for item in items:
        name, has_value, value = item.partition("=")
        if not name.startswith("-"):
            if not null_default(name, value):
                out.append(item)
        elif name in NO_OP_FLAGS:
            continue
        elif name in BOOL_FLAGS:
            out.append(f"+{BOOL_FLAGS[name]}=true")
        elif name in VALUE_FLAGS:
            value = value if has_value else next(items, "")
            if not value:
                raise ConfigError(f"{name} needs a value (as in `gym eval run {name} VALUE`)")
            if not null_default(VALUE_FLAGS[name], value):
                out.append(f"+{VALUE_FLAGS[name]}={value}")
        elif name in REFUSED_FLAGS:
            raise ConfigError(
                f"gym eval run's {name} is not supported by gymslurm collect: {REFUSED_FLAGS[name]}"
            )
        elif name in MISSPELLED_FLAGS:
            raise ConfigError(
                f"gym eval run has no {name} (NeMo Gym 0.7.0's own parser refuses it too): write "
                f"{MISSPELLED_FLAGS[name]}"
            )
        else:
            raise ConfigError(f"unknown option {item!r}: settings are overrides like +limit=10 (see --help)")
    return out


def null_default(key: str, value: str) -> bool:
    """Whether ``key=value`` is NeMo Gym's documented ``null`` for a setting whose null is the default."""
    return key.lstrip("+~") in NULL_IS_DEFAULT and value.strip() == "null"


def flag_words(argv: list[str]) -> list[tuple[str, str | None]]:
    """``argv`` as ``(flag or override, its value)`` pairs (a flag's separate value taken along)."""
    words: list[tuple[str, str | None]] = []
    items = iter(argv)
    for item in items:
        name, has_value, value = item.partition("=")
        if not name.startswith("-") or has_value:
            words.append((name, value if has_value else None))
        else:
            words.append((name, None if name in _WITHOUT_VALUE else next(items, "")))
    return words


def is_server_word(name: str, settings: Collection[str]) -> bool:
    """Whether a word of ``gym eval run`` is for NeMo Gym's servers (``gym env start`` takes it): a
    server flag, or an override that names neither a collection setting nor a preparation one (a
    server instance's ``NAME.resources_servers.…``, ``policy_base_url``, a key a config interpolates)."""
    if name.startswith("-"):
        return name in SERVER_FLAGS
    root = name.lstrip("+~").split(".")[0]
    return root not in {*settings, *FOLDED, *REFUSED, *NULL_IS_DEFAULT, *PREPARATION}


def sets_server_configuration(name: str) -> bool:
    """Whether an override sets a server instance's configuration (``NAME.<server type>.…``) or a key of
    the policy model's or Ray's (``policy_*``, ``ray_*``), which only NeMo Gym's servers read: under
    ``--no-serve`` it only composes NeMo Gym's collector's copy of the configuration, as server flags do."""
    if name.startswith("-"):
        return False
    path = name.lstrip("+~").split(".")
    return (len(path) > 2 and path[1] in SERVER_TYPES) or path[0].startswith(SERVER_SETTING_PREFIXES)


def refuse_server_flags(argv: list[str], settings: Collection[str]) -> None:
    """Refuse ``gym eval run``'s server flags by name on a collection line.

    Without ``--no-serve`` the line starts NeMo Gym's servers: ``gymslurm collect`` and ``gymslurm submit
    gym eval run ...`` run it as a benchmark (launcher/nemo_gym_line.py) before this is reached. With
    ``--no-serve`` they only compose the collector's own copy of the configuration, while gymslurm reads
    the running servers' configuration from the head server: they are dropped.
    """
    words = flag_words(argv)
    named_flags = [name for name, _ in words if name in SERVER_FLAGS]
    if not named_flags:
        return
    named = "(" + ", ".join(dict.fromkeys(named_flags)) + ")"
    if any(name == "--no-serve" for name, _ in words):
        raise ConfigError(
            f"gym eval run's server flags {named} under --no-serve only compose NeMo Gym's collector's own "
            "copy of the configuration (the servers are already up); gymslurm collect reads the running "
            f"servers' configuration from the head server instead. Drop them (a collection setting such a "
            "config file sets at its top level, e.g. responses_create_params, goes on the command line)"
        )
    raise ConfigError(
        f"gym eval run's server flags {named} without --no-serve start NeMo Gym's servers: give the whole "
        "line to `gymslurm collect` (a local run) or `gymslurm submit [OPTIONS] gym eval run ...` "
        "(docs/nemo-gym.md)"
    )
