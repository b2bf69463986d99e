"""A ``gym eval run`` line that starts NeMo Gym's servers, as a gymslurm benchmark. Pure.

Without ``--no-serve``, NeMo Gym 0.7.0's ``gym eval run`` (``nemo_gym/cli/eval.py``,
``e2e_rollout_collection``) prepares the ``--split`` dataset (``TrainDataProcessor`` in
``train_preparation`` mode, downloading what is missing, into ``<output>/preprocessed_datasets/``),
starts every server of its configs and collects from them. Here the same line becomes a benchmark:

- its **server words** (``--config``, ``--benchmark``, ``--model-type``..., and every override that is
  not a collection or preparation setting) start the stack in each job with NeMo Gym's own
  ``gym env start`` (as configs/benchmarks/nemo_gym_weather.yaml does), the head server on the job's
  port; a credential goes to that process's environment (``${oc.env:...}``), never its argv;
- its **preparation words** (``--split``, ``reuse_existing_data_preparation``, the preparation's own
  settings) and the server words (NeMo Gym composes, and resolves, the whole configuration) prepare
  the split with NeMo Gym's own code, at submit, into gymslurm's own file
  (``commands/nemo_gym_serve.py``): the benchmark's dataset;
- the rest are **collection words**, the collector's overrides, as ``gymslurm collect`` takes them.

Trade-off: which split and which data the configs declare is NeMo Gym's to say (a config file may set
``split``), so it is learned only by preparing; a line is judged here by its words alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gymslurm.errors import ConfigError
from gymslurm.launcher.benchmark_checks import override_grammar_problem
from gymslurm.nemogym_flags import (
    PREPARATION,
    REFUSED,
    SERVER_FLAGS,
    VALUE_FLAGS_OF_SERVERS,
    flag_words,
    is_server_word,
    sets_server_configuration,
    translate_flags,
)
from gymslurm.redaction import is_credential_name

# The preparation's own settings (NeMo Gym's E2ERolloutCollectionConfig and TrainDataProcessorConfig).
PREPARATION_KEYS = frozenset(
    {
        "split",
        "reuse_existing_data_preparation",
        "overwrite_metrics_conflicts",
        "data_source",
        "task_data_validation",
    }
)
SPLITS = ("train", "validation", "benchmark")  # E2ERolloutCollectionConfig.split
# What each job's collector is given by the job itself (job/collector_process.py), or what the run does.
OWN_KEYS = frozenset({"output_jsonl_fpath", "resume_from_cache"})
OUTPUT_FLAGS = frozenset({"--output", "-o"})
INPUT_WORDS = frozenset({"--input", "-i", "input_jsonl_fpath"})
# NeMo Gym's own words (E2ERolloutCollectionConfig's validators) for what a serving line cannot take.
NEMO_GYM_ON_INPUT = (
    "`input_jsonl_fpath` (-i/--input) is not supported when serving end-to-end: the input is always the "
    "prepared dataset for the requested split. Either add --no-serve to collect rollouts from your own "
    "input file against already-running servers, or drop -i/--input to use the prepared data."
)
NEMO_GYM_ON_EXAMPLE = (
    "`--split example` is not runnable end-to-end: example datasets are committed smoke-test samples, not "
    "prepared train/validation/benchmark splits. To run one, start the servers and point at the example "
    "file directly: `gym env start ...` then `gymslurm collect --no-serve --input "
    "<server_dir>/data/example.jsonl`"
)
HEAD_SERVER = ("+head_server.host=127.0.0.1", "+head_server.port={port}")
SECRET_ENV_PREFIX = "GYMSLURM_NEMO_GYM_"


@dataclass(frozen=True)
class ServingLine:
    """A server-starting ``gym eval run`` line, its words sorted by who takes them."""

    servers: tuple[str, ...]  # gym env start's arguments (credentials as ${oc.env:...})
    secrets: dict[str, str]  # environment variable → credential, for gym env start and the preparation
    preparation: tuple[str, ...]  # the preparation's arguments (the server words among them)
    collection: tuple[str, ...]  # the collector's overrides
    output_stem: str
    reuse_prepared: bool


def starts_servers(argv: list[str]) -> bool:
    """Whether ``gym eval run ARGV`` starts NeMo Gym's servers: no ``--no-serve``, and a server flag or
    ``--split``, which only ``gym eval run`` has. Overrides alone (``+config_paths``, ``+split``) may be
    ``ng_collect_rollouts``' too, which never starts servers: such a line stays a collection line."""
    words = flag_words(argv)
    if any(name == "--no-serve" for name, _ in words):
        return False
    return any(name in SERVER_FLAGS or name == "--split" for name, _ in words)


def refuse_unless_serving(argv: list[str]) -> None:
    """``gymslurm submit ... gym eval run ARGV`` runs a line that starts NeMo Gym's servers in each job:
    a line that starts none (``--no-serve``: they are up already; or no server flag and no ``--split``)
    is refused by name before anything runs, with the command that collects it."""
    if starts_servers(argv):
        return
    if any(name == "--no-serve" for name, _ in flag_words(argv)):
        raise ConfigError(
            "gym eval run's --no-serve says NeMo Gym's servers are up already, and `gymslurm submit ... gym "
            "eval run` runs a line that starts them in each job; nothing was written. To collect against "
            "the running servers, give the same words to `gymslurm collect` (server flags there only "
            "compose the collector's configuration, as in NeMo Gym); to have each job start them, drop "
            "--no-serve (docs/nemo-gym.md)"
        )
    raise ConfigError(
        "this gym eval run line starts no servers (no server flag such as --benchmark or --config, no "
        "--split), and `gymslurm submit ... gym eval run` runs a line that starts them in each job; nothing "
        "was written. To collect against servers already up, give the same words to `gymslurm collect` "
        "(docs/nemo-gym.md)"
    )


def _key(name: str) -> str:
    return name.lstrip("+~").split(".")[0]


def _word(name: str, value: str | None) -> list[str]:
    """A word pair as argv (``--flag VALUE`` or ``+key=value``)."""
    if value is None:
        return [name]
    return [name, value] if name.startswith("-") else [f"{name}={value}"]


def translate_serving_line(argv: list[str], settings: Collection[str]) -> ServingLine:
    """Sort a server-starting line's words (ConfigError naming a word NeMo Gym's own serving run refuses)."""
    servers: list[str] = []
    preparation: list[str] = []
    collection: list[str] = []
    secrets: dict[str, str] = {}
    stem, reuse = "rollouts", False
    for name, value in flag_words(argv):
        key = _key(name)
        if name in INPUT_WORDS or key == "input_jsonl_fpath":
            raise ConfigError(
                f"gym eval run's {name} on a line that starts servers: NeMo Gym says {NEMO_GYM_ON_INPUT}"
            )
        if name == "--split" or key == "split":
            preparation += _word(name, value)
            _check_split(value)
        elif key in PREPARATION:
            preparation += _word(name, value)  # as the user wrote it (++key: NeMo Gym's documented form)
            reuse = reuse or (key == "reuse_existing_data_preparation" and str(value).lower() == "true")
        elif name in OUTPUT_FLAGS or key == "output_jsonl_fpath":
            stem = output_stem(value)
        elif key in OWN_KEYS or name == "--resume":
            continue  # every link resumes its shard (job/collector_process.py)
        elif key == "head_server":
            continue  # the job's head server listens on the job's own port
        elif key == "config_paths" or is_server_word(name, settings):
            credential = _credential_key(name)
            if credential is None:
                servers += _word(name, value)
                preparation += _word(name, value)
            else:
                variable = secret_variable(credential)
                secrets[variable] = value or ""
                servers.append(f"++{credential}=${{oc.env:{variable}}}")
                preparation.append(f"++{credential}=${{oc.env:{variable}}}")  # NeMo Gym resolves it there too
        else:
            collection += _word(name, value)
    # each value as NeMo Gym's parser hands it to Hydra (a flag's as +KEY=VALUE)
    overrides = [w if "=" in w else f"+value={w}" for w in (*servers, *preparation) if not w.startswith("-")]
    if problem := override_grammar_problem(overrides, "gym eval run's line"):
        raise ConfigError(
            f"{problem} (NeMo Gym's own parser refuses it too: fill in the line's placeholders)"
        )
    return ServingLine(
        servers=tuple(servers),
        secrets=secrets,
        preparation=tuple(preparation),
        collection=tuple(translate_flags(collection, settings)),
        output_stem=stem,
        reuse_prepared=reuse,
    )


def _credential_key(name: str) -> str | None:
    """The configuration key a credential word sets (``--model-api-key``: ``policy_api_key``), else None."""
    if name in VALUE_FLAGS_OF_SERVERS:
        return VALUE_FLAGS_OF_SERVERS[name]
    if name.startswith("-") or not is_credential_name(name.lstrip("+~")):
        return None
    return name.lstrip("+~")


def secret_variable(credential: str) -> str:
    """The environment variable that carries a credential to NeMo Gym (``${oc.env:...}``): a shell name
    (``++NAME.responses_api_models.vllm_model.api_key``: ``GYMSLURM_NEMO_GYM_NAME_RESPONSES_..._API_KEY``)."""
    return SECRET_ENV_PREFIX + "".join(c if c.isalnum() else "_" for c in credential).upper()


def _check_split(value: str | None) -> None:
    """NeMo Gym's own rule for the split of a serving run (E2ERolloutCollectionConfig)."""
    if value == "example":
        raise ConfigError(f"gym eval run's --split example: NeMo Gym says {NEMO_GYM_ON_EXAMPLE}")
    if value not in SPLITS:
        raise ConfigError(f"gym eval run's --split {value!r}: NeMo Gym's split is one of {', '.join(SPLITS)}")


def output_stem(value: str | None) -> str:
    """The run's output stem: the ``--output`` file's name without ``.jsonl`` (a slug)."""
    stem = Path(value or "").name.removesuffix(".jsonl")
    slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in stem).strip("_-")
    return slug or "rollouts"


def prepared_path(line: ServingLine, run_root: str) -> str:
    """gymslurm's own file for the prepared split: one per preparation (its words), never NeMo Gym's."""
    digest = hashlib.sha256(json.dumps(line.preparation).encode()).hexdigest()[:16]
    return str(Path(run_root) / "nemo_gym_prepared" / f"{line.output_stem}-{digest}.jsonl")


def serving_benchmark(line: ServingLine, gym: str, run_root: str) -> dict[str, Any]:
    """The benchmark of a serving line: NeMo Gym's stack started by ``gym`` (its ``gym`` executable) in
    each job, the prepared split as the dataset, the collection words as the collector's overrides."""
    return {
        "name": f"nemo_gym_{line.output_stem}",
        "dataset": prepared_path(line, run_root),
        "output_stem": line.output_stem,
        "run_root": run_root,
        "servers": [
            {
                "name": "nemo_gym",
                "command": [gym, "env", "start", *line.servers, *HEAD_SERVER],
                "host": "127.0.0.1",
                "port": 0,
                "health_path": "/readyz",  # 503 until every server of the stack is up
                "probe": "health",
                "startup_timeout_s": 600,
                "env": dict(line.secrets),
                "collector_override": "+head_server_url",
            }
        ],
        "collector": {"overrides": list(line.collection)},
    }


# Top-level keys of NeMo Gym's composed configuration that are no collection setting of the line's configs.
NOT_FROM_CONFIGS = frozenset({"output_jsonl_fpath", "input_jsonl_fpath", "head_server", "config_paths"})


def settings_the_configs_set(keys: Collection[str], line: ServingLine) -> list[str]:
    """Of the collection settings at the top of NeMo Gym's composed configuration (``keys``), those the
    line's configs set: what NeMo Gym's collector takes from them (the line's own words aside)."""
    given = {_key(word.split("=", 1)[0]) for word in line.preparation}
    return [key for key in keys if key not in NOT_FROM_CONFIGS | PREPARATION | given]


def with_config_settings(
    line: ServingLine, values: Mapping[str, Any], settings: Collection[str]
) -> ServingLine:
    """``line`` with the collection settings its configs set (``values``: NeMo Gym's top-level ones) as
    collector overrides before the line's own, as NeMo Gym's collector applies them (a mapping key by key;
    a key the line sets is the line's); a setting gymslurm refuses is then refused by name."""
    keys = settings_the_configs_set(list(values), line)
    if refused := [key for key in keys if key in REFUSED]:
        reasons = "; ".join(f"{key}: {REFUSED[key]}" for key in refused)
        raise ConfigError(
            f"the configs of this gym eval run line set {', '.join(refused)} at their top level, which NeMo "
            f"Gym's collector applies and gymslurm does not support ({reasons}): this line cannot run here "
            "as NeMo Gym runs it"
        )
    own = {word.split("=", 1)[0].lstrip("+~") for word in line.collection}
    words = [
        word
        for key in keys
        for word in _flat(key, values[key])
        if word.split("=", 1)[0].lstrip("+~") not in own
    ]
    return replace(line, collection=(*translate_flags(words, settings), *line.collection))


def _flat(key: str, value: Any) -> list[str]:
    """``++key=value`` overrides of one setting, a mapping key by key (JSON values: Hydra's grammar)."""
    if isinstance(value, Mapping) and value:
        return [word for sub, item in value.items() for word in _flat(f"{key}.{sub}", item)]
    return [f"++{key}={json.dumps(value)}"]


@dataclass(frozen=True)
class ConfigFlags:
    """A ``--no-serve`` line's server flags, which only compose NeMo Gym's collector's own copy of the
    configuration (the servers are up), and the rest of the line."""

    servers: tuple[str, ...]  # the server flags, for NeMo Gym's composition (credentials as ${oc.env:...})
    secrets: dict[str, str]
    rest: tuple[str, ...]


def _composes(name: str) -> bool:
    """Whether a word of a ``--no-serve`` line only composes NeMo Gym's collector's copy of the
    configuration: a server flag, or an override of the servers' configuration."""
    return name in SERVER_FLAGS or sets_server_configuration(name)


def composes_configs(argv: list[str]) -> bool:
    """Whether a ``--no-serve`` line gives server flags or server overrides (what their configs set for
    its collector is read from NeMo Gym's composition of them; the words themselves are dropped)."""
    words = flag_words(argv)
    return any(n == "--no-serve" for n, _ in words) and any(_composes(n) for n, _ in words)


def split_config_flags(argv: list[str]) -> ConfigFlags:
    """The server flags and overrides of a ``--no-serve`` line apart from the rest."""
    servers: list[str] = []
    secrets: dict[str, str] = {}
    rest: list[str] = []
    for name, value in flag_words(argv):
        if not _composes(name):
            rest += _word(name, value)
        elif (credential := _credential_key(name)) is not None:
            variable = secret_variable(credential)
            secrets[variable] = value or ""
            servers.append(f"++{credential}=${{oc.env:{variable}}}")
        else:
            servers += _word(name, value)
    return ConfigFlags(tuple(servers), secrets, tuple(rest))


def collect_words(flags: ConfigFlags, values: Mapping[str, Any], settings: Collection[str]) -> list[str]:
    """The collect line of a ``--no-serve`` line: the collection settings its configs set (``values``,
    NeMo Gym's top-level ones) before the rest of the line, as NeMo Gym's collector applies them."""
    line = ServingLine((), {}, (), tuple(translate_flags(list(flags.rest), settings)), "rollouts", False)
    return list(with_config_settings(line, values, settings).collection)
