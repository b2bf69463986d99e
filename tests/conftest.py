"""Project-wide pytest plumbing.

The markers ``slurm`` and ``e2e`` are declared in pyproject.toml (``--strict-markers``); this file
only makes the ``slurm`` and ``e2e`` markers reliable: every test under ``tests/slurm/`` gets
``slurm`` and every test under ``tests/e2e/`` gets ``e2e``, so ``pytest -m "not e2e and not crash
and not slurm"`` (the one-minute inner loop) deselects every test that starts processes even when a
test author forgot the decorator. It also registers the hypothesis profile every property test runs
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
_E2E_DIR = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test collected from tests/slurm/ with ``slurm`` and from tests/e2e/ with ``e2e``."""
    for item in items:
        parents = Path(item.path).parents
        if _SLURM_DIR in parents:
            item.add_marker(pytest.mark.slurm)
        if _E2E_DIR in parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def _forget_learned_secrets() -> object:
    """Each test starts with no learned secret (gymslurm.redaction keeps them per process) and ends
    with the umask it started with (``gymslurm.cli.main`` makes it private)."""
    import os

    from gymslurm.redaction import forget_all

    forget_all()
    umask = os.umask(0o022)
    os.umask(umask)
    yield
    forget_all()
    os.umask(umask)
