"""``import gymslurm`` offers the supported names (docs/api.md), lazily, and nothing else by accident."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import gymslurm

SUPPORTED = {
    "__version__",
    "run_outcomes",
    "OutcomeStream",
    "OutcomeFuture",
    "RowOutcome",
    "collect",
    "CollectSettings",
    "RolloutFailureRecord",
    "EpisodeFailure",
    "EpisodeId",
    "ExitCode",
    "HealthExit",
    "RunPaths",
    "GymslurmError",
    "ConfigError",
    "IdentityMismatchError",
    "StoreError",
    "ManifestError",
    "CorruptRecordError",
    "DiskFullError",
    "RunLockedError",
    "ProtocolError",
    "SlurmError",
    # the specification's recovery API (issue 21)
    "run_examples",
    "preprocess_examples",
    "check_completion",
    "RolloutStore",
    "EpisodeFailedError",
    "IncompleteRunError",
}


def test_the_supported_names_are_pinned() -> None:
    """``gymslurm.__all__`` is exactly the supported surface (a change here is an API change)."""
    assert set(gymslurm.__all__) == SUPPORTED
    assert len(gymslurm.__all__) == len(SUPPORTED)


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_each_supported_name_resolves_to_its_home(name: str) -> None:
    """Every exported name loads, and is the very object its home module defines."""
    value = getattr(gymslurm, name)
    if name not in ("__version__", "RowOutcome"):  # a string, and a type alias (a tuple type)
        assert value.__module__.startswith("gymslurm.")
        home = sys.modules[value.__module__]
        assert getattr(home, name) is value
    else:
        assert value is not None


def test_an_unknown_name_says_where_the_supported_ones_are() -> None:
    """A name outside the surface is an AttributeError that points at ``gymslurm.__all__``."""
    with pytest.raises(AttributeError, match=r"gymslurm\.__all__"):
        _ = gymslurm.collector_internals  # type: ignore[attr-defined]


def test_importing_the_package_loads_no_heavy_module() -> None:
    """``import gymslurm`` alone imports neither the collector, the store, httpx nor pydantic."""
    heavy = "('gymslurm.collector.collect', 'gymslurm.store', 'httpx', 'pydantic')"
    probe = f"import sys, gymslurm; print(sorted(m for m in {heavy} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_every_docs_page_the_package_names_exists() -> None:
    """A ``docs/NAME.md`` named in the package's source (a docstring, a comment, a message) is a page
    of docs/: no pointer to a page that does not exist."""
    package = Path(gymslurm.__file__).parent
    named = {m for p in package.rglob("*.py") for m in re.findall(r"docs/[\w.-]+\.md", p.read_text())}
    assert sorted(page for page in named if not (package.parent / page).exists()) == []
