"""An installed wheel, used outside the source tree, carries the configs and templates it needs."""

from __future__ import annotations

import site
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
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python] if _pip_has_python_flag() else None
    if pip is None:
        pytest.fail("pip is too old for --python; upgrade pip (python3 -m pip install -U pip)")
    run([*pip, "install", "--no-deps", "--force-reinstall", "-q", str(wheel)], cwd=tmp_path)
    see_test_dependencies(python)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = "import gymslurm.resources as r; print(r.configs_dir()); print(r.templates_dir())"
    where = run([python, "-c", probe], cwd=elsewhere).split()
    assert all("site-packages" in path and "_data" in path for path in where), where
    script = run(
        [python, "-m", "gymslurm", "submit", "demo", "--dry-run", "--backend", "slurm"], cwd=elsewhere
    )
    assert "#SBATCH --open-mode=append" in script


def see_test_dependencies(python: str) -> None:
    """Let the fresh venv of ``python`` import the dependencies of the interpreter running the tests.

    Why: the wheel is installed with ``--no-deps`` (no package index needed), so its dependencies
    must come from somewhere. ``system_site_packages`` would give the *base* interpreter's
    packages, which lack them when the tests run from a venv; a ``.pth`` naming the running
    interpreter's own site directories gives exactly what the tests import. Plain path lines in a
    ``.pth`` do not process the ``.pth`` files found there, so an editable install of this checkout
    stays invisible and the probe sees only the wheel. Written after the wheel is installed, so pip
    never sees this checkout's installed copy.
    """
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [*site.getsitepackages(), site.getusersitepackages()]
    seen = "".join(f"{path}\n" for path in ours if Path(path).is_dir())
    (Path(purelib) / "gymslurm_test_dependencies.pth").write_text(seen)


def _pip_has_python_flag() -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=False
    )
    major, minor = (int(part) for part in done.stdout.split()[1].split(".")[:2])
    return (major, minor) >= (22, 3)
