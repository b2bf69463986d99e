"""``gymslurm submit gym eval run ARGS`` (and ``gymslurm collect ARGS``): a NeMo Gym line that starts servers.

The line becomes a benchmark (launcher/nemo_gym_line.py): NeMo Gym's ``gym env start`` with the line's
server words in each job, and as its dataset the split NeMo Gym prepares. The preparation runs at
submit, after every refusal and before the run exists, in NeMo Gym's own interpreter: the preparation
half of NeMo Gym 0.7.0's ``gym eval run`` (``e2e_rollout_collection``: its config check, its split
check, ``TrainDataProcessor`` in ``train_preparation`` mode with downloads, its prepared-file check),
then NeMo Gym's ``resolve_task_sources`` on the prepared rows (what its collector does to them before
dispatching). The rows land in a temporary directory and are then moved into gymslurm's own file
(never ``<output>/preprocessed_datasets/``, NeMo Gym's). A failure is NeMo Gym's reason, with nothing
of gymslurm's written. NeMo Gym's code is run, never imported: gymslurm does not depend on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from gymslurm.commands.new_run import BenchmarkInputs, check_dataset, create_run, resolve_backend_name
from gymslurm.commands.runs import DEFAULT_RUN_ROOT
from gymslurm.errors import ConfigError
from gymslurm.launcher.nemo_gym_line import (
    ConfigFlags,
    ServingLine,
    collect_words,
    refuse_unless_serving,
    serving_benchmark,
    split_config_flags,
    translate_serving_line,
    with_config_settings,
)
from gymslurm.launcher.rundir import atomic_write
from gymslurm.launcher.settings import BenchmarkSettings, load_benchmark, validate
from gymslurm.redaction import learn, redact_text, remember
from gymslurm.settings import load_settings, setting_names

# Run by NeMo Gym's interpreter: argv = [DIR, MODE, *gym eval run's words]. On success it prints
# {"split", "path", "rows", "collection": its collector's top-level settings}, else NeMo Gym's own
# message on stderr (exit 2). The words become Hydra overrides as NeMo Gym's main() makes them
# (cli/main.py); the order is e2e_rollout_collection's (cli/eval.py).
CONFIG_DUMP = "Found global config dict yaml:"  # NeMo Gym's errors end with the whole configuration
PREPARE = r"""
import json, sys
from copy import deepcopy
from pathlib import Path

out, mode = Path(sys.argv[1]), sys.argv[2]  # prepare; compose (the split reused); collector (--no-serve)
words = sys.argv[3:]
try:
    from omegaconf import OmegaConf, open_dict
    from nemo_gym.cli.main import _extra_roots_from_search_dir, _merge_config_paths, build_parser

    # gym eval run's own flags to Hydra overrides, as its main() turns them
    args, overrides = build_parser().parse_known_args(["eval", "run", *words])
    if unknown := [word for word in overrides if word.startswith("-")]:
        raise ValueError(f"unrecognized arguments: {' '.join(unknown)}")
    with _extra_roots_from_search_dir(getattr(args, "search_dir", None)):
        translated = [token for flag in args._command.flags for token in flag.translate_to_hydra(args)]
        sys.argv = [sys.argv[0], *_merge_config_paths(translated + overrides)]

        from nemo_gym.cli.eval import _validate_prepared_split_file_exists, _validate_split_datasets_declared
        from nemo_gym.global_config import GlobalConfigDictParser, get_global_config_dict
        from nemo_gym.rollout_collection import (
            E2ERolloutCollectionConfig, RolloutCollectionConfig, RolloutCollectionHelper
        )
        from nemo_gym.train_data_utils import TrainDataProcessor

        config = get_global_config_dict()
        split = "" if mode == "collector" else E2ERolloutCollectionConfig.model_validate(config).split
        fields = {*E2ERolloutCollectionConfig.model_fields, *RolloutCollectionConfig.model_fields}
        collection = {  # the top-level settings its collector reads
            str(key): OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
            for key, value in config.items()
            if key in fields
        }
        rows = []
        if mode == "prepare":
            processing = deepcopy(config)
            with open_dict(processing):
                processing["should_download"] = True
                processing["mode"] = "train_preparation"
                processing["output_dirpath"] = str(out / "prepared")
            instances = GlobalConfigDictParser().filter_for_server_instance_configs(config)
            _validate_split_datasets_declared(split, instances)
            TrainDataProcessor().run(processing)
            prepared = out / "prepared" / f"{split}.jsonl"
            _validate_prepared_split_file_exists(prepared, split, out / "prepared")
            rows = [json.loads(line) for line in prepared.read_text().splitlines() if line.strip()]
            RolloutCollectionHelper.resolve_task_sources(rows, config)
except BaseException as error:
    print(f"{type(error).__name__}: {error}", file=sys.stderr)
    sys.exit(2)
(out / "resolved.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
result = {"split": split, "path": str(out / "resolved.jsonl"), "rows": len(rows)}
print(json.dumps({**result, "collection": collection}))
"""


def nemo_gym_executable() -> str:
    """NeMo Gym's ``gym``: ``$NEMO_GYM_VENV/bin/gym``, else ``gym`` on PATH (absolute, for every job)."""
    venv = os.environ.get("NEMO_GYM_VENV")
    found = str(Path(venv) / "bin" / "gym") if venv else shutil.which("gym")
    if not found or not os.access(found, os.X_OK):
        raise ConfigError(
            "a `gym eval run` line that starts servers needs NeMo Gym's `gym`, and none was found "
            f"({'$NEMO_GYM_VENV/bin/gym' if venv else 'no gym on PATH'}): install nemo-gym "
            "(docs/nemo-gym.md) and put its gym on PATH, or set NEMO_GYM_VENV to its venv"
        )
    return str(Path(found).absolute())


def plan_serving_run(
    argv: list[str], overrides: list[str], gym: str, configs_set: Mapping[str, Any] | None = None
) -> tuple[ServingLine, BenchmarkSettings, dict[str, Any]]:
    """The benchmark of ``gym eval run ARGV`` with submit's ``overrides`` on top, validated with the
    collector's overrides as each job will give them (ConfigError naming the word; nothing written).
    ``configs_set``: the collection settings NeMo Gym's composed configuration holds at its top level
    (what its collector would read from the line's configs), applied as the collector's overrides."""
    line = translate_serving_line(argv, setting_names())
    line = with_config_settings(line, configs_set or {}, setting_names())
    run_root = next((o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("run_root=")), None)
    data = serving_benchmark(line, gym, run_root or DEFAULT_RUN_ROOT)
    if overrides:  # submit's overrides compose on top of the line's benchmark, as on a benchmark file
        with tempfile.TemporaryDirectory(prefix="gymslurm-nemo-gym-line-") as folder:
            path = Path(folder) / f"{data['name']}.yaml"
            path.write_text(yaml.safe_dump(data, sort_keys=False))
            settings, composed = load_benchmark(str(path), overrides)
    else:
        learn(data)
        settings, composed = validate(data, "of this gym eval run line"), data
    job_given = ["+input_jsonl_fpath=in.jsonl", "+output_jsonl_fpath=out.jsonl", "+resume_from_cache=true"]
    load_settings([*settings.collector.overrides, *job_given, "+head_server_url=http://127.0.0.1:1"])
    return line, settings, composed


@dataclass(frozen=True)
class Prepared:
    """What NeMo Gym's run of the preparation gave: the split's rows (None: reused) and its collector's
    top-level settings."""

    split: str
    rows: bytes | None
    collection: dict[str, Any]


class NemoGymSplitInputs(BenchmarkInputs):
    """The split NeMo Gym prepared for a serving line, written to gymslurm's own file, cut into shards."""

    def __init__(self, settings: BenchmarkSettings, workdir: Path, prepared: Prepared) -> None:
        super().__init__(settings, workdir)
        self.prepared = prepared

    def prepare(self) -> None:
        """Write the prepared rows (after submit's refusals, before the run exists), then check them."""
        target = Path(os.path.abspath(self.workdir / self.settings.dataset))
        if self.prepared.rows is not None and write_once(target, self.prepared.rows):
            print(f"NeMo Gym prepared the {self.prepared.split} split: {target}")
        self.dataset = target
        check_dataset(self.dataset, self.settings.shards)


def write_once(target: Path, rows: bytes) -> bool:
    """Write the prepared rows to ``target`` unless it holds them already (True when written).

    Why: the file may be an earlier run's input (its manifest names it); rows that differ (NeMo Gym's
    data changed since) never replace it: ConfigError, before anything is written."""
    try:
        if target.read_bytes() == rows:
            return False
    except FileNotFoundError:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, rows)
        return True
    raise ConfigError(
        f"{target} holds rows NeMo Gym prepared earlier for a run that may still read them, and NeMo Gym "
        "now prepares other rows for this line; nothing was written. Move that file aside (or pass "
        "+run_root=... for a fresh folder), then submit again"
    )


def run_preparation(line: ServingLine, gym: str, cwd: Path, *, reuse: bool) -> Prepared:
    """Run NeMo Gym's preparation (in ``cwd``, as ``gym eval run`` would run there; with ``reuse``, only
    its composition) in a temporary directory; ConfigError with NeMo Gym's reason, nothing written."""
    with tempfile.TemporaryDirectory(prefix="gymslurm-nemo-gym-prepare-") as folder:
        mode = "compose" if reuse else "prepare"
        result = _run_nemo_gym(mode, [*line.preparation], line.secrets, gym, cwd, folder=Path(folder))
        rows = None if reuse else Path(result["path"]).read_bytes()
    return Prepared(result["split"], rows, result["collection"])


def configs_settings(flags: ConfigFlags, gym: str, cwd: Path) -> dict[str, Any]:
    """The collection settings NeMo Gym's collector reads from a ``--no-serve`` line's configs (its own
    composition of them, in NeMo Gym's interpreter); ConfigError with NeMo Gym's reason."""
    with tempfile.TemporaryDirectory(prefix="gymslurm-nemo-gym-compose-") as folder:
        words = ["--no-serve", *flags.servers]
        result = _run_nemo_gym("collector", words, flags.secrets, gym, cwd, folder=Path(folder))
    return dict(result["collection"])


def _run_nemo_gym(
    mode: str, words: list[str], secrets: dict[str, str], gym: str, cwd: Path, *, folder: Path
) -> dict[str, Any]:
    """:data:`PREPARE` in NeMo Gym's interpreter; its result, or ConfigError with NeMo Gym's reason."""
    argv = [
        str(Path(gym).parent / "python"),
        "-c",
        PREPARE,
        str(folder),
        mode,
        *words,
        f"+output_jsonl_fpath={folder}/unused.jsonl",  # E2ERolloutCollectionConfig's; never written
        f"hydra.run.dir={folder}/hydra",  # Hydra's log of the composition: not in the user's folder
    ]
    env = {**os.environ, **secrets, "RAY_USAGE_STATS_ENABLED": "0"}
    remember(secrets.values())  # NeMo Gym may echo a key it was given: replaced wherever it appears
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise preparation_refusal(mode, done.returncode, done.stderr)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def preparation_refusal(mode: str, returncode: int, stderr: str) -> ConfigError:
    """NeMo Gym's reason for a failed preparation (or composition), as a refusal: its last lines before
    the configuration dump, with every secret redacted (a URL's password, a key in a traceback)."""
    said = stderr.partition(CONFIG_DUMP)[0].strip().splitlines()  # the dump: no reason, long
    reason = "\n".join(line for line in said[-15:] if line.strip("═ ")) or f"exit {returncode}"
    doing = "compose the configs of" if mode == "collector" else "prepare the split of"
    return ConfigError(
        f"NeMo Gym could not {doing} this `gym eval run` line (run as gym eval run runs it, it exited "
        f"{returncode}); nothing was written. NeMo Gym says:\n{redact_text(reason)}\nDo what it says "
        "(prepare or download the data, fix the config), then run again"
    )


def submit_line(
    argv: list[str],
    overrides: list[str],
    backend_name: Literal["slurm", "local"] | None,
    dry_run: bool,
    *,
    wait: bool,
) -> int:
    """``gymslurm submit [OPTIONS] gym eval run ARGV``: NeMo Gym prepares the split, then the line's
    benchmark (with the collection settings its configs set) is a run."""
    refuse_unless_serving(argv)  # a --no-serve line's servers are up: collect's, not submit's
    gym = nemo_gym_executable()
    line, settings, _ = plan_serving_run(argv, overrides, gym)  # refusals by name before NeMo Gym runs
    target = Path(os.path.abspath(Path.cwd() / settings.dataset))
    prepared = run_preparation(line, gym, Path.cwd(), reuse=line.reuse_prepared and target.exists())
    line, settings, data = plan_serving_run(argv, overrides, gym, prepared.collection)
    kind = resolve_backend_name(settings, backend_name)
    inputs = NemoGymSplitInputs(settings, Path.cwd(), prepared)
    return create_run(settings, data, overrides, kind, Path.cwd(), dry_run=dry_run, wait=wait, inputs=inputs)


def collect_line(argv: list[str]) -> int:
    """``gymslurm collect ARGV`` for a line that starts servers: its run on this host, waited for."""
    print("gymslurm collect: this `gym eval run` line starts NeMo Gym's servers: running it as a local run")
    sys.stdout.flush()
    return submit_line(argv, [], "local", False, wait=True)


def with_configs_settings(argv: list[str]) -> list[str]:
    """``gymslurm collect ARGV`` for a ``--no-serve`` line with server flags: the line without them, and
    with the collection settings their configs set, read from NeMo Gym's own composition of them."""
    flags = split_config_flags(argv)
    return collect_words(flags, configs_settings(flags, nemo_gym_executable(), Path.cwd()), setting_names())
