"""Project-wide pytest plumbing.

The markers ``slurm`` and ``e2e`` are declared in pyproject.toml (``--strict-markers``); this file
only makes the ``slurm`` marker reliable: every test under ``tests/slurm/`` gets it, so
``pytest -m "not slurm"`` deselects all tests that need the real cluster even when a test
author forgot the decorator. It also registers the hypothesis profile every property test runs
under: no per-example deadline and no "too slow" health check, because the suite shares two cores
with real servers, collectors and Slurm jobs, and wall-clock limits there only measure the load.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("gymslurm", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gymslurm")

_SLURM_DIR = Path(__file__).parent / "slurm"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test collected from tests/slurm/ with ``slurm``."""
    for item in items:
        if _SLURM_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.slurm)
