"""Fixtures of the NeMo Gym compatibility suite: NeMo Gym 0.7.0's own servers, started once per module.

``nemo_gym_stack`` (module scope, so the head server leaves NeMo Gym's default port when the module
ends) installs NeMo Gym into its cached venv if needed and starts the stack with ``gym env start``
(tests/compat/nemogym.py). Setup problems **fail** the tests that use it, never skip them. At
teardown every process of the stack's sessions is stopped by pid, and a process still alive
afterwards is an error of the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.nemogym import NemoGymSetupError, Stack, ensure_nemo_gym, start_stack


@pytest.fixture(scope="module")
def nemo_gym_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir: Path = tmp_path_factory.mktemp("nemo-gym-stack")
    try:
        stack = start_stack(ensure_nemo_gym(), workdir)
    except NemoGymSetupError as error:
        pytest.fail(f"the NeMo Gym compat stack could not be set up: {error}", pytrace=False)
    yield stack
    stack.stop()
    left = stack.leftovers()
    assert not left, f"processes of the NeMo Gym stack outlived its stop: {[p.pid for p in left]}"
