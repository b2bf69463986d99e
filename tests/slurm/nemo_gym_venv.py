"""NeMo Gym's venv, runnable by the Slurm test user (the sandbox's jobs run as ``slurmtest``).

Why: the compat suite's NeMo Gym venv (tests/compat/nemogym.py, built as root) is world-readable,
but its ``bin/python`` is a link to pyenv's Python 3.13 under ``/root`` (mode 0700 here), which the
job user cannot execute; that Python also finds its ``libpython`` through an absolute RUNPATH
under ``/root``. What a job of ``slurmtest`` needs is what a user on a real cluster has anyway: a
NeMo Gym venv they can run. :func:`job_nemo_gym_venv` makes one next to the cached install without
installing anything again:

- a copy of the Python 3.13 the venv was built from, at a short path readable by everyone, with
  the RUNPATH string in its executable rewritten in place to the copy's ``lib`` (same bytes,
  NUL-padded: the new path is shorter), so no tool (patchelf) is needed;
- a small venv whose ``bin/python`` is that copy, whose ``site-packages`` is a link to the cached
  venv's (1.4 GB, never copied), and whose scripts (``gym``, ..., ``activate``) are the cached venv's
  with their ``#!`` line (or paths) pointing at the new venv.

The small venv and the directory holding it belong to the job user, as a user's own venv does:
NeMo Gym's ``gym env start`` resolves each server's ``.venv`` link and writes beside and inside the
venv it finds (``<venv>.setup.lock``, ``<venv>/.nemo-gym-setup-complete``). Done once under a lock
(a marker names the source); the result is checked by running ``gym --help`` as the job user. Root
only (the copy is taken from under ``/root``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from .helpers import SlurmTestError, run

JOB_ROOT = Path("/tmp/gs-ngjob")  # short: the RUNPATH rewritten into the Python copy must fit
MARKER = ".gymslurm-job-venv"


def _base_python(venv: Path) -> Path:
    """The Python installation (prefix) the venv was made from, by its ``pyvenv.cfg`` ``home``."""
    config = dict(
        line.split(" = ", 1) for line in (venv / "pyvenv.cfg").read_text().splitlines() if " = " in line
    )
    return Path(config["home"]).parent


def _rewrite_runpath(binary: Path, old_prefix: Path, new_prefix: Path) -> None:
    old, new = f"{old_prefix}/lib".encode(), f"{new_prefix}/lib".encode()
    if len(new) > len(old):
        raise SlurmTestError(f"cannot rewrite RUNPATH {old!r} to the longer {new!r} in {binary}")
    data = binary.read_bytes()
    if old + b"\0" in data:
        binary.write_bytes(data.replace(old + b"\0", new + b"\0" * (len(old) - len(new) + 1)))


def _copy_python(prefix: Path, target: Path) -> Path:
    shutil.copytree(prefix, target, symlinks=True)
    for binary in (target / "bin").glob("python3*"):
        if binary.is_file() and not binary.is_symlink():
            _rewrite_runpath(binary, prefix, target)
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    (python,) = [p for p in (target / "bin").glob("python3.*") if p.name[len("python3.") :].isdigit()]
    return python


def _small_venv(source: Path, python: Path, venv: Path) -> None:
    (venv / "bin").mkdir(parents=True)
    (site,) = source.glob("lib/python3.*/site-packages")
    (venv / site.parent.relative_to(source)).mkdir(parents=True)
    (venv / site.relative_to(source)).symlink_to(site)
    (venv / "lib64").symlink_to("lib")
    (venv / "pyvenv.cfg").write_text(
        f"home = {python.parent}\ninclude-system-site-packages = false\nversion = "
        f"{(source / 'pyvenv.cfg').read_text().split('version = ')[1].split()[0]}\n"
    )
    for name in ("python", "python3", python.name):
        (venv / "bin" / name).symlink_to(python)
    old = f"#!{source}/bin/python".encode()
    for script in (source / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        first, _, rest = data.partition(b"\n")
        target = venv / "bin" / script.name
        if first.startswith(old):  # a console script: the same, run by the new bin/python
            target.write_bytes(f"#!{venv}/bin/python\n".encode() + rest)
            target.chmod(0o755)
        elif script.name.startswith("activate"):  # NeMo Gym's skip_venv_if_present wants bin/activate
            target.write_bytes(data.replace(str(source).encode(), str(venv).encode()))
    for path in [venv, *venv.rglob("*")]:
        if not path.is_symlink() and path.is_dir():
            path.chmod(0o755)


def _ids(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def job_nemo_gym_venv(source: Path, user: str) -> Path:
    """A NeMo Gym venv ``user`` can run, made from the cached ``source`` venv (see the module docstring)."""
    JOB_ROOT.mkdir(mode=0o755, exist_ok=True)
    JOB_ROOT.chmod(0o755)
    venv = JOB_ROOT / "venv"
    with (JOB_ROOT / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = venv / MARKER
        if not (marker.exists() and marker.read_text() == str(source)):
            for stale in (venv, JOB_ROOT / "py"):
                shutil.rmtree(stale, ignore_errors=True)
            python = _copy_python(_base_python(source), JOB_ROOT / "py")
            _small_venv(source, python, venv)
            marker.write_text(str(source))
            for path in [JOB_ROOT, venv, *venv.rglob("*")]:
                os.chown(path, *_ids(user), follow_symlinks=False)
    try:
        run(["runuser", "-u", user, "--", str(venv / "bin/gym"), "--help"], cwd=Path("/"), timeout=300)
    except (SlurmTestError, subprocess.SubprocessError) as error:
        raise SlurmTestError(f"the job user {user} cannot run NeMo Gym from {venv}: {error}") from error
    return venv
