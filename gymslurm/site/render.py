"""Render sbatch scripts from the readable templates in ``sbatch_templates/``.

Rendering is a pure function of a :class:`ScriptValues` and the template text, so a recorded
script in the tests pins it and ``submit --dry-run`` prints exactly what would be submitted.
``string.Template`` (not Jinja) keeps the templates plain bash a reader can follow: the only
syntax is ``$name`` and ``$$``; optional directives are assembled here, not in template logic.

Values reach a script only after the settings boundary checked them (``scriptsafe.py``: one line,
slugs for names, what sbatch takes in ``#SBATCH`` lines); :func:`render` checks every single-line
slot again, so a value with a newline can never end a line of the script. Commands are
shell-quoted (:func:`command_line`, the work directory); ``env_setup`` lines run as written.

Secrets never reach a script: nothing here reads the environment, and :class:`ScriptValues`
carries no configuration values other than the Slurm section's own.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Template

from gymslurm.errors import ConfigError
from gymslurm.resources import templates_dir
from gymslurm.site.scriptsafe import control_problem

LINK_TEMPLATE = "link.sbatch"
AGGREGATE_TEMPLATE = "aggregate.sbatch"


@dataclass(frozen=True)
class ScriptValues:
    """Every variable a template may use (listed in sbatch_templates/README.md)."""

    run_name: str
    shard: str
    job_name: str
    script_path: str
    log_path: str
    ledger_path: str
    signal_lead: int
    time_limit: str
    directives: str
    env_setup: str
    workdir: str
    command: str
    servers: str = "#   (none)"


def directives_block(partition: str | None, account: str | None, qos: str | None, extra: list[str]) -> str:
    """The optional ``#SBATCH`` lines: partition, account and qos when set, then the extra ones."""
    lines = [
        f"#SBATCH --{flag}={value}"
        for flag, value in (("partition", partition), ("account", account), ("qos", qos))
        if value
    ]
    for raw in extra:
        line = raw.strip()
        lines.append(line if line.startswith("#SBATCH") else f"#SBATCH {line}")
    return "\n".join(lines) if lines else "# (no extra #SBATCH directives)"


def servers_block(commands: list[tuple[str, list[str] | None, str | None]]) -> str:
    """Comment lines naming each server a link starts, in order: ``(name, argv, url)``; argv None: a
    running server at ``url``. ``{port}`` is left as written: each job picks its own. Credential
    shapes (``--api-key VALUE``, ``TOKEN=...``, URL passwords) are redacted: a script holds no secret."""
    from gymslurm.identity import redact_credentials

    if not commands:
        return "#   (none)"
    lines = [
        f"{name}: {command_line(argv)}" if argv is not None else f"{name}: already running at {url}"
        for name, argv, url in commands
    ]
    clean = redact_credentials({"lines": lines})["lines"]
    for (name, _, _), line in zip(commands, clean, strict=True):
        if problem := control_problem(f"servers.{name}", line):  # a newline would end the comment
            raise ConfigError(f"cannot render a job script: {problem}")
    return "\n".join(f"#   {line}" for line in clean)


def env_setup_block(lines: list[str]) -> str:
    """The environment setup lines, one per line, or a comment saying there are none."""
    return "\n".join(lines) if lines else "# (no environment setup lines)"


def command_line(argv: list[str]) -> str:
    """A shell-quoted command line."""
    return " ".join(shlex.quote(part) for part in argv)


# Multi-line blocks assembled (and checked line by line) here, or values shell-quoted where they land.
_MULTI_LINE_OR_QUOTED = frozenset({"directives", "env_setup", "workdir", "command", "servers"})


def render(template: str, values: ScriptValues) -> str:
    """Fill ``template`` with ``values`` (``workdir`` shell-quoted); an unknown variable is an error.

    Every slot but the assembled blocks (``directives``, ``env_setup``) and the shell-quoted ones must
    be one line: a value that got past the settings boundary with a newline is refused here too.
    """
    for name, value in asdict(values).items():
        if name not in _MULTI_LINE_OR_QUOTED and (problem := control_problem(name, str(value))):
            raise ConfigError(f"cannot render a job script: {problem}")
    try:
        text = Template(template).substitute({**asdict(values), "workdir": shlex.quote(values.workdir)})
    except (KeyError, ValueError) as error:
        raise ConfigError(
            f"sbatch template uses an unknown or malformed variable ({error}); the variables are listed "
            "in sbatch_templates/README.md"
        ) from error
    return text if text.endswith("\n") else text + "\n"


def load_template(name: str, folder: Path | None = None) -> str:
    """Read a template from ``sbatch_templates/`` (or ``folder``)."""
    path = (folder or templates_dir()) / name
    try:
        return path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read sbatch template {path}: {error}; reinstall gymslurm") from error
