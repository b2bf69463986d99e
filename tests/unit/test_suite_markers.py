"""The suite's markers are declared in one place: pyproject.toml's [tool.pytest.ini_options]."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTEST_OWN = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
PLUGINS_OWN = {"xdist_group"}  # pytest-xdist's (tests/conftest.py adds it only when xdist is loaded)


def _used_markers() -> dict[str, str]:
    """Each ``pytest.mark.NAME`` written under tests/ → one file that writes it."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "mark"
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "pytest"
            ):
                found.setdefault(node.attr, str(path.relative_to(ROOT)))
    return found


def test_every_marker_the_tests_use_is_declared_in_pyproject() -> None:
    """A marker used by a test but declared nowhere, or only by a conftest, is missing from pyproject.toml."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = {line.split(":")[0].strip() for line in options["markers"]}
    known = declared | PYTEST_OWN | PLUGINS_OWN
    assert {name: where for name, where in _used_markers().items() if name not in known} == {}
