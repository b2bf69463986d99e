"""A refused collection writes nothing (issue 10, section 4; docs/troubleshooting.md).

A missing input dataset used to leave the output folder and ``<stem>_run.lock`` behind; an output
path that is a directory left a ``replacing`` manifest in the parent folder (and a misleading
"saved outcomes but no manifest" on the next resume). Both are refused before any file exists.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import DemoServer
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


# --- a run's files belong to it (issue 33): no collect writes over another run or another user ----

COMPANIONS = ("_failures.jsonl", "_manifest.json", "_materialized_inputs.jsonl", "_reservations.bin")


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.mark.parametrize("suffix", COMPANIONS)
@pytest.mark.parametrize("spelling", ["path", "link"])
def test_a_collect_into_another_runs_companion_is_refused(
    shared_demo_server: DemoServer, tmp_path: Path, suffix: str, spelling: str
) -> None:
    """A fresh collect whose output is (or links to) an existing run's companion: exit 2 naming that
    run, and the first run's every byte is kept (it can still be resumed)."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}])
    first = tmp_path / "run" / "r.jsonl"
    assert collect(dataset, first, shared_demo_server.url).returncode == 0
    target = first.with_name("r" + suffix)
    output = target
    if spelling == "link":
        output = tmp_path / "elsewhere" / "out.jsonl"
        output.parent.mkdir()
        output.symlink_to(target)
    before = _snapshot(first.parent)
    done = collect(dataset, output, shared_demo_server.url)
    assert done.returncode == 2, done.stderr
    assert f"is a companion file of the run {first}" in done.stderr, done.stderr
    assert _snapshot(first.parent) == before
    again = collect(dataset, first, shared_demo_server.url, "+resume_from_cache=true")
    assert again.returncode == 0, again.stderr


OTHER_USER = "slurmtest"  # the sandbox's non-root user (docs/slurm-sandbox.md)


def _other_uid() -> int:
    import pwd

    try:
        return pwd.getpwnam(OTHER_USER).pw_uid
    except KeyError:
        pytest.skip(f"no user {OTHER_USER!r} to own a folder")


@pytest.mark.parametrize("whose", ["folder", "results", "manifest"])
def test_a_collect_into_another_users_folder_or_file_is_refused(
    shared_demo_server: DemoServer, tmp_path: Path, whose: str
) -> None:
    """An output (here through a link) into a folder, or over a run file, of another user's: exit 2
    naming what they own, before anything is written there."""
    import os

    if os.geteuid() != 0:
        pytest.skip("making a folder another user's needs root")
    uid = _other_uid()
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}])
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "r.jsonl").write_text("")
    (theirs / "r_manifest.json").write_text("{}")
    owned = {"folder": theirs, "results": theirs / "r.jsonl", "manifest": theirs / "r_manifest.json"}[whose]
    os.chown(owned, uid, -1)
    link = tmp_path / "mine" / "out.jsonl"
    link.parent.mkdir()
    link.symlink_to(theirs / "r.jsonl")
    before = _snapshot(theirs)
    done = collect(dataset, link, shared_demo_server.url)
    assert done.returncode == 2, done.stderr
    assert "another user owns" in done.stderr and str(owned) in done.stderr, done.stderr
    assert _snapshot(theirs) == before and set(theirs.iterdir()) == set(before)
