"""Manifest v2: strict reading, version first, clear errors; the attempt limit from the environment."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gymslurm.clock import utc_now
from gymslurm.errors import ManifestError
from gymslurm.store.manifest import (
    Manifest,
    new_run_id,
    read_manifest,
    write_manifest,
)

DIGEST = "sha256:" + "0" * 64


def manifest(**changes: object) -> Manifest:
    fields: dict[str, object] = {
        "run_id": new_run_id(),
        "created_at": utc_now(),
        "source_path": "data.jsonl",
        "source_digest": DIGEST,
        "inputs_digest": DIGEST,
        "config_digest": DIGEST,
        "rollout_count": 3,
        "max_rollout_attempts": 3,
    }
    return Manifest(**{**fields, **changes})  # type: ignore[arg-type]


def test_field_set_of_version_2_is_pinned() -> None:
    """The manifest's fields are exactly those of docs/formats.md."""
    assert set(Manifest.model_fields) == {
        "format_version",
        "run_id",
        "state",
        "created_at",
        "source_path",
        "source_digest",
        "inputs_digest",
        "config_digest",
        "rollout_count",
        "max_rollout_attempts",
        "retry_terminal_timeouts",
        "identity_verified",
        "identity_source",
        "selection_policy",
        "gymslurm_version",
    }


def test_round_trip(tmp_path: Path) -> None:
    """A written manifest reads back equal."""
    saved = manifest()
    write_manifest(tmp_path / "m.json", saved)
    assert read_manifest(tmp_path / "m.json") == saved


def test_missing_manifest_reads_as_none(tmp_path: Path) -> None:
    """No file means no manifest (not an error at this level)."""
    assert read_manifest(tmp_path / "m.json") is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "is a JSON list, not an object"),
        (b'{"format_version": 1}', "format_version 1"),
        (b'{"run_id": "x"}', "format_version None"),
    ],
)
def test_unreadable_manifests_are_manifest_errors(tmp_path: Path, content: bytes, message: str) -> None:
    """Corrupt, non-object and unsupported manifests raise ManifestError naming the problem."""
    path = tmp_path / "m.json"
    path.write_bytes(content)
    with pytest.raises(ManifestError, match=message):
        read_manifest(path)


def test_version_is_checked_before_fields(tmp_path: Path) -> None:
    """A version-4 manifest (newer than gymslurm) with unknown fields is unsupported, not invalid."""
    path = tmp_path / "m.json"
    path.write_bytes(orjson.dumps({**manifest().model_dump(), "format_version": 4, "journal": []}))
    with pytest.raises(ManifestError, match="format_version 4"):
        read_manifest(path)


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    """A version-2 manifest with an extra field is invalid."""
    path = tmp_path / "m.json"
    path.write_bytes(orjson.dumps({**manifest().model_dump(), "extra": 1}))
    with pytest.raises(ManifestError, match="extra"):
        read_manifest(path)


def test_a_manifest_without_an_attempt_limit_adopts_the_one_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """parse_manifest adopts the limit its caller passes, never the process environment's."""
    import orjson

    from gymslurm.store.manifest import parse_manifest

    saved = manifest().model_dump(mode="json")
    del saved["max_rollout_attempts"]
    monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "7")
    assert parse_manifest(tmp_path / "m.json", orjson.dumps(saved)).max_rollout_attempts == 3
    adopted = parse_manifest(tmp_path / "m.json", orjson.dumps(saved), adopt_attempts=5)
    assert adopted.max_rollout_attempts == 5
    assert adopted.adopted_max_rollout_attempts
