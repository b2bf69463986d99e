"""``gymslurm collect``: parse the command line, validate settings once, run the collector.

The arguments are Hydra overrides in NeMo Gym's spelling (``+output_jsonl_fpath=...``), so a command
line moves between ``ng_collect_rollouts`` and ``gymslurm collect`` unchanged. Two options choose a
benchmark config other than the shipped ``configs/collect.yaml``: ``--config-dir DIR`` and
``--config-name NAME`` (a file there can start with ``defaults: [collect, _self_]``).
User errors raise :class:`~gymslurm.errors.GymslurmError`; ``cli.py`` prints them without a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gymslurm.exitcodes import ExitCode

USAGE = """usage: gymslurm collect [--config-dir DIR] [--config-name NAME] OVERRIDE...

Collect rollouts from Environment Servers into a crash-safe, resumable run.

Overrides use NeMo Gym's spelling (+key=value; key=value also works):
  +input_jsonl_fpath=PATH             the dataset (JSONL, one task per line)       required
  +output_jsonl_fpath=PATH            the results file; companions live beside it  required
  +environment_server_url=URL         the Environment Server (http://HOST:PORT)
  +environment_server_urls={ts: URL}  one server per taskset
  +num_repeats=N  +limit=N            repeats per task, first N dataset rows
  +resume_from_cache=true             resume after checking the run's identity
  +allow_unsafe_resume=true           import a run without manifest / accept a changed identity
  +route_failures_to_sidecar=true     save malformed replies as failures instead of stopping
  +require_complete=true              exit 75/1/76 unless every rollout completed
  +concurrency=N                      requests in flight (alias +num_samples_in_parallel=N)
  +dispatch_budget_s=S                stop dispatching after S seconds
  +dispatch_longest_first=true        dispatch long tasks first (_ng_expected_duration_s)
  +retry_terminal_timeouts=true       make terminal timeouts retryable (saved in the manifest)

Every setting with its default: configs/collect.yaml. Docs: docs/collector.md.
Exit codes: 0 complete (or partial without require_complete), 75 resume to continue,
1 retryable without progress, 76 only terminal failures remain, 2 configuration error."""


def split_options(argv: list[str]) -> tuple[Path | None, str, list[str]]:
    """Pull ``--config-dir``/``--config-name`` out of ``argv``; the rest are Hydra overrides."""
    from gymslurm.errors import ConfigError
    from gymslurm.nemogym_flags import translate_flags
    from gymslurm.settings import setting_names

    config_dir: Path | None = None
    config_name = "collect"
    overrides: list[str] = []
    items = iter(argv)
    for item in items:
        name, _, value = item.partition("=")
        if name in ("--config-dir", "--config-name"):
            if not value:
                value = next(items, "")
            if not value:
                raise ConfigError(f"{name} needs a value; see `gymslurm collect --help`")
            if name == "--config-dir":
                config_dir = Path(value)
            else:
                config_name = value
        else:
            overrides.append(item)
    return config_dir, config_name, translate_flags(overrides, setting_names())


def main(argv: list[str]) -> int:
    """Run ``gymslurm collect``; return its exit code."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE)
        return ExitCode.DONE
    from gymslurm.collector.seal import invocation, replay
    from gymslurm.commands.overrides import secret_overrides
    from gymslurm.launcher.nemo_gym_line import composes_configs, starts_servers
    from gymslurm.process_env import SECRET_OVERRIDES_ENV

    if starts_servers(argv):  # NeMo Gym's gym eval run without --no-serve (docs/nemo-gym.md)
        from gymslurm.commands.nemo_gym_serve import collect_line

        return collect_line(argv)
    if composes_configs(argv):  # --no-serve with server flags: the settings their configs set
        from gymslurm.commands.nemo_gym_serve import with_configs_settings

        argv = with_configs_settings(argv)
    config_dir, config_name, overrides = split_options(argv)
    given = secret_overrides()
    os.environ.pop(SECRET_OVERRIDES_ENV, None)  # read once: no process the collector starts inherits them
    command = invocation(overrides, config_dir, config_name, given)
    answered = replay(command, sys.stdout, sys.stderr, [*overrides, *given])  # from a finished run's seal
    if answered is not None:
        return answered

    from gymslurm.collector.collect import run_collect
    from gymslurm.settings import load_settings

    settings, raw = load_settings([*overrides, *given], config_dir, config_name)
    return run_collect(settings, raw, stderr=sys.stderr, stdout=sys.stdout, command=command)
