"""A watch's ledger (store/watch_ledger.py): versioned, append-only, one claim per checkpoint under races."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gymslurm.errors import ConfigError, CorruptRecordError
from gymslurm.formats import version_of
from gymslurm.store.watch_ledger import WatchFolder, WatchSettings, find_watch, record
from gymslurm.watch_rules import digest, fold


def _settings(source: Path, **fields: object) -> WatchSettings:
    values: dict[str, object] = {
        "format_version": version_of("watch"),
        "name": "w",
        "source": str(source),
        "suite": "/suite.yaml",
        "every_s": 60,
        "mode": "marker",
        "backend": "local",
        "workdir": str(source.parent),
        "run_root": str(source.parent),
        "interpreter": sys.executable,
    }
    return WatchSettings.model_validate(values | fields)


@pytest.fixture
def folder(tmp_path: Path) -> WatchFolder:
    watch = WatchFolder(tmp_path / "watches" / "w")
    watch.create(_settings(tmp_path / "ck"))
    return watch


def test_settings_round_trip_and_found_by_name(folder: WatchFolder, tmp_path: Path) -> None:
    """watch.json reads back as written; a watch is found by its name under <run_root>/watches."""
    assert folder.read_settings().name == "w"
    found = find_watch("w", tmp_path)
    assert found is not None and found.root == folder.root
    assert find_watch("nope", tmp_path) is None


def test_a_second_watch_of_one_name_is_refused(folder: WatchFolder, tmp_path: Path) -> None:
    """Creating a watch whose folder exists is a clear error that names it."""
    with pytest.raises(ConfigError, match="exists already"):
        WatchFolder(folder.root).create(_settings(tmp_path / "ck"))


def test_append_and_read(folder: WatchFolder) -> None:
    """Records read back in order, validated, without the fields left empty."""
    with folder.lock():
        folder.append(record("claimed", digest="d1", checkpoint="/ck/1"), record("tick", job="4"))
    kinds = [r["kind"] for r in folder.read()]
    assert kinds == ["claimed", "tick"]
    assert "run" not in folder.read()[0]


def test_a_newer_ledger_version_is_refused(folder: WatchFolder) -> None:
    """A line of a version this gymslurm does not read is an error naming the file and line."""
    folder.ledger_path.write_text('{"v": 9, "kind": "tick", "at": "x", "job": "1"}\n')
    with pytest.raises(CorruptRecordError, match=r"ledger.jsonl, line 1: the watch ledger is version 9"):
        folder.read()


def test_a_torn_last_line_is_cut_before_the_next_append(folder: WatchFolder) -> None:
    """A writer killed mid-line leaves a torn tail: not a record, and gone once the next one appends."""
    with folder.lock():
        folder.append(record("claimed", digest="d1", checkpoint="/ck/1"))
    with folder.ledger_path.open("ab") as handle:
        handle.write(b'{"v":1,"kind":"claimed","dig')
    assert len(folder.read()) == 1
    with folder.lock():
        folder.append(record("claimed", digest="d2", checkpoint="/ck/2"))
    assert [r["digest"] for r in folder.read()] == ["d1", "d2"]


# What a tick does with the ledger, in a process of its own: lock, read, claim what is new, append.
_CLAIMER = """
import sys, time
from pathlib import Path
from gymslurm.commands.watch_tick import claim_ready
from gymslurm.store.watch_ledger import WatchFolder
from gymslurm.watch_rules import fold
folder = WatchFolder(Path(sys.argv[1]))
settings = folder.read_settings()
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
for _ in range(int(sys.argv[3])):
    with folder.lock():
        claim_ready(folder, settings, fold(folder.read()))
"""


def test_racing_watchers_claim_each_checkpoint_once(folder: WatchFolder, tmp_path: Path) -> None:
    """Four watch processes started at the same instant while checkpoints appear: each is claimed once."""
    source = tmp_path / "ck"
    for n in range(3):
        (source / f"step_{n}").mkdir(parents=True)
        (source / f"step_{n}" / "READY").touch()
    start = time.time() + 1.0
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    procs = [
        subprocess.Popen([sys.executable, "-c", _CLAIMER, str(folder.root), str(start), "10"], env=env)
        for _ in range(4)
    ]
    time.sleep(1.2)
    for n in range(3, 8):  # written while the watchers race
        (source / f"step_{n}").mkdir()
        (source / f"step_{n}" / "READY").touch()
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    with folder.lock():
        from gymslurm.commands.watch_tick import claim_ready

        claim_ready(folder, folder.read_settings(), fold(folder.read()))
    claims = [r["digest"] for r in folder.read() if r["kind"] == "claimed"]
    expected = {digest(str((source / f"step_{n}").resolve())) for n in range(8)}
    assert sorted(claims) == sorted(expected)  # every one claimed, none twice


def test_a_checkpoint_still_settling_is_not_claimed(folder: WatchFolder, tmp_path: Path) -> None:
    """With --ready settle, a folder written a moment ago waits; an old one is claimed."""
    from gymslurm.commands.watch_tick import claim_ready

    settle = WatchFolder(tmp_path / "watches" / "s")
    settle.create(_settings(tmp_path / "ck", name="s", mode="settle", settle_s=30.0))
    old, new = tmp_path / "ck" / "old", tmp_path / "ck" / "new"
    for path in (old, new):
        path.mkdir(parents=True)
        (path / "model.bin").write_bytes(b"x")
    past = time.time() - 60
    os.utime(old / "model.bin", (past, past))
    with settle.lock():
        claim_ready(settle, settle.read_settings(), fold(settle.read()))
    assert [r["checkpoint"] for r in settle.read()] == [str(old.resolve())]
