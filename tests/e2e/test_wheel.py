"""An installed wheel, used outside the source tree, carries the configs and templates it needs."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.e2e.helpers import REPO_ROOT

pytestmark = pytest.mark.e2e


def run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_wheel_ships_configs_and_templates(tmp_path: Path) -> None:
    """A wheel installed in a fresh environment renders the demo benchmark from its own data files."""
    dist = tmp_path / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO_ROOT)],
        cwd=tmp_path,
    )
    wheel = next(dist.glob("gymslurm-*.whl"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python] if _pip_has_python_flag() else None
    if pip is None:
        pytest.fail("pip is too old for --python; upgrade pip (python3 -m pip install -U pip)")
    run([*pip, "install", "--no-deps", "--force-reinstall", "-q", str(wheel)], cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = "import gymslurm.resources as r; print(r.configs_dir()); print(r.templates_dir())"
    where = run([python, "-c", probe], cwd=elsewhere).split()
    assert all("site-packages" in path and "_data" in path for path in where), where
    script = run(
        [python, "-m", "gymslurm", "submit", "demo", "--dry-run", "--backend", "slurm"], cwd=elsewhere
    )
    assert "#SBATCH --kill-on-invalid-dep=yes" in script


def _pip_has_python_flag() -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=False
    )
    major, minor = (int(part) for part in done.stdout.split()[1].split(".")[:2])
    return (major, minor) >= (22, 3)
