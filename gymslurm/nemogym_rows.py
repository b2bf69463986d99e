"""NeMo Gym's own row preparation, for the rows ``gym eval run`` would prepare: its prompt configs and
its ``responses_create_params`` overrides (pure: dicts in, dicts out; docs/nemo-gym.md).

What NeMo Gym 0.7.0 does to a flat row before it is sent (``nemo_gym/prompt.py``,
``RolloutCollectionHelper._preprocess_raw_rows``), done the same way here so that a documented
``gym eval run --prompt-config ...`` or ``--temperature 0.6`` line means the same run under gymslurm:

- ``+prompt_config=FILE`` (``--prompt-config``): a YAML file with ``user`` (required) and ``system``
  (optional) templates, filled from the row's top-level fields with ``str.format_map``; they become
  ``responses_create_params.input`` (``system`` first). A row that already has an ``input`` is refused:
  the two are mutually exclusive, as in NeMo Gym.
- ``+responses_create_params={...}`` (``--temperature``, ``--top-p``, ``--max-output-tokens``): merged
  over each row's own ``responses_create_params`` (the override wins, key by key at the top level).
- ``+num_repeats_add_seed=true``: each repeat's ``responses_create_params.metadata.extra_body`` (a
  JSON string) gets ``seed`` = its rollout index (only vLLM model servers honour it).

Both apply to flat rows only; a materialized task (``task_id`` + ``task_input``) is refused with them,
as NeMo Gym refuses it. Trade-off: the prompt file is resolved from the working directory only (NeMo
Gym also searches its install root); the message says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from gymslurm.errors import ConfigError

RCP = "responses_create_params"


@dataclass(frozen=True)
class RowPreparation:
    """NeMo Gym's preparation of each flat row: a prompt config's templates and parameter overrides."""

    user: str | None = None
    system: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    seed: bool = False

    def __bool__(self) -> bool:
        return self.user is not None or bool(self.overrides) or self.seed


def unreadable_prompt_config(path: str, error: OSError) -> ConfigError:
    """The refusal of a prompt config file that cannot be read (the caller reads it)."""
    return ConfigError(
        f"cannot read the prompt config {path}: {error.strerror or error}. gymslurm resolves "
        "+prompt_config= from the working directory (run from your NeMo Gym checkout, or give its full path)"
    )


def prompt_templates(path: str, text: str) -> tuple[str, str | None]:
    """``(user, system)`` of a NeMo Gym prompt config file's text (ConfigError naming the file when bad)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"the prompt config {path} is not valid YAML: {error}") from None
    user = data.get("user") if isinstance(data, dict) else None
    system = data.get("system") if isinstance(data, dict) else None
    if not isinstance(user, str) or not (system is None or isinstance(system, str)):
        raise ConfigError(
            f"the prompt config {path} needs a `user` template (a string) and may have a `system` one, "
            "as NeMo Gym's prompt configs do"
        )
    return user, system


def prepare_row(position: int, row: dict[str, Any], preparation: RowPreparation) -> dict[str, Any]:
    """A flat row as NeMo Gym prepares it: the prompt config's messages, then the overrides."""
    if preparation.user is not None:
        row = _with_prompt(position, row, preparation.user, preparation.system)
    if preparation.overrides:
        params = row.get(RCP)
        if not isinstance(params, dict):
            raise ConfigError(
                f"row {position} has no {RCP} object to apply +{RCP} (--temperature, --top-p, "
                "--max-output-tokens) to; add it to the row, as NeMo Gym needs it too"
            )
        row = {**row, RCP: {**params, **preparation.overrides}}
    return row


def with_seed(row: dict[str, Any], rollout_index: int) -> dict[str, Any]:
    """A repeat's row with ``seed`` in its ``responses_create_params.metadata.extra_body`` (NeMo Gym's)."""
    params = dict(row.get(RCP) or {})
    metadata = dict(params.get("metadata") or {})
    extra_body = json.loads(metadata.get("extra_body", "{}"))
    extra_body["seed"] = rollout_index
    metadata["extra_body"] = json.dumps(extra_body)
    return {**row, RCP: {**params, "metadata": metadata}}


def refuse_for_task(position: int, preparation: RowPreparation) -> None:
    """A materialized task row is sent as saved: NeMo Gym refuses these settings on it, so does gymslurm."""
    if preparation:
        raise ConfigError(
            f"row {position} is a materialized task (task_id + task_input): +prompt_config, +{RCP} "
            "(--temperature, --top-p, --max-output-tokens) and +num_repeats_add_seed apply to flat rows "
            "only, as in NeMo Gym; "
            "put the prompt or parameters in its task_input"
        )


def _with_prompt(position: int, row: dict[str, Any], user: str, system: str | None) -> dict[str, Any]:
    params = row.get(RCP)
    if isinstance(params, dict) and params.get("input"):
        raise ConfigError(
            f"row {position} has {RCP}.input and +prompt_config is given too: they are mutually "
            "exclusive (as in NeMo Gym); use one or the other"
        )
    try:
        messages = [{"role": "system", "content": system.format_map(row)}] if system is not None else []
        messages.append({"role": "user", "content": user.format_map(row)})
    except KeyError as error:
        raise ConfigError(
            f"row {position}: the prompt config uses {{{error.args[0]}}}, which the row does not have "
            f"(it has: {', '.join(row)})"
        ) from None
    except (ValueError, IndexError, AttributeError) as error:
        raise ConfigError(f"the prompt config's template is not a valid format string: {error}") from None
    return {**row, RCP: {**(params if isinstance(params, dict) else {}), "input": messages}}
