"""Slurm's signals caught from the chain step's first instant, before its imports.

The batch shell starts the chain step with USR1, TERM and INT ignored (a signal in its first
instant must not kill it) and forwards each signal once. One forwarded while the step was still
importing used to be lost: a USR1 that came then never stopped the link, whose collector ran on
until the TERM of ``--time`` (seen in CI under load, where the imports took longer than the lead).
``python -m gymslurm chain-step`` calls :func:`catch` before anything else; the step's
:class:`~gymslurm.job.heartbeat.Signals` takes what was caught as received.
Imports nothing but ``signal``, so the window left is the interpreter's own start.
"""

from __future__ import annotations

import signal
from types import FrameType

CAUGHT = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
_caught: list[int] = []


def _remember(signum: int, _frame: FrameType | None) -> None:
    _caught.append(signum)


def catch() -> None:
    """Remember USR1, TERM and INT from now on, until the step installs its own handlers."""
    for signum in CAUGHT:
        signal.signal(signum, _remember)


def caught() -> list[int]:
    """The signals caught so far, in the order they came."""
    return list(_caught)
