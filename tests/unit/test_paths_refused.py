"""Paths a run cannot use are refused clearly, before anything is written (issue 20, section 5)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gymslurm.commands.new_run import create_run_dir, new_run_dir, prepare_dataset
from gymslurm.errors import ConfigError
from gymslurm.launcher.settings import validate
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


def test_a_dangling_link_at_the_next_run_directory_name_is_skipped_not_followed(tmp_path: Path) -> None:
    """A dangling link at ``<run_root>/<name>-<stamp>`` is a taken name: the run gets the next one."""
    runs, target = tmp_path / "runs", tmp_path / "elsewhere" / "run"
    runs.mkdir()
    (runs / "b-S").symlink_to(target)
    run = new_run_dir(_settings(tmp_path), tmp_path, stamp="S")
    assert run.root == runs / "b-S-2"
    assert (runs / "b-S").is_symlink() and not target.exists()


def test_a_name_planted_at_the_run_directory_while_submit_runs_is_a_specific_refusal(tmp_path: Path) -> None:
    """A link appearing at the run directory's path between naming and mkdir: what it is, who to ask."""
    run = new_run_dir(_settings(tmp_path), tmp_path, stamp="S")
    run.root.parent.mkdir()
    run.root.symlink_to(tmp_path / "elsewhere")
    taken = r"b-S was taken while submit ran: a symbolic link to '.*/elsewhere'"
    with pytest.raises(ConfigError, match=taken):
        create_run_dir(run)
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("planted", ["file", "link to nothing"])
def test_a_name_planted_at_run_root_is_refused_before_a_write(tmp_path: Path, planted: str) -> None:
    """``submit`` says what sits at ``run_root`` (a file, a dangling link) before ``dataset_command`` runs."""
    runs = tmp_path / "runs"
    if planted == "file":
        runs.write_text("not a folder\n")
        expected = f"{runs} is a file, not a folder"
    else:
        runs.symlink_to(tmp_path / "target")
        expected = f"{runs} is a symbolic link to '{tmp_path / 'target'}', which does not exist"
    data = tmp_path / "data.jsonl"
    bench = tmp_path / "bench.yaml"
    write = [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('{}\\n')", "{dataset}"]
    bench.write_text(
        json.dumps(
            {
                "name": "b",
                "dataset": str(data),
                "dataset_command": write,
                "run_root": str(runs),
                "backend": "local",
                "collector": {"command": ["true"]},
                "aggregation": {"enabled": False},
            }
        )
    )
    done = gymslurm("submit", str(bench))
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not data.exists() and not (tmp_path / "target").exists()
