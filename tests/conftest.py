"""Project-wide pytest plumbing.

The markers ``slurm`` and ``e2e`` are declared in pyproject.toml (``--strict-markers``); this file
only makes the ``slurm``, ``e2e`` and ``vllm`` markers reliable: every test under ``tests/slurm/``
gets ``slurm``, under ``tests/e2e/`` ``e2e`` and under ``tests/vllm/`` ``vllm``, so ``pytest -m "not
e2e and not crash and not slurm and not vllm"`` (the one-minute inner loop) deselects every test that
starts processes even when a test author forgot the decorator. It also registers the hypothesis
profile every property test runs under: no per-example deadline and no "too slow" health check,
because the suite shares two cores with real servers, collectors and Slurm jobs, and wall-clock
limits there only measure the load.

Run in parallel (``pytest -n N --dist loadgroup``, as launchers/test-all.sh does with pytest-xdist),
each test goes to whichever worker is free, except those that share something with their
neighbours, which stay together on one worker, in file order (see :func:`xdist_group`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("gymslurm", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gymslurm")

_SLURM_DIR = Path(__file__).parent / "slurm"
_E2E_DIR = Path(__file__).parent / "e2e"
_VLLM_DIR = Path(__file__).parent / "vllm"


# Balanced by their wall time on the sandbox (the longest first); a module not listed joins slurm-4.
# Seconds per module in this round's CI runs (where the groups did not hold, see pyproject.toml's
# pytest pin): chains 530-660, hostile 440-770, cost 330-350, placement 220-350, real_collector
# 190-200, status_live 110-150, node_down 90-100. The two modules that take a node DOWN (node_down,
# placement) share slurm-1, one after the other; the two that preempt a ``low`` link from the
# ``high`` partition outside slurm-1 (cost, chains) share slurm-2. Summed per group in the local
# full run of 2026-12-07 (ci-run5), s: slurm-1 895, slurm-2 568 + cost 413, slurm-3 836, slurm-4
# 1254 - cost 413 (20.9 min, the longest, with cost).
SLURM_GROUPS = {
    "test_placement_slurm.py": "slurm-1",
    "test_kill_slurm.py": "slurm-1",
    "test_node_down.py": "slurm-1",
    "test_bad_node_slurm.py": "slurm-1",
    "test_submit_reverify_slurm.py": "slurm-1",
    "test_sandbox.py": "slurm-1",
    "test_smoke.py": "slurm-1",
    "test_job_python.py": "slurm-1",
    "test_job_identity.py": "slurm-1",
    "test_inject_server_slurm.py": "slurm-1",
    "test_suite_slurm.py": "slurm-1",  # issue 30's suite on Slurm, ~3 min: the group with least left
    "test_launcher_chains.py": "slurm-2",
    "test_interruptions.py": "slurm-2",
    "test_doctor.py": "slurm-2",
    "test_resubmit_shards_slurm.py": "slurm-2",
    "test_cost_slurm.py": "slurm-2",
    "test_launcher_hostile.py": "slurm-3",
    "test_status_live.py": "slurm-3",
    "test_array_scale.py": "slurm-3",
    "test_submit_killed_slurm.py": "slurm-3",
    "test_launcher_real_collector.py": "slurm-4",
    "test_multinode.py": "slurm-4",
    "test_secrets_slurm.py": "slurm-4",
    "test_pause_slurm.py": "slurm-4",
    "test_notify_slurm.py": "slurm-4",
}


# NeMo Gym modules (marker ``nemogym``) that need not run in ``machine``; one not listed is in
# ``machine``. ``nemogym``: a stack that holds nothing ``machine`` holds, side by side with it. Its
# head server and every server's port are its own (never 11000, see tests/compat/nemogym.py), its
# servers' names none of the 11000 stack's (a command that lost its head server's port and asked
# 11000 would find no server of its name: the test fails, never passes against the wrong stack),
# and its Ray cluster is its own (``ray.init()`` starts a new one; its ports are the kernel's). A
# module whose stack has the 11000 stack's server names instead proves that its collector asked its
# own head server (test_nemo_gym_serving_line.py: the run's identity holds its own stack's servers).
# None: NeMo Gym's venv only, no server, no Ray, no head server asked (its parsers, its offline
# ``gym eval compare``), so any worker. Seconds per module in CI run 4: shipped 460, doc_lines 136,
# compare 186, flags 37, Slurm benchmark 36. Alone on the machine (2026-12-07, -n 2): machine 706 s
# with nemogym (434 s) beside it, 714 s wall; the one group before, serial: 929 s.
NEMOGYM_GROUPS: dict[str, str | None] = {
    "test_nemo_gym_shipped.py": "nemogym",  # the eleven shipped configs: their own server names
    "test_nemo_gym_benchmark_slurm.py": "nemogym",  # its stack in a Slurm node's network namespace
    "test_nemo_gym_serving_line.py": "nemogym",  # ports above 11000's, its identity its own stack's
    "test_nemo_gym_doc_lines.py": None,
    "test_nemo_gym_flags.py": None,
    "test_nemo_gym_compare.py": None,
}


def xdist_group(item: pytest.Item) -> str | None:
    """The worker group a test must share when the suite runs in parallel, or None (any worker).

    - ``slurm-1`` … ``slurm-4``: the real-Slurm modules, in four groups that run side by side
      (they mostly wait on Slurm's ticks; the sandbox has four nodes), each group's modules one
      after another, a module's scenarios overlapping inside it (see :data:`SLURM_GROUPS`). The
      node-DOWN test drains its node and waits until it is alone there; the preemption test
      takes a whole node with a ``low`` link; the job Python is reinstalled only when the source
      changed, so workers never reinstall under each other's jobs.
    - ``machine``: tests that hold or read something of the whole machine, one after another: the
      compat suite (marker ``nemogym``: its stack's head server holds NeMo Gym's fixed port 11000,
      which a collector whose server gives no configuration asks, as a canary test does; the
      modules whose stacks have the 11000 stack's server names, so that a command that lost its
      head server's port cannot pass against a neighbour's stack) and the tests marked
      ``every_process`` (they sample every process's command line while they run, the secret
      canaries: a neighbour's would be judged as theirs).
    - ``nemogym``: the NeMo Gym modules whose stack holds nothing of ``machine``'s, one after
      another, beside ``machine``; a NeMo Gym module that starts no server goes anywhere (see
      :data:`NEMOGYM_GROUPS`).
    - ``vllm``: the tests against a real vLLM (``tests/vllm/``), one after another, so that one vLLM
      (about 3 GB, minutes to start) runs at a time, and a module's server is started once.
    - the test's module, when it uses a module-scoped fixture: set up once, not once per worker.
    """
    if item.get_closest_marker("vllm") is not None:
        return "vllm"
    if item.get_closest_marker("every_process") is not None:
        return "machine"
    if item.get_closest_marker("nemogym") is not None:  # before slurm: its Slurm benchmark too
        name = Path(item.path).name
        if name not in NEMOGYM_GROUPS:
            return "machine"
        if NEMOGYM_GROUPS[name] is not None:
            return NEMOGYM_GROUPS[name]
    elif item.get_closest_marker("slurm") is not None:
        return SLURM_GROUPS.get(Path(item.path).name, "slurm-4")
    fixtures = getattr(item, "_fixtureinfo", None)
    scopes = {d.scope for defs in (fixtures.name2fixturedefs.values() if fixtures else ()) for d in defs}
    return str(Path(item.path).relative_to(Path(__file__).parent)) if "module" in scopes else None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the groups off the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected from tests/slurm/ with ``slurm``, tests/e2e/ ``e2e``, tests/vllm/ ``vllm``;
    with pytest-xdist, give the tests that must share a worker their ``xdist_group``."""
    parallel = config.pluginmanager.hasplugin("xdist")
    for item in items:
        parents = Path(item.path).parents
        if _SLURM_DIR in parents:
            item.add_marker(pytest.mark.slurm)
        if _E2E_DIR in parents:
            item.add_marker(pytest.mark.e2e)
        if _VLLM_DIR in parents:
            item.add_marker(pytest.mark.vllm)
        group = xdist_group(item) if parallel else None
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


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
