"""A refused collection writes nothing (issue 10, section 4; docs/troubleshooting.md).

A missing input dataset used to leave the output folder and ``<stem>_run.lock`` behind; an output
path that is a directory left a ``replacing`` manifest in the parent folder (and a misleading
"saved outcomes but no manifest" on the next resume). Both are refused before any file exists.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.helpers import collect, write_tasks

pytestmark = pytest.mark.e2e


def _everything(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def test_a_missing_dataset_creates_no_folder_and_no_lock(tmp_path: Path) -> None:
    """No dataset: exit 2 naming it, and the output folder is never created."""
    done = collect(tmp_path / "missing.jsonl", tmp_path / "run" / "out.jsonl", "http://127.0.0.1:9")
    assert done.returncode == 2 and "cannot read the input dataset" in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resume"])
def test_an_output_path_that_is_a_directory_is_refused_before_writing(tmp_path: Path, resume: bool) -> None:
    """An output that is a directory: exit 2 saying so; no manifest, lock or other file beside it."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}])
    (tmp_path / "run" / "out.jsonl").mkdir(parents=True)
    before = _everything(tmp_path)
    extra = ["+resume_from_cache=true"] if resume else []
    done = collect(dataset, tmp_path / "run" / "out.jsonl", "http://127.0.0.1:9", *extra)
    assert done.returncode == 2 and "is a directory" in done.stderr, done.stderr
    assert _everything(tmp_path) == before
