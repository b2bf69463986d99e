"""The job venv is reinstalled only when the package's source changed (tests/slurm/helpers.py)."""

from __future__ import annotations

from pathlib import Path

from .helpers import package_digest


def _checkout(root: Path) -> Path:
    for folder in ("gymslurm", "configs", "sbatch_templates"):
        (root / folder).mkdir(parents=True)
        (root / folder / "a.txt").write_text(folder)
    (root / "pyproject.toml").write_text("[project]\n")
    return root


def test_the_digest_is_stable_while_nothing_changes(tmp_path: Path) -> None:
    """Two xdist workers of one session see one digest: the second never reinstalls under the first's jobs."""
    repo = _checkout(tmp_path)
    (repo / "gymslurm" / "__pycache__").mkdir()
    first = package_digest(repo)
    (repo / "gymslurm" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert package_digest(repo) == first


def test_the_digest_changes_with_any_shipped_file(tmp_path: Path) -> None:
    """An edit to the package, a config or a template means jobs would run stale code: reinstall."""
    repo = _checkout(tmp_path)
    before = package_digest(repo)
    for folder in ("gymslurm", "configs", "sbatch_templates"):
        (repo / folder / "a.txt").write_text("edited")
        after = package_digest(repo)
        assert after != before, folder
        before = after
