"""NeMo Gym's own documented command lines under gymslurm collect: the acceptance rate (issue 34).

The corpus: every command line of NeMo Gym 0.7.0's own documentation, as the wheel ships it (its
``*.md`` files: benchmark, environment, server and agent READMEs), that starts with ``gym eval run``
or ``ng_collect_rollouts`` (backslash continuations joined, ``$``/``VAR=...`` prefixes and a trailing
pipe or redirection dropped). Each is given to ``gymslurm collect``'s own parsing, unchanged
(``nemogym_flags.translate_flags``, then ``settings.load_settings``): **accepted**, or **refused by
name** (a ConfigError naming the flag or setting and what to use instead), or refused because the
line itself is incomplete (a placeholder ``...``, no input file, a diagram). Nothing else may happen.

A line that cannot run as written in either tool (a placeholder ``<>``, ``<name>``, a value ``...``,
a fragment's ``--no-serve ...``, a shell's ``${VAR:-1}`` or ``$(pwd)``) is a template: it is judged
once more filled in as its README asks (:data:`FILLS`), and counts as accepted only in that form.
A line that starts servers (no ``--no-serve``: a server flag or ``--split``) is judged by what
``gymslurm submit ... gym eval run`` runs: its translation into a benchmark (the same code as the
end-to-end test of tests/compat/test_nemo_gym_serving_line.py), with the collection settings its
config files set at their top level (read here as NeMo Gym resolves their paths; at submit, NeMo
Gym's own composition gives them). A ``--no-serve`` line with server flags or server overrides is
judged as ``gymslurm collect`` runs it: the rest of the line with the settings its configs set.

The rates are printed (``-s``, with every line not accepted) and held to the floors measured when
this test was written: **321 of the 353 lines accepted (90.9 %)**, 297 of them as written (84.1 %)
and 24 templates filled in; 16 refused by name (6 gdpval's ``rollout_collection_driver``, 4
``+wandb_*``, 3 ``+skills``, 2 ``-c``, 1 ``--input`` on a serving line), 16 incomplete (12
``--no-serve`` lines naming no input file, which NeMo Gym's collector refuses too; 2 elided keys; a
diagram; an unknown key). Before: 296 (84 %) with templates unfilled; 214 (61 %) before issue 34.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gymslurm.commands.nemo_gym_serve import plan_serving_run
from gymslurm.errors import ConfigError
from gymslurm.launcher.nemo_gym_line import (
    collect_words,
    composes_configs,
    serving_benchmark,
    split_config_flags,
    starts_servers,
    translate_serving_line,
)
from gymslurm.nemogym_flags import translate_flags
from gymslurm.settings import load_settings, setting_names
from tests.compat.nemogym import NemoGymSetupError, ensure_nemo_gym, site_packages

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

COMMAND = re.compile(r"^(\$ )?([A-Z_][A-Z0-9_]*=\S+ )*(gym eval run|ng_collect_rollouts)\b")
ENDS = ("|", ">", ">>", "2>&1", "&&", ";", "&")
FLOOR = 321 / 353  # accepted, templates filled in (measured when written; may grow, never shrink)
FLOOR_AS_WRITTEN = 297 / 353  # accepted as written
SERVING_FLOOR = 37  # server-starting lines accepted (of 52; templates filled in), when written
# A refusal of the line itself (the documentation's shorthand, or a shell's ${VAR:-default} that a
# shell expands before any command sees it), not of a NeMo Gym feature.
INCOMPLETE = re.compile(
    r"missing required setting|cannot compose|unknown setting|are the same file"
    r"|Unsupported interpolation type|is not a Hydra override"
)


def doc_lines(root: Path) -> list[tuple[str, str]]:
    """``(file, command)`` for each documented command line under ``root``."""
    found = []
    for path in sorted(root.rglob("*.md")):
        lines = path.read_text(errors="replace").splitlines()
        number = 0
        while number < len(lines):
            line = lines[number]
            while line.rstrip().endswith("\\") and number + 1 < len(lines):
                number += 1
                line = line.rstrip()[:-1] + " " + lines[number].strip()
            if COMMAND.match(line.strip()):
                found.append((str(path.relative_to(root)), line.strip()))
            number += 1
    return found


# A documented line is a template where it shows a placeholder (``<>``, ``<your_endpoint>``, ``<name>``,
# a value ``...``, a fragment's ``gym eval run --no-serve ... --concurrency 16``) or shell syntax
# (``${NUM_REPEATS:-1}``, ``$(pwd)``): no tool takes it as written (NeMo Gym's parser hands ``<>`` to
# Hydra, which refuses it), and a user fills it in before running it. Each fill is what the line's own
# README asks for, by the flag or key the placeholder is the value of (an endpoint, a key, a model, a
# model type); a placeholder inside a path names what the wheel ships there (openenv's one environment,
# ``coding``; cvdp's ``example`` dataset); a fragment's ``...`` (the rest of the user's line) is the
# least line, an input and an output file, so what is judged is the flags the fragment shows. An
# elided key (gdpval's ``reference_models...=...``) is not guessed: the line stays incomplete.
PLACEHOLDER = r"<[^<>]*>"
FILLS: tuple[tuple[str, str], ...] = (
    (rf"(--model-url |base_url=){PLACEHOLDER}(?=/v1)", r"\1http://127.0.0.1:8000"),
    (rf"(--model-url |base_url=){PLACEHOLDER}", r"\1http://127.0.0.1:8000/v1"),
    (rf"(--model-api-key |api_key=){PLACEHOLDER}", r"\1EMPTY"),
    (rf"(--model |-m |model_name=|\.model=|judge_model=){PLACEHOLDER}", r"\1Qwen/Qwen3-8B"),
    (rf"(--model-type ){PLACEHOLDER}", r"\1vllm_model"),
    (rf"(--benchmark ){PLACEHOLDER}", r"\1gpqa"),  # switchyard's "any benchmark Gym already supports"
    (r"(=)<([^<>|]*?) *\|[^<>]*>", r"\1\2"),  # a choice (<a.sif | docker://b>): the first
    (r"(--agent )<agent_id>", r"\1haystack_agent"),
    (r"<dataset\.jsonl>", "tasks.jsonl"),
    (r"<dataset>", "example"),
    (r"<name>", "coding"),
    (r"<output>", "rollouts"),
    (r"(--no-serve) \.\.\.(?= )", r"\1 --input tasks.jsonl --output results/rollouts.jsonl"),
    (r"(input_jsonl_fpath=)\.\.\.(?!\S)", r"\1tasks.jsonl"),
    (r"(output_jsonl_fpath=)\.\.\.(?!\S)", r"\1results/rollouts.jsonl"),
    (r"\$\{[A-Z_][A-Z0-9_]*:-([^}]*)\}", r"\1"),  # the shell's default for an unset variable
    (r"\$\(pwd\)", "/home/user/work"),  # the shell's command substitution: the working directory
)


def filled(command: str) -> str:
    """A documented line with its placeholders filled in as a user fills them (:data:`FILLS`)."""
    for pattern, value in FILLS:
        command = re.sub(pattern, value, command)
    return command


def arguments(command: str) -> list[str]:
    """The arguments of a documented line, as ``gym eval run`` (or ``ng_collect_rollouts``) gets them."""
    words = shlex.split(COMMAND.sub(lambda m: m.group(3), command), comments=True)
    words = words[3:] if words[:3] == ["gym", "eval", "run"] else words[1:]
    cut = next((i for i, word in enumerate(words) if word in ENDS), len(words))
    return words[:cut]


def verdict(command: str, gym: str = "gym", configs_set: dict[str, Any] | None = None) -> str:
    """``accepted``, ``refused: <flag>`` (named in the message), or ``incomplete: <message>``. A line
    that starts servers is judged by what ``gymslurm submit ... gym eval run`` runs: its translation
    into a benchmark, with the collection settings its configs set (``configs_set``, read from them
    as NeMo Gym finds them), validated with its collector's overrides (``plan_serving_run``)."""
    try:
        words = arguments(command)
    except ValueError as error:
        return f"incomplete: {error}"
    try:
        if starts_servers(words):
            plan_serving_run(words, [], gym, configs_set)
        elif composes_configs(words):  # --no-serve with server flags: what gymslurm collect runs
            flags = split_config_flags(words)
            load_settings(
                translate_flags(collect_words(flags, configs_set or {}, setting_names()), setting_names())
            )
        else:
            load_settings(translate_flags(words, setting_names()))
    except ConfigError as error:
        message = str(error)
        if INCOMPLETE.search(message):
            return "incomplete: " + message.splitlines()[0][:80]
        keys = [*(word.split("=")[0].lstrip("+~").split(".")[0] for word in words), *(configs_set or {})]
        head = message.partition("`")[0]  # the refusal itself, before the command lines it spells
        named = [key for key in keys if key and key in head]
        assert named, f"a refusal that names no flag of the line: {message}\n{command}"
        return f"refused: {min(named, key=head.index)}"
    return "accepted"


@pytest.fixture(scope="module")
def nemo_gym_venv() -> Path:
    try:
        return ensure_nemo_gym()
    except NemoGymSetupError as error:
        pytest.fail(f"NeMo Gym could not be installed: {error}", pytrace=False)


# NeMo Gym's own parser and config paths, in its own interpreter: for each line's words, the collection
# settings its config files set at their top level (following their config_paths), as the composition
# at submit finds them (commands/nemo_gym_serve.py), without composing (a line's placeholders: none).
CONFIGS_SET = """
import json, sys
from pathlib import Path

import yaml
import nemo_gym
from nemo_gym.cli.main import _merge_config_paths, build_parser
from nemo_gym.rollout_collection import E2ERolloutCollectionConfig, RolloutCollectionConfig

FIELDS = {*E2ERolloutCollectionConfig.model_fields, *RolloutCollectionConfig.model_fields}
ROOT = Path(nemo_gym.__file__).resolve().parents[1]

def settings(path, seen):
    path = Path(path) if Path(path).is_absolute() else ROOT / path
    if path in seen or not path.is_file():
        return {}
    seen.add(path)
    data = yaml.safe_load(path.read_text()) or {}
    found = {}
    for inner in data.get("config_paths") or []:
        found.update(settings(inner, seen))
    return {**found, **{key: value for key, value in data.items() if key in FIELDS}}

out = []
for words in json.load(sys.stdin):
    try:
        args, overrides = build_parser().parse_known_args(["eval", "run", *words])
        flags = [t for f in args._command.flags for t in f.translate_to_hydra(args)]
        tokens = _merge_config_paths(flags + overrides)
    except (SystemExit, Exception):
        out.append({})
        continue
    paths = [p for t in tokens if t.startswith("+config_paths=[") for p in t[15:-1].split(",") if p]
    seen, found = set(), {}
    for path in paths:
        found.update(settings(path, seen))
    out.append(found)
print(json.dumps(out))
"""


def configs_set(venv: Path, lines: list[list[str]]) -> list[dict[str, Any]]:
    """The collection settings each line's configs set (:data:`CONFIGS_SET`, one NeMo Gym process)."""
    done = subprocess.run(
        [str(venv / "bin/python"), "-c", CONFIGS_SET],
        input=json.dumps(lines),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Judged:
    """A documented line's verdict; a template's (:func:`filled` changes it, and as written it is not
    accepted) is its filled-in form's."""

    command: str  # as documented
    words: list[str] | None  # the arguments judged (filled in for a template); None: no shell line
    verdict: str
    filled_in: bool


def _words(command: str) -> list[str] | None:
    try:
        return arguments(command)
    except ValueError:
        return None


@pytest.fixture(scope="module")
def judged(nemo_gym_venv: Path) -> list[Judged]:
    """Each documented line, judged once as written and, for a template that is not accepted so, once
    filled in (about 0.1 s a line)."""
    gym = str(nemo_gym_venv / "bin" / "gym")
    commands = [command for _, command in doc_lines(site_packages(nemo_gym_venv))]
    forms = dict.fromkeys([*commands, *(filled(command) for command in commands)])
    serving = {f: w for f in forms if (w := _words(f)) and (starts_servers(w) or composes_configs(w))}
    found = dict(zip(serving, configs_set(nemo_gym_venv, list(serving.values())), strict=True))
    out = []
    for command in commands:
        form, verdict_of = command, verdict(command, gym, found.get(command))
        if verdict_of != "accepted" and filled(command) != command:
            form = filled(command)
            verdict_of = verdict(form, gym, found.get(form))
        out.append(Judged(command, _words(form), verdict_of, form != command))
    return out


def test_nemo_gyms_documented_command_lines_are_accepted_or_refused_by_name(judged: list[Judged]) -> None:
    """Each documented line: accepted (as written, or a template once filled in), or refused naming its
    flag (or incomplete as written); the accepted share at least the floor, as written too."""
    assert len(judged) > 300, len(judged)
    verdicts = Counter(j.verdict.split(":")[0] for j in judged)
    as_written = sum(j.verdict == "accepted" and not j.filled_in for j in judged)
    refused = Counter(j.verdict for j in judged if j.verdict.startswith("refused"))
    rate = verdicts["accepted"] / len(judged)
    print(
        f"\n{verdicts['accepted']} of {len(judged)} documented lines accepted ({rate:.1%}), {as_written} as "
        f"written ({as_written / len(judged):.1%}); {dict(verdicts)}; templates filled in: "
        f"{dict(Counter(j.verdict.split(':')[0] for j in judged if j.filled_in))}"
    )
    print(f"refused by name: {dict(refused.most_common())}")
    for j in judged:
        if j.verdict != "accepted":
            print(f"  {j.verdict[:100]}{' (filled in)' if j.filled_in else ''}: {j.command[:140]}")
    assert set(verdicts) <= {"accepted", "refused", "incomplete"}
    assert rate >= FLOOR and as_written / len(judged) >= FLOOR_AS_WRITTEN, (rate, as_written, dict(refused))


# NeMo Gym's own parser, in its own interpreter: which of the `gym env start` commands it takes (an
# unknown option, or argparse's error, is a line it refuses).
PARSE = """
import json, sys
from nemo_gym.cli.main import build_parser

taken = []
for words in json.load(sys.stdin):
    try:
        _, rest = build_parser().parse_known_args(["env", "start", *words])
    except SystemExit:
        taken.append(False)
        continue
    taken.append(not [word for word in rest if word.startswith("-")])
print(json.dumps(taken))
"""


def test_every_accepted_server_starting_line_starts_a_stack_nemo_gyms_parser_takes(
    nemo_gym_venv: Path, judged: list[Judged]
) -> None:
    """Each accepted documented line that starts servers becomes a benchmark whose one server is
    `gym env start` with the line's server words (and the job's head server): NeMo Gym 0.7.0's own
    parser takes every one of those commands."""
    gym = str(nemo_gym_venv / "bin" / "gym")
    serving = [j.words for j in judged if j.verdict == "accepted" and j.words and starts_servers(j.words)]
    assert len(serving) >= SERVING_FLOOR, len(serving)
    starts = []
    for words in serving:  # what plan_serving_run validated for each: its one server's command
        (server,) = serving_benchmark(translate_serving_line(words, setting_names()), gym, "runs")["servers"]
        assert server["command"][:3] == [gym, "env", "start"]
        starts.append(server["command"][3:])
    done = subprocess.run(
        [str(nemo_gym_venv / "bin/python"), "-c", PARSE],
        input=json.dumps(starts),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    taken = json.loads(done.stdout.strip().splitlines()[-1])
    assert [start for start, ok in zip(starts, taken, strict=True) if not ok] == []


def test_a_documented_line_whose_data_is_absent_fails_at_submit_with_nemo_gyms_reason(
    nemo_gym_venv: Path, judged: list[Judged], tmp_path: Path
) -> None:
    """benchmarks/financebench/README.md's line, unchanged, counted accepted, with the policy model in
    NeMo Gym's env.yaml as its docs say: `gymslurm submit ... gym eval run LINE` runs NeMo Gym's
    preparation, which finds the benchmark's data absent (NeMo Gym prepares it with its prepare script,
    and the wheel ships none): exit 2 with NeMo Gym's own reason and what to do, nothing written."""
    root = site_packages(nemo_gym_venv)
    (command,) = [
        c for f, c in doc_lines(root) if f == "benchmarks/financebench/README.md" and "--no-serve" not in c
    ]
    assert {j.command: j.verdict for j in judged}[command] == "accepted"
    (tmp_path / "env.yaml").write_text(
        "policy_base_url: http://127.0.0.1:9/v1\npolicy_api_key: k\npolicy_model_name: m\n"
    )
    argv = [sys.executable, "-m", "gymslurm", "submit", "--backend", "local", "run_root=runs"]
    env = {**os.environ, "NEMO_GYM_VENV": str(nemo_gym_venv), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [*argv, "gym", "eval", "run", *arguments(command)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "NeMo Gym could not prepare the split" in done.stderr and "nothing was written" in done.stderr
    assert "is missing on disk. Run `gym eval prepare --config" in done.stderr  # NeMo Gym's own words
    assert [path.name for path in tmp_path.iterdir()] == ["env.yaml"]
