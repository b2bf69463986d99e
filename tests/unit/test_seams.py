"""The seams docs/architecture.md promises are kept by the code: typed and imported visibly.

(No import cycle, and no import from a higher floor: tests/unit/test_floors.py, over every import.)
"""

from __future__ import annotations

import ast
import tomllib
from fnmatch import fnmatchcase
from io import StringIO
from pathlib import Path

import pytest

from gymslurm.progress import Counters, say
from gymslurm.selection import Disposition

PACKAGE = Path(__file__).resolve().parents[2] / "gymslurm"
# The collector's modules, and the readers of a run they hand it to (pyproject.toml checks the same
# modules with mypy's strict flags).
SEAMS = [
    *sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "collector").glob("*.py")),
    "health.py",
    "reverify.py",
    "aggregate.py",
]
# An import left inside a function for a reason the module gives there: the HTTP client only for a
# merge a server is named for, or for the servers a seal asks again; progress only for a replay that
# warns (a finished run's resume stays light).
DEFERRED = {
    "aggregate.py": {"gymslurm.dispatch", "gymslurm.dispatch.calls"},
    "collector/seal.py": {"gymslurm.progress", "gymslurm.dispatch.calls"},
}


def _tree(name: str) -> ast.Module:
    return ast.parse((PACKAGE / name).read_text())


@pytest.mark.parametrize("name", SEAMS)
def test_no_seam_is_typed_any(name: str) -> None:
    """No parameter, return or attribute of the collector's seams is annotated bare ``Any``."""
    bare = []
    for node in ast.walk(_tree(name)):
        annotations: list[ast.expr | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            every = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            annotations = [a.annotation for a in every] + [node.returns]
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        bare += [node.lineno for a in annotations if isinstance(a, ast.Name) and a.id == "Any"]
    assert bare == []


@pytest.mark.parametrize("name", SEAMS)
def test_imports_are_visible(name: str) -> None:
    """The collector's seams import at the top of the module, never inside a function (but the few
    deferred on purpose)."""
    hidden = {
        alias.name if isinstance(inner, ast.Import) else str(inner.module)
        for node in ast.walk(_tree(name))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
        if isinstance(inner, ast.Import | ast.ImportFrom)
        for alias in inner.names
    }
    assert hidden == DEFERRED.get(name, set())


def test_the_strict_type_check_covers_every_seam() -> None:
    """pyproject.toml's strict mypy overrides name every seam module (a pattern may name several)."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    strict = [o for o in config["tool"]["mypy"]["overrides"] if o.get("disallow_any_generics")]
    patterns = [pattern for override in strict for pattern in override["module"]]
    modules = [
        "gymslurm." + name.removesuffix(".py").replace("/", ".").removesuffix(".__init__") for name in SEAMS
    ]
    # mypy's ``a.b.*`` names the package ``a.b`` and every module under it
    assert [m for m in modules if not any(fnmatchcase(m, p) or m + ".*" == p for p in patterns)] == []


def test_say_lives_with_the_other_output_for_people() -> None:
    """progress.say prints one ``gymslurm collect:`` line."""
    stream = StringIO()
    say(stream, "hello")
    assert stream.getvalue() == "gymslurm collect: hello\n"


@pytest.mark.parametrize(
    ("disposition", "shown"),
    [
        (Disposition.MEASURED, "done"),
        (Disposition.MASKED, "done"),
        (Disposition.UNSCORED, "done"),
        (Disposition.FAILED, "failed"),
        (Disposition.OMITTED, "omitted"),
        (Disposition.MISSING, None),
        (Disposition.NOT_STARTED, None),
    ],
)
def test_progress_counts_by_disposition(disposition: Disposition, shown: str | None) -> None:
    """Each selected state is counted as done, failed, omitted or not at all; -1 takes it back."""
    counters = Counters(total=1)
    counters.tally(disposition, 1)
    counts = {"done": counters.done, "failed": counters.failed, "omitted": counters.omitted}
    assert counts == {key: int(key == shown) for key in counts}
    counters.tally(disposition, -1)
    assert (counters.done, counters.failed, counters.omitted) == (0, 0, 0)
