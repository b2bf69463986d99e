"""The seams docs/architecture.md promises are kept by the code: typed and imported visibly.

(No import cycle, and no import from a higher floor: tests/unit/test_floors.py, over every import.)
"""

from __future__ import annotations

import ast
from io import StringIO
from pathlib import Path

import pytest

from gymslurm.progress import Counters, say
from gymslurm.selection import Disposition

PACKAGE = Path(__file__).resolve().parents[2] / "gymslurm"
SEAMS = ["collector/prepare.py", "collector/collect.py"]


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
    """The collector's seams import at the top of the module, never inside a function."""
    hidden = [
        inner.lineno
        for node in ast.walk(_tree(name))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
        if isinstance(inner, ast.Import | ast.ImportFrom)
    ]
    assert hidden == []


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
