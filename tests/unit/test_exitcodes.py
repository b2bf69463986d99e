"""One exit-code vocabulary (gymslurm/exitcodes.py), shared by the collector, the chain and the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gymslurm.cli import main
from gymslurm.errors import ConfigError, GymslurmError, RunLockedError
from gymslurm.exitcodes import ExitCode, HealthExit
from gymslurm.launcher.decide import Decision, job_exit_code

ROOT = Path(__file__).resolve().parents[2]


def test_codes_are_the_contract_between_collector_and_chain() -> None:
    """0 done, 1 retry, 2 refused, 75 continue, 76 stop, 130 interrupted; health 0/1/3."""
    assert {code.name: int(code) for code in ExitCode} == {
        "DONE": 0,
        "RETRY": 1,
        "REFUSED": 2,
        "CONTINUE": 75,
        "STOP": 76,
        "INTERRUPTED": 130,
    }
    assert {code.name: int(code) for code in HealthExit} == {"PASS": 0, "FAIL": 1, "SKIPPED": 3}


def test_docs_name_every_code() -> None:
    """docs/exit-codes.md has a table row ``| N | `NAME` |`` for every ExitCode."""
    text = (ROOT / "docs" / "exit-codes.md").read_text()
    rows = {(int(n), name) for n, name in re.findall(r"^\| (\d+) \| `([A-Z_]+)` \|", text, re.M)}
    assert rows == {(int(code), code.name) for code in ExitCode}


def test_no_module_spells_its_own_exit_constants() -> None:
    """No module of the package defines ``EXIT_... = <number>``: the names live in exitcodes.py only."""
    pattern = re.compile(r"^\s*EXIT_\w+(\s*,\s*EXIT_\w+)*\s*=\s*\d", re.M)
    modules = (ROOT / "gymslurm").rglob("*.py")
    copies = [str(path.relative_to(ROOT)) for path in modules if pattern.search(path.read_text())]
    assert copies == []


def test_errors_exit_with_the_shared_names() -> None:
    """A user error exits REFUSED, a locked run RETRY (a later job may get the lock)."""
    assert (GymslurmError.exit_code, ConfigError.exit_code) == (ExitCode.REFUSED, ExitCode.REFUSED)
    assert RunLockedError.exit_code == ExitCode.RETRY


@pytest.mark.parametrize(
    ("decision", "code"),
    [
        (Decision.DONE, ExitCode.DONE),
        (Decision.CONTINUE, ExitCode.DONE),
        (Decision.RETRY, ExitCode.DONE),
        (Decision.STOP_FAILED, ExitCode.STOP),
        (Decision.STOP_EXHAUSTED, ExitCode.RETRY),
        (Decision.STOP_WALLTIME, ExitCode.CONTINUE),
    ],
)
def test_chain_step_exits_with_the_shared_names(decision: Decision, code: ExitCode) -> None:
    """The chain step's own exit code is an ExitCode, so sacct and the ledger agree."""
    assert job_exit_code(decision) is code


def test_unknown_command_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """``gymslurm no-such-command`` exits REFUSED (2) and lists the commands."""
    assert main(["no-such-command"]) == ExitCode.REFUSED
    assert "unknown command" in capsys.readouterr().err
