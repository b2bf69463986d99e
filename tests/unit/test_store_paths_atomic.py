"""Companion paths beside a resolved output, and atomic whole-file publishing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gymslurm.store.atomic import publish_bytes, publish_json, publish_stream
from gymslurm.store.paths import RunPaths, companion_path


def test_companions_sit_beside_the_output(tmp_path: Path) -> None:
    """Every companion is named <stem>_<suffix> in the output's folder."""
    paths = RunPaths.for_output(tmp_path / "run.jsonl")
    assert paths.failures == tmp_path / "run_failures.jsonl"
    assert paths.manifest == tmp_path / "run_manifest.json"
    assert paths.reservations == tmp_path / "run_reservations.bin"
    assert paths.lock == tmp_path / "run_run.lock"
    assert paths.resubmit_offset == tmp_path / "run_resubmit_offset"
    assert all(path.parent == tmp_path for path in paths.companions().values())


def test_symlinked_output_resolves_to_its_target(tmp_path: Path) -> None:
    """A symlinked output puts the companions beside the target, and keeps the alias as given."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "data.jsonl"
    target.touch()
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(target)
    paths = RunPaths.for_output(alias)
    assert paths.output == target
    assert paths.output_as_given == alias
    assert paths.manifest == tmp_path / "real" / "data_manifest.json"


def test_publish_replaces_content(tmp_path: Path) -> None:
    """A publish leaves exactly the new bytes and no temporary file."""
    target = tmp_path / "x.json"
    publish_bytes(target, b"old")
    publish_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_publish_keeps_permission_bits(tmp_path: Path) -> None:
    """Replacing a file keeps its permission bits."""
    target = tmp_path / "x.json"
    target.write_bytes(b"old")
    target.chmod(0o640)
    publish_json(target, {"a": 1})
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_publish_writes_through_a_symlink(tmp_path: Path) -> None:
    """Publishing to a symlink replaces its target and keeps the link."""
    target = tmp_path / "target.json"
    target.write_bytes(b"old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    publish_bytes(link, b"new")
    assert link.is_symlink()
    assert target.read_bytes() == b"new"


def test_publish_into_a_missing_folder_is_a_store_error(tmp_path: Path) -> None:
    """A publish that cannot write says where and what to check."""
    from gymslurm.errors import StoreError

    with pytest.raises(StoreError, match="missing"):
        publish_bytes(tmp_path / "missing" / "x.json", b"x")
    assert not os.path.exists(tmp_path / "missing")


def test_publish_stream_writes_every_chunk_and_counts_bytes(tmp_path: Path) -> None:
    """publish_stream replaces the target with the concatenated chunks and returns their length."""
    target = tmp_path / "merged.jsonl"
    target.write_bytes(b"old\n")
    assert publish_stream(target, (b"a\n", b"", b"bc\n")) == 5
    assert target.read_bytes() == b"a\nbc\n"
    assert [p.name for p in tmp_path.iterdir()] == ["merged.jsonl"]


@pytest.mark.parametrize(
    ("output", "companion"),
    [
        ("r/out.jsonl", "r/out_coverage.json"),
        ("r/out.json", "r/out.json_coverage.json"),
        ("out", "out_coverage.json"),
    ],
)
def test_companion_path_strips_only_jsonl(output: str, companion: str) -> None:
    """A companion's stem is the output name without .jsonl; other suffixes stay."""
    assert companion_path(Path(output), "_coverage.json") == Path(companion)
