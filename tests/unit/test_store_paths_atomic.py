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


def test_publish_of_the_output_path_writes_through_its_symlink(tmp_path: Path) -> None:
    """The output path (follow_link=True) replaces its symlink's target and keeps the link (spec 000)."""
    target = tmp_path / "target.json"
    target.write_bytes(b"old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    publish_bytes(link, b"new", follow_link=True)
    assert link.is_symlink()
    assert target.read_bytes() == b"new"


def test_publish_of_a_companion_replaces_a_planted_link_not_its_target(tmp_path: Path) -> None:
    """A symlink planted at a companion (coverage, health...) is replaced; its target is untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    planted = tmp_path / "run_coverage.json"
    planted.symlink_to(victim)
    publish_json(planted, {"a": 1})
    assert victim.read_bytes() == b"precious"
    assert not planted.is_symlink() and planted.read_bytes() == b'{\n  "a": 1\n}\n'


def test_temporaries_have_unpredictable_names_and_never_follow_planted_links(tmp_path: Path) -> None:
    """Links planted at every pid-named temporary are never written through nor renamed into the run."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    target = tmp_path / "run_manifest.json"
    for pid in range(max(os.getpid() - 5, 1), os.getpid() + 50):
        (tmp_path / f".{target.name}.tmp-{pid}").symlink_to(victim)
    publish_bytes(target, b"new")
    assert victim.read_bytes() == b"precious"
    assert not target.is_symlink() and target.read_bytes() == b"new"


def test_a_new_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """A newly published run file is 0600 even under umask 000."""
    previous = os.umask(0)
    try:
        publish_bytes(tmp_path / "x.json", b"x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "x.json").stat().st_mode) == 0o600


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


def test_publish_over_another_users_file_does_not_keep_their_bits(tmp_path: Path) -> None:
    """A file of another user's replaced (through the output's link) gets 0600, never their 0644."""
    import pwd

    if os.geteuid() != 0:
        pytest.skip("making a file another user's needs root")
    try:
        uid = pwd.getpwnam("slurmtest").pw_uid
    except KeyError:
        pytest.skip("no second user")
    target = tmp_path / "theirs.jsonl"
    target.write_text("old\n")
    target.chmod(0o644)
    os.chown(target, uid, -1)
    publish_bytes(target, b"new\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("name", "run"),
    [
        ("r_failures.jsonl", "r.jsonl"),
        ("r_manifest.json", "r.jsonl"),
        ("r_materialized_inputs.jsonl", "r.jsonl"),
        ("r_run.lock", "r.jsonl"),
        ("r.jsonl", None),  # the run's output itself is no companion
        ("x_failures.jsonl", None),  # named like one, but no run x has a file here
    ],
)
def test_a_companion_of_an_existing_run_is_known_by_name(tmp_path: Path, name: str, run: str | None) -> None:
    """Every companion name the store knows, of a run that has a file, names that run's output."""
    from gymslurm.store.paths import companion_of

    (tmp_path / "r.jsonl").write_text("")
    (tmp_path / "r_manifest.json").write_text("{}")
    found = companion_of(tmp_path / name)
    assert found == (tmp_path / run if run else None)
