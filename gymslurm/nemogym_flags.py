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

from gymslurm.errors import ConfigError

# NeMo Gym settings folded into a gymslurm one (the rest of the accepted ones keep their names).
FOLDED = {
    "num_samples_in_parallel": "concurrency",
    "head_server": "head_server_url (http://HOST:PORT)",
}

_SERVERS = "gymslurm never starts servers in collect; `gymslurm submit` starts a stack per job"
_TRACKING = "gymslurm writes its metrics files; send them to a tracker from those"
REFUSED: dict[str, str] = {
    "agent_map": "re-routing agents is NeMo Gym's agent routing; name the server with "
    "+environment_server_name or +environment_server_routes",
    "fan_out": "running a row once per agent is not supported; collect once per agent's server",
    "interleave_repeats": "gymslurm dispatches in rollout order (or longest first)",
    "skills": "skills are not supported",
    "max_resident_rollout_tasks": "gymslurm never holds results in memory",
    "retain_results_in_memory": "gymslurm never holds results in memory",
    "health_check_workers": "gymslurm's health report runs in the collector",
    "health_check_ignored_checks": "gymslurm's health report has no per-check switches",
    "count_missing_rollouts_as_zero": "missing rollouts are counted in coverage (coverage/missing), never "
    "scored; `gymslurm aggregate` reports them",
    "rollout_collection_driver": "gymslurm's collection loop is not pluggable",
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


def refuse_unsupported(keys: object) -> None:
    """Refuse, by name and with the reason, NeMo Gym settings that mean nothing under gymslurm."""
    refused = [str(key) for key in keys if str(key) in REFUSED]  # type: ignore[attr-defined]
    if refused:
        lines = "\n  ".join(f"+{key}: {REFUSED[key]}" for key in refused)
        raise ConfigError(
            f"NeMo Gym setting(s) that gymslurm collect does not support:\n  {lines}\n"
            "Drop them (docs/nemo-gym.md lists every `gym eval run` flag and what it maps to)"
        )


def translate_flags(argv: list[str]) -> list[str]:
    """``gym eval run``'s ``--flags`` as Hydra overrides (the overrides themselves pass through)."""
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
        else:
            raise ConfigError(f"unknown option {item!r}: settings are overrides like +limit=10 (see --help)")
    return out


def null_default(key: str, value: str) -> bool:
    """Whether ``key=value`` is NeMo Gym's documented ``null`` for a setting whose null is the default."""
    return key.lstrip("+~") in NULL_IS_DEFAULT and value.strip() == "null"
