"""Project-wide pytest plumbing.

The markers ``slurm`` and ``e2e`` are declared in pyproject.toml (``--strict-markers``); this file
only makes the ``slurm`` marker reliable: every test under ``tests/slurm/`` gets it, so
``pytest -m "not slurm"`` deselects all tests that need the real cluster even when a test
author forgot the decorator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_SLURM_DIR = Path(__file__).parent / "slurm"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test collected from tests/slurm/ with ``slurm``."""
    for item in items:
        if _SLURM_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.slurm)
