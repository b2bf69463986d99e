"""Fixtures for tests against the real one-node Slurm sandbox (launchers/slurm-up.sh).

Why: Slurm behaviour (exit codes, requeue, dependencies) is what gymslurm's launcher relies on,
so these tests use the real cluster. When it is not up they start it (as root) or **fail** with
the reason — never skip: in CI a skipped Slurm test would hide a broken launcher.

Fixtures (helpers and their docs are in ``helpers.py``; see also docs/slurm-sandbox.md):

- ``slurm_cluster`` (session): a ``SlurmCluster(node, partitions)`` once ``sinfo`` shows the node up.
- ``slurm_user`` (function): a ``SlurmUser`` — the non-root ``slurmtest`` when run as root — with
  a fresh scratch directory it owns, ``run(argv)``, ``write(name, text)`` and
  ``sbatch(script, *opts) -> job_id``; jobs it submitted and left unfinished are cancelled after
  the test.
- ``slurm_python`` (session): a Python interpreter the job user can run, with this checkout's
  gymslurm installed (a venv built from /usr/bin/python3 when root; ~20 s the first time).
- ``wait_for_job(job_id, timeout=...)`` (import from ``.helpers``): poll until a final state.
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import (
    SCRATCH_ROOT,
    SLURM_UP,
    TEST_USER,
    SlurmCluster,
    SlurmTestError,
    SlurmUser,
    cluster_problem,
    describe_cluster,
    ensure_test_user,
    job_python_for,
    make_user_dir,
    prune_old_sessions,
    start_cluster,
)


def _is_root() -> bool:
    return os.geteuid() == 0


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """The running sandbox cluster; started via slurm-up.sh when root, else the test fails."""
    problem = cluster_problem()
    if problem is not None and _is_root():
        try:
            start_cluster()
        except SlurmTestError as exc:
            pytest.fail(f"the Slurm sandbox is not up ({problem}) and {SLURM_UP} could not start it:\n{exc}")
        problem = cluster_problem()
    if problem is not None:
        how = "it still is not up" if _is_root() else f"start it as root: sudo bash {SLURM_UP}"
        pytest.fail(f"the Slurm sandbox is needed but {problem}; {how}")
    return describe_cluster()


@pytest.fixture(scope="session")
def slurm_session_dir() -> Path:
    """A per-session directory under /tmp/gymslurm-slurmtests (world-traversable, not writable)."""
    prune_old_sessions(SCRATCH_ROOT)
    return make_user_dir(SCRATCH_ROOT, f"session-{time.strftime('%Y%m%dT%H%M%S')}", owner=None)


@pytest.fixture
def slurm_user(
    slurm_cluster: SlurmCluster, slurm_session_dir: Path, request: pytest.FixtureRequest
) -> Iterator[SlurmUser]:
    """A user to submit jobs as, with a fresh scratch directory that user owns."""
    if _is_root():
        ensure_test_user(TEST_USER)
        name, owner = TEST_USER, TEST_USER
    else:
        name, owner = getpass.getuser(), None
    workdir = make_user_dir(slurm_session_dir, request.node.name, owner=owner)
    user = SlurmUser(name=name, workdir=workdir, as_root=_is_root())
    yield user
    user.cancel_leftovers()


@pytest.fixture(scope="session")
def slurm_python(slurm_cluster: SlurmCluster) -> Path:
    """A Python the job user can execute, with this checkout's gymslurm and its dependencies."""
    name = TEST_USER if _is_root() else getpass.getuser()
    if _is_root():
        ensure_test_user(name)
    try:
        return job_python_for(name, as_root=_is_root())
    except SlurmTestError as exc:
        pytest.fail(f"could not prepare a Python for Slurm jobs run as {name}:\n{exc}")
