"""One exception tree: every public error class lives in gymslurm/errors.py, under GymslurmError."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from gymslurm import errors
from gymslurm.exitcodes import ExitCode

PACKAGE = Path(errors.__file__).parent


def _error_classes_outside_errors_py() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = [ast.unparse(base) for base in node.bases]
                if any(base.endswith(("Error", "Exception")) for base in bases):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.name}")
    return found


def test_no_public_error_class_outside_errors_py() -> None:
    """health.StaleFileError, servers.ServerStartError and the like are defined in errors.py only."""
    assert _error_classes_outside_errors_py() == []


def test_every_error_is_in_the_tree_and_drawn() -> None:
    """Each class of errors.py derives from GymslurmError, is named in the drawn tree, exits an ExitCode."""
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    doc = errors.__doc__ or ""
    assert all(issubclass(c, errors.GymslurmError) for c in classes)
    assert [c.__name__ for c in classes if c.__name__ not in doc] == []
    assert all(c.exit_code in set(ExitCode) for c in classes)


def test_moved_errors_keep_their_meaning() -> None:
    """A stale file is a store error; a server that never became healthy is retryable (exit 1)."""
    assert issubclass(errors.StaleFileError, errors.StoreError)
    assert errors.ServerStartError.exit_code == ExitCode.RETRY
