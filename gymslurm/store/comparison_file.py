"""A run's comparison with a baseline: ``<run>/comparison.json`` (``gymslurm report RUN --baseline B``).

The document is ``gymslurm compare --json``'s, unchanged (gymslurm/comparison.py, format
``comparison``), the run as its candidate. ``report --baseline`` is its one writer (replaced whole,
atomically); the report reads it back each time it is rendered, so a report rewritten later by
``status`` still shows the comparison without computing it again (docs/compare.md).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from gymslurm.comparison import ComparisonDocument
from gymslurm.errors import ManifestError
from gymslurm.store.atomic import publish_json
from gymslurm.store.files import read_json_object, validation_problems

_REMEDY = "write it again with `gymslurm report RUN --baseline OTHER`, or delete it"


def comparison_path(run_root: Path) -> Path:
    """``comparison.json`` of a run."""
    return run_root / "comparison.json"


def write_comparison(run_root: Path, document: ComparisonDocument) -> Path:
    """Publish the run's comparison (replaced whole, atomically)."""
    path = comparison_path(run_root)
    publish_json(path, document.model_dump(mode="json"))
    return path


def read_comparison(run_root: Path) -> ComparisonDocument | None:
    """The run's comparison, version-checked first; None when it has none."""
    path = comparison_path(run_root)
    data = read_json_object(path, "the comparison", _REMEDY, "comparison")
    if data is None:
        return None
    try:
        return ComparisonDocument.model_validate(data)
    except ValidationError as error:
        raise ManifestError(
            f"the comparison {path} is malformed ({validation_problems(error)}); {_REMEDY}"
        ) from None
