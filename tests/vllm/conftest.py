"""Fixtures of the vLLM suite: the cached vLLM install, and one vLLM per module that wants one.

Every test here gets the ``vllm`` marker and the ``vllm`` xdist group (tests/conftest.py): the
modules run one after another on one worker, so one vLLM (about 3 GB) runs at a time. Setup
problems **fail** the tests, never skip them. The Slurm sandbox's fixtures (tests/slurm/conftest.py)
are shared here: the replica module's suite runs on the sandbox's nodes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gymslurm.job.servers import RunningServer
from tests.slurm.conftest import slurm_cluster, slurm_python, slurm_session_dir  # noqa: F401 (the replica module's)
from tests.vllm.harness import Vllm, VllmSetupError, ensure_vllm, start_vllm, stop_vllm


@pytest.fixture(scope="session")
def vllm_install() -> Vllm:
    """The vLLM venv and the tiny model (``launchers/vllm-up.sh``; minutes the first time)."""
    try:
        return ensure_vllm()
    except VllmSetupError as error:
        pytest.fail(f"vLLM could not be set up: {error}", pytrace=False)


@pytest.fixture(scope="module")
def vllm_server(vllm_install: Vllm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real vLLM for the module, started and probed by gymslurm's own server code, stopped with
    its whole process group at the end of the module."""
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    try:
        server = start_vllm(vllm_install, log, name="policy")
    except VllmSetupError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    stop_vllm(server)
