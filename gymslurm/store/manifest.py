"""The run manifest, format version 3 (2 still read): the run's identity, digests, saved budget and policy.

The manifest is published atomically (``atomic.py``) and read strictly: the format version is checked
first (anything else is an unsupported manifest, never silently reinterpreted), unknown fields are
rejected, and every failure is a :class:`ManifestError` that names the file and says what to do.
``max_rollout_attempts`` comes from ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS`` only when a run is created; a
resume reuses the saved value whatever the environment says later. An older draft manifest without
the field is read with the current setting (000), marked :attr:`Manifest.adopted_max_rollout_attempts`
so that the first validated resume records it; every other reader just uses it.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from gymslurm.errors import ManifestError
from gymslurm.records import DEFAULT_MAX_ROLLOUT_ATTEMPTS
from gymslurm.store.atomic import publish_json
from gymslurm.store.files import parse_json_object, read_json_object, validation_problems
from gymslurm.version import __version__

RUN_ID_PATTERN = r"^run-[0-9a-f]{32}$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"

ManifestState = Literal["ready", "replacing"]
IdentitySource = Literal["verified", "imported", "overridden"]


class Manifest(BaseModel):
    """``<stem>_manifest.json`` (docs/formats.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: Literal[2, 3] = 3
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    state: ManifestState = "ready"
    created_at: str
    source_path: str
    source_digest: str = Field(pattern=DIGEST_PATTERN)
    inputs_digest: str = Field(pattern=DIGEST_PATTERN)
    config_digest: str = Field(pattern=DIGEST_PATTERN)
    rollout_count: int = Field(ge=0)
    max_rollout_attempts: int = Field(ge=1)
    retry_terminal_timeouts: bool = False
    identity_verified: bool = True
    identity_source: IdentitySource = "verified"
    selection_policy: Literal["latest_allocated"] = "latest_allocated"
    gymslurm_version: str = __version__

    _adopted: bool = PrivateAttr(default=False)

    @property
    def adopted_max_rollout_attempts(self) -> bool:
        """Read from a manifest that did not record ``max_rollout_attempts``: the current setting."""
        return self._adopted


def new_run_id() -> str:
    """A fresh ``run-<32 hex>`` id (docs/formats.md): the one maker of run ids (store and outcomes.py)."""
    return f"run-{secrets.token_hex(16)}"


_REMEDY = (
    "restore it from a backup or start at a new output path (its execution reservations cannot be recreated)"
)


def read_manifest(path: Path, *, adopt_attempts: int = DEFAULT_MAX_ROLLOUT_ATTEMPTS) -> Manifest | None:
    """The manifest at ``path``, or None when there is none; anything unreadable is a ManifestError.

    One without ``max_rollout_attempts`` adopts ``adopt_attempts``: the caller passes the setting in
    force (the collector its resolved settings, a reader the environment's); the store never reads the
    process environment itself.
    """
    data = read_json_object(path, "the run manifest", _REMEDY, "manifest")
    return None if data is None else _validated(path, data, adopt_attempts)


def parse_manifest(path: Path, raw: bytes, *, adopt_attempts: int = DEFAULT_MAX_ROLLOUT_ATTEMPTS) -> Manifest:
    """:func:`read_manifest` for bytes already read."""
    data = parse_json_object(path, raw, "the run manifest", _REMEDY, "manifest")
    return _validated(path, data, adopt_attempts)


def _validated(path: Path, data: dict[str, Any], adopt_attempts: int) -> Manifest:
    adopted = "max_rollout_attempts" not in data
    if adopted:
        data = {**data, "max_rollout_attempts": adopt_attempts}
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as error:
        problems = validation_problems(error)
        raise ManifestError(f"the run manifest {path} is invalid ({problems}); {_REMEDY}") from None
    manifest._adopted = adopted
    return manifest


def write_manifest(path: Path, manifest: Manifest) -> None:
    publish_json(path, manifest.model_dump(mode="json"))
