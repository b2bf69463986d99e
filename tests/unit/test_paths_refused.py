"""Paths a run cannot use are refused clearly, before anything is written (issue 20, section 5)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gymslurm.errors import ConfigError
from gymslurm.launcher.settings import validate
from gymslurm.launcher.submit import prepare_dataset
from tests.e2e.helpers import gymslurm


def _settings(tmp_path: Path, **extra: object):  # type: ignore[no-untyped-def]
    data = {"name": "b", "dataset": str(tmp_path / "data.jsonl"), "run_root": str(tmp_path / "runs"), **extra}
    return validate(data, "test")


def test_a_dangling_link_at_the_dataset_path_is_never_written_through(tmp_path: Path) -> None:
    """``dataset_command`` is not run when the dataset path is a link to nothing; its target stays absent."""
    target = tmp_path / "elsewhere" / "planted.jsonl"
    target.parent.mkdir()
    (tmp_path / "data.jsonl").symlink_to(target)
    write = [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('{}\\n')", "{dataset}"]
    with pytest.raises(ConfigError, match=r"symbolic link.*never creates a dataset through a link"):
        prepare_dataset(_settings(tmp_path, dataset_command=write), tmp_path)
    assert not target.exists()


def test_a_run_root_too_long_for_the_filesystem_is_refused(tmp_path: Path) -> None:
    """A 100,000-character run_root is a clear refusal naming the limit, not a traceback at mkdir."""
    with pytest.raises(ConfigError, match="run_root is 100000 characters long"):
        _settings(tmp_path, run_root="/tmp/" + "d/" * 49_997 + "x")
    with pytest.raises(ConfigError, match="folder name of 300 bytes"):
        _settings(tmp_path, run_root="/tmp/" + "d" * 300)


def test_an_unusable_path_is_a_one_line_refusal_not_a_traceback(tmp_path: Path) -> None:
    """An OSError a command did not expect (here a file name over 255 bytes) ends in one clear line."""
    done = gymslurm("health", str(tmp_path / ("x" * 300 + ".jsonl")))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "gymslurm health: error: File name too long" in done.stderr
