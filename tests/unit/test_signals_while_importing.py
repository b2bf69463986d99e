"""A signal forwarded to the chain step while it is still importing is not lost.

The batch shell starts the step with USR1, TERM and INT ignored and forwards each signal once;
one that came before the step's handlers were in place was dropped (seen in CI: a link whose
USR1 came during its imports ran on until the TERM of ``--time``).
"""

from __future__ import annotations

import signal
import subprocess
import sys


def _run_ignoring_usr1(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as the batch shell starts the step: USR1, TERM and INT ignored."""

    def ignore() -> None:
        for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)

    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=ignore,
    )


def test_a_usr1_caught_before_the_handlers_is_received_by_the_step() -> None:
    """A USR1 between the early catch and Signals.install() is in Signals.received."""
    code = (
        "import os, signal\n"
        "from gymslurm.job import early_signals\n"
        "early_signals.catch()\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "from gymslurm.job.heartbeat import Signals\n"
        "signals = Signals()\n"
        "signals.install()\n"
        "print(signals.names)\n"
    )
    done = _run_ignoring_usr1(code)
    assert done.stdout.strip() == "SIGUSR1", done.stderr


def test_python_m_gymslurm_chain_step_catches_signals_before_its_imports() -> None:
    """``python -m gymslurm chain-step`` arms the catch before it imports the CLI."""
    code = (
        "import os, runpy, signal, sys\n"
        "sys.argv = ['gymslurm', 'chain-step', '--help']\n"
        "try:\n"
        "    runpy.run_module('gymslurm', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
        "from gymslurm.job import early_signals\n"
        "print('caught', early_signals.caught())\n"
    )
    done = _run_ignoring_usr1(code)
    assert done.stdout.strip().endswith(f"caught [{int(signal.SIGUSR1)}]"), (done.stdout, done.stderr)


def test_other_commands_leave_the_signals_alone() -> None:
    """Only the chain step catches early: ``gymslurm status`` and the rest keep the defaults."""
    code = (
        "import runpy, signal, sys\n"
        "sys.argv = ['gymslurm', '--version']\n"
        "try:\n"
        "    runpy.run_module('gymslurm', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN)\n"
    )
    done = _run_ignoring_usr1(code)
    assert done.stdout.strip().endswith("True"), (done.stdout, done.stderr)
