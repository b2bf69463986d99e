"""pyproject.toml declares what gymslurm and its tests use, and nothing they do not."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
TOOLS = {"ruff", "mypy"}  # run as commands by launchers/test-all.sh, never imported
PROGRAMS = {"vllm-router", "sglang-router"}  # run by a link in front of replicas (python -m X.launch_router)
PLUGINS = {"pytest-xdist": "--dist"}  # pytest plugins, used through the option test-all.sh passes


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement (``PyYAML>=6`` → ``pyyaml``)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _imported_distributions(folder: Path) -> dict[str, str]:
    """Each third-party distribution imported under ``folder`` → one module that imports it."""
    owners = packages_distributions()
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in {"gymslurm", "tests", "bench"}:
                    continue
                for dist in owners.get(top, [top]):
                    found.setdefault(_name(dist), str(path.relative_to(ROOT)))
    return found


def test_every_distribution_the_package_imports_is_declared() -> None:
    """An import in gymslurm/ of a distribution missing from [project].dependencies is an error."""
    declared = {_name(r) for r in PROJECT["dependencies"]}
    imported = _imported_distributions(ROOT / "gymslurm")
    assert {dist: where for dist, where in imported.items() if dist not in declared} == {}


def test_every_declared_dependency_is_imported_by_the_package() -> None:
    """A runtime dependency that no module of gymslurm/ imports is not declared."""
    used = set(_imported_distributions(ROOT / "gymslurm"))
    assert sorted(_name(r) for r in PROJECT["dependencies"] if _name(r) not in used) == []


def test_the_test_extra_holds_what_the_tests_use() -> None:
    """Every test requirement is imported by tests/, is a tool or a pytest plugin that test-all.sh runs,
    or types a dependency."""
    runtime = {_name(r) for r in PROJECT["dependencies"]}
    test_all = (ROOT / "launchers" / "test-all.sh").read_text()
    plugins = {plugin for plugin, option in PLUGINS.items() if option in test_all}
    used = set(_imported_distributions(ROOT / "tests")) | TOOLS | PROGRAMS | plugins
    extra = [_name(r) for r in PROJECT["optional-dependencies"]["test"]]
    unused = [d for d in extra if d not in used and not (d.startswith("types-") and d[6:] in runtime)]
    assert unused == []
    imported = set(_imported_distributions(ROOT / "tests"))
    assert sorted(imported - runtime - set(extra)) == []
