"""``gymslurm gate --policy P RUN_A RUN_B`` (or ``P COMPARISON.json``): pass, block or warn.

The comparison is made as ``gymslurm compare`` makes it (same options), or read from a document
``gymslurm compare --json`` saved. The decision is ``gymslurm/gate.py``'s rule table. Exit codes
(:class:`gymslurm.exitcodes.GateExit`): 0 pass, 1 block, 2 warn, 3 an error (never 2: that is a
warning here). Docs: docs/compare.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from gymslurm.errors import ConfigError, GymslurmError
from gymslurm.exitcodes import GateExit

if TYPE_CHECKING:
    from gymslurm.comparison import ComparisonDocument


class _Parser(argparse.ArgumentParser):
    """argparse, but a wrong flag is a ConfigError (exit 3), not argparse's exit 2 (a warning here)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (gymslurm gate --help)")


def main(argv: list[str]) -> int:
    """Run ``gymslurm gate``; every error of its own exits 3 (``GateExit.ERROR``)."""
    try:
        return _gate(argv)
    except GymslurmError as error:
        from gymslurm.redaction import redact_text

        print(f"gymslurm gate: error: {redact_text(str(error))}", file=sys.stderr)
        return GateExit.ERROR
    except OSError as error:
        print(f"gymslurm gate: error: {error.strerror or error} ({error.filename})", file=sys.stderr)
        return GateExit.ERROR


def _gate(argv: list[str]) -> int:
    from gymslurm.commands.compare import add_comparison_arguments

    parser = _Parser(
        prog="gymslurm gate",
        description="Apply a policy to a comparison: exit 0 pass, 1 block, 2 warn (3: an error). "
        "Give two runs (compared as `gymslurm compare` does) or one saved `gymslurm compare --json` "
        "document. Docs: docs/compare.md",
    )
    parser.add_argument("--policy", type=Path, required=True, help="the policy file (YAML)")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="RUN_A RUN_B, or one COMPARISON.json")
    parser.add_argument("--json", action="store_true", help="print the decision document (versioned)")
    add_comparison_arguments(parser)
    args = parser.parse_args(argv)
    from gymslurm.gate import apply_policy, parse_policy

    policy = parse_policy(_read_text(args.policy, "policy"), str(args.policy))
    comparison = _comparison(args, parser)
    decision = apply_policy(comparison, policy)
    if args.json:
        sys.stdout.write(decision.model_dump_json(indent=2) + "\n")
    else:
        for entry in decision.benchmarks:
            print(f"{entry.decision.upper():5} {entry.benchmark}: {entry.reason}")
        print(
            f"gate: {decision.decision} (exit {decision.exit_code}) for {decision.candidate} "
            f"against {decision.baseline}, policy {args.policy}"
        )
    return decision.exit_code


def _comparison(args: argparse.Namespace, parser: _Parser) -> ComparisonDocument:
    from gymslurm.commands.compare import comparison_from_args
    from gymslurm.gate import parse_comparison

    if len(args.runs) == 1:
        saved = Path(args.runs[0])
        if saved.suffix != ".json":
            parser.error(f"one argument must be a saved comparison (.json), not {saved}; or give RUN_A RUN_B")
        return parse_comparison(_read_text(saved, "comparison").encode(), str(saved))
    if len(args.runs) != 2:
        parser.error(f"give RUN_A RUN_B (or one COMPARISON.json), not {len(args.runs)} arguments")
    args.baseline, args.candidate = args.runs
    return comparison_from_args(args)


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"the {what} file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read the {what} file {path}: {error}") from None
