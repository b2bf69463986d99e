"""configs/nemo_gym/start_stack.sh finds NeMo Gym's venv where a non-root user may write (issue 21).

Why: with ``NEMO_GYM_VENV`` unset the script used ``/var/cache/gymslurm-nemogym``, which only root
can create or write, so the NeMo Gym benchmark was not one command for a user on a cluster. It now
falls back to ``~/.cache/gymslurm-nemogym`` (the compat suite's own rule, ``tests/compat/nemogym.py``).

The test runs the real script as the non-root test user with a home of its own, in which the
fallback path already holds a venv whose ``gym`` records how it was called: the script must run
that one (no install, no root path), with the head server's port it was given.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.slurm.helpers import TEST_USER, ensure_test_user, make_user_dir

SCRIPT = Path(__file__).resolve().parents[2] / "configs" / "nemo_gym" / "start_stack.sh"


def test_a_non_root_user_without_nemo_gym_venv_gets_the_venv_under_its_home_cache(tmp_path: Path) -> None:
    """NEMO_GYM_VENV and GYMSLURM_NEMOGYM_CACHE unset, not root: the venv under ~/.cache is the one run."""
    ensure_test_user(TEST_USER)
    home = make_user_dir(Path("/tmp/gymslurm-start-stack"), tmp_path.name, owner=TEST_USER)
    venv = home / ".cache" / "gymslurm-nemogym" / "nemo-gym-0.7.0"
    (venv / "bin").mkdir(parents=True)
    called = home / "gym-called-with"
    gym = venv / "bin" / "gym"
    gym.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {called}\n')
    gym.chmod(0o755)
    subprocess.run(["chown", "-R", f"{TEST_USER}:", str(home)], check=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home)}
    done = subprocess.run(
        [
            "runuser",
            "-u",
            TEST_USER,
            "--",
            "env",
            "-i",
            *(f"{k}={v}" for k, v in env.items()),
            "sh",
            str(SCRIPT),
            "18999",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    args = called.read_text().splitlines()
    assert args[:2] == ["env", "start"] and "+head_server.port=18999" in args, args
    uid = subprocess.check_output(["id", "-u", TEST_USER], text=True).strip()
    links = home / f"gymslurm-nemo-gym-venvs-{uid}"
    assert (links / "resources_servers/example_single_tool_call/.venv").resolve() == venv.resolve()
