"""The ``gymslurm`` command: a table of subcommands, each imported only when it runs.

``gymslurm --help`` must start in well under half a second, so this module imports nothing heavy:
every subcommand lives in its own module of ``gymslurm/commands/`` exposing ``main(argv: list[str]) -> int``
and parses its own arguments (``collect`` takes Hydra overrides such as ``+output_jsonl_fpath=...``).
User-facing errors (:class:`gymslurm.errors.GymslurmError`) print as one message, no traceback.
"""

from __future__ import annotations

import importlib
import sys
from typing import TextIO

from gymslurm.exitcodes import ExitCode

# name -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "collect": ("gymslurm.commands.collect", "collect rollouts from Environment Servers (resumable)"),
    "demo-server": ("gymslurm.demo.server", "run the built-in demo Environment Server"),
    "demo-model-server": ("gymslurm.demo.model_server", "run the demo OpenAI-compatible model server"),
    "aggregate": ("gymslurm.commands.aggregate", "merge shard outputs into one selected-result projection"),
    "health": ("gymslurm.commands.health", "failure-rate and completeness checks over a run"),
    "reverify": ("gymslurm.commands.reverify", "re-grade saved judge failures into a separate output"),
    "compare": ("gymslurm.commands.compare", "compare two runs per benchmark: delta, interval, test, flips"),
    "gate": ("gymslurm.commands.gate", "apply a policy to a comparison: exit 0 pass, 1 block, 2 warn"),
    "submit": ("gymslurm.commands.submit", "submit a benchmark as self-healing Slurm job chains"),
    "status": ("gymslurm.commands.status", "show the health of each chain of a run"),
    "logs": ("gymslurm.commands.logs", "print a link's job log and its servers' logs (--follow)"),
    "report": ("gymslurm.commands.report", "write a run's self-contained report.html"),
    "resubmit": ("gymslurm.commands.resubmit", "give retryable failures a fresh budget and restart chains"),
    "cancel": ("gymslurm.commands.cancel", "cancel every job of a run"),
    "pause": ("gymslurm.commands.pause", "give a run's allocation back now, without losing anything"),
    "resume": ("gymslurm.commands.resume", "go on with a paused run where each shard stopped"),
    "doctor": ("gymslurm.commands.doctor", "check the Slurm site settings job chains rely on"),
    "inject": ("gymslurm.commands.inject", "send a fault (timeout, preempt, crash...) to a live link"),
    "watch": ("gymslurm.commands.watch", "evaluate each new checkpoint of a folder on a suite, from a job"),
    "watch-tick": ("gymslurm.commands.watch_tick", "(internal) one tick of a watch, inside its job"),
    "chain-step": ("gymslurm.commands.chain_step", "(internal) run one link of a chain inside a job"),
}

USAGE = "usage: gymslurm [-h] [--version] COMMAND [ARGS...]"


def _help() -> str:
    width = max(len(name) for name in COMMANDS)
    rows = "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items())
    return (
        f"{USAGE}\n\ngymslurm: crash-safe LLM evaluation rollouts on Slurm.\n\ncommands:\n{rows}\n\n"
        "Run 'gymslurm COMMAND --help' for a command's options. Docs: docs/index.md"
    )


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand; return its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_help())
        return 0
    if args[0] == "--version":
        from gymslurm.version import __version__

        print(f"gymslurm {__version__}")
        return 0
    name, rest = args[0], args[1:]
    _redact_what_is_printed()
    _private_files()
    if name not in COMMANDS:
        print(f"gymslurm: unknown command {name!r}\n\n{_help()}", file=sys.stderr)
        return ExitCode.REFUSED
    module = importlib.import_module(COMMANDS[name][0])
    from gymslurm.errors import GymslurmError

    try:
        code: int = module.main(rest)
    except GymslurmError as error:
        from gymslurm.redaction import redact_text

        print(f"gymslurm {name}: error: {redact_text(str(error))}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except OSError as error:  # a file changed under us (a link swapped in a race), a path too long...
        from gymslurm.redaction import redact_text

        where = f" ({error.filename})" if error.filename else ""
        print(
            f"gymslurm {name}: error: {redact_text(error.strerror or str(error))}{where}: a file or folder "
            "gymslurm uses could not be read or written as it was a moment before. If another process (or "
            "user) replaced a file with a link, remove it; if the path is very long, shorten it; then run "
            "again",
            file=sys.stderr,
        )
        return ExitCode.REFUSED
    return code


class _RedactingStream:
    """A text stream that replaces every learned secret before writing (tracebacks and warnings too)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        from gymslurm.redaction import scrub_text

        self._stream.write(scrub_text(text))
        return len(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


UMASK_ENV = "GYMSLURM_UMASK"
PRIVATE_UMASK = 0o077


def _private_files() -> None:
    """Every file and folder gymslurm (and what it starts: jobs, servers) creates is its owner's alone,
    whatever the umask; ``GYMSLURM_UMASK=027`` opts in to group-readable files (others never read)."""
    import os

    raw = os.environ.get(UMASK_ENV, "")
    try:
        mask = int(raw, 8) if raw else PRIVATE_UMASK
    except ValueError:
        mask = PRIVATE_UMASK
    os.umask(mask | 0o007)


def _redact_what_is_printed() -> None:
    """Learn this process's secrets from its environment and scrub them from stdout and stderr."""
    import os

    from gymslurm.redaction import learn_environment

    learn_environment(os.environ)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _RedactingStream):
            setattr(sys, name, _RedactingStream(stream))
