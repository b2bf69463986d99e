"""The exit codes of gymslurm: the contract between the collector and the chain, named once.

``gymslurm collect`` ends with :class:`ExitCode` ``DONE``, ``CONTINUE``, ``RETRY`` or ``STOP``;
the chain (launcher/decide.py) reads the same names back; every other command uses the same
vocabulary for its errors (``REFUSED``) and for Ctrl-C (``INTERRUPTED``). ``gymslurm health`` has
its own three codes, :class:`HealthExit`, and ``gymslurm gate`` its four, :class:`GateExit` (whose 2
is a warning, so its errors exit 3). docs/exit-codes.md explains each one. Imports nothing.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The process exit codes of ``collect``, ``chain-step`` and every command's errors."""

    DONE = 0
    """Every expected rollout has a completed result (or partial results are accepted)."""
    RETRY = 1
    """Incomplete and no progress this time (infrastructure): retry while retries remain."""
    REFUSED = 2
    """A configuration, input or saved-history error the message explains: a retry cannot help."""
    CONTINUE = 75
    """Incomplete, progress made, work remains: run again (``EX_TEMPFAIL``)."""
    STOP = 76
    """Only terminal failures or exhausted budgets remain (or everything was omitted): stop."""
    INTERRUPTED = 130
    """Ctrl-C (SIGINT) reached the command before it ended (128 + SIGINT)."""


class HealthExit(IntEnum):
    """The exit codes of ``gymslurm health``."""

    PASS = 0
    FAIL = 1
    SKIPPED = 3


class GateExit(IntEnum):
    """The exit codes of ``gymslurm gate`` (NeMo-Evaluator's ``nel gate``: 0 pass, 1 block, 2 warn).

    2 is a warning here, not the ``REFUSED`` of every other command: so the gate's own errors (a bad
    policy, an unreadable comparison, a wrong flag) exit ``ERROR`` (3), and a script can tell a
    warning from a mistake."""

    PASS = 0
    BLOCK = 1
    WARN = 2
    ERROR = 3
