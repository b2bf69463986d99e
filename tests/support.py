"""What many tests share: waiting for a condition with a deadline, and a Slurm client whose commands
answer scripted output.

:func:`wait_until` is the one poll loop of the e2e and Slurm tests: it fails with what it waited
for and for how long, never hangs. :class:`ScriptedSlurm` is the real
:class:`~gymslurm.launcher.site.slurm.SlurmClient` with only its subprocess seam
(:meth:`~gymslurm.launcher.site.slurm.SlurmClient.execute`) answered from a script: counting,
``--clusters``, the check of the exit code and every parser stay the client's own.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from gymslurm.launcher.site.slurm import SlurmClient

T = TypeVar("T")


def wait_until(
    check: Callable[[], T], timeout_s: float, what: str | Callable[[], str], every_s: float = 0.5
) -> T:
    """Call ``check`` every ``every_s`` until it gives something true, and return that.

    After ``timeout_s`` without it, fail saying what was waited for (``what``, or what it returns
    when called then: the state the test saw last) and for how long.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {said}")
        time.sleep(every_s)


Reply = str | subprocess.CompletedProcess[str]


def reply(stdout: str = "", stderr: str = "", code: int = 0) -> subprocess.CompletedProcess[str]:
    """A command's scripted answer: its output and exit code."""
    return subprocess.CompletedProcess([], code, stdout, stderr)


class ScriptedSlurm(SlurmClient):
    """A Slurm client whose commands answer from a script and are recorded, as run.

    ``replies`` maps a command (``squeue``, ``sacct``, ...) to its answer: text (its stdout, exit 0),
    a :func:`reply`, or a list of those given in turn (the last one again once the others are used).
    A command the script does not name answers ``otherwise`` (text, exit 0); with ``otherwise``
    None it fails the test, naming the command.
    """

    def __init__(
        self,
        replies: Mapping[str, Reply | list[Reply]],
        *,
        otherwise: str | None = None,
        cluster: str | None = None,
    ) -> None:
        super().__init__(cluster=cluster)
        self.replies = {
            name: list(given) if isinstance(given, list) else [given] for name, given in replies.items()
        }
        self.otherwise = otherwise
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str] | None] = []

    def execute(self, argv: list[str], env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
        """The scripted answer of ``argv[0]``; the command and its environment are recorded."""
        self.calls.append(list(argv))
        self.envs.append(env)
        script = self.replies.get(argv[0])
        if script is None:
            assert self.otherwise is not None, f"unscripted Slurm command: {' '.join(argv)}"
            return subprocess.CompletedProcess(argv, 0, self.otherwise, "")
        given = script.pop(0) if len(script) > 1 else script[0]
        done = reply(given) if isinstance(given, str) else given
        return subprocess.CompletedProcess(argv, done.returncode, done.stdout, done.stderr)
