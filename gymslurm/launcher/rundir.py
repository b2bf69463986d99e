"""The run directory: what a submission recorded, and where every file of a run lives.

Layout (all paths below ``<run_root>/<run name>/``)::

    run.json                      what was submitted (version 1): benchmark, shards, backend, workdir
    benchmark.yaml                the composed benchmark config, secrets replaced by a marker
    scripts/shard-NNN.sbatch      the rendered link script of each shard
    scripts/aggregate.sbatch      the rendered aggregation script
    inputs/shard-NNN.jsonl        each shard's contiguous slice of the dataset
    output/shard-NNN/<stem>.jsonl each shard's collector output (and its companions)
    output/merged/<stem>.jsonl    the aggregation's merged output
    shards/NNN/ledger.jsonl       each shard's chain ledger (gymslurm/launcher/ledger.py)
    shards/NNN/heartbeat.json     the running link's last sign of life (replaced atomically)
    shards/NNN/link.lock          held (flock) by the shard's live link for its whole run
    aggregate/ledger.jsonl        the aggregation job's ledger; aggregate/lock serialises its submission
    logs/                         job output (appended across requeues)
    local/                        the local backend's job queue

``run.json`` and ``benchmark.yaml`` are written once, at submit. Secrets never reach this folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gymslurm.errors import ConfigError
from gymslurm.launcher.ledger import Ledger
from gymslurm.store.atomic import publish_bytes

if TYPE_CHECKING:
    from gymslurm.launcher.settings import BenchmarkSettings

SECRETS_ENV = "GYMSLURM_SECRETS"


class RunInfo(BaseModel):
    """``run.json`` (version 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    name: str
    benchmark: str
    overrides: list[str]
    created_at: str
    backend: Literal["slurm", "local"]
    shards: int
    workdir: str
    output_stem: str
    infra_retry_limit: int
    max_walltime_s: float | None


@dataclass(frozen=True)
class RunDir:
    """Paths of one run."""

    root: Path

    @property
    def name(self) -> str:
        """The run's name (its folder name)."""
        return self.root.name

    @property
    def info_path(self) -> Path:
        """``run.json``."""
        return self.root / "run.json"

    @property
    def config_path(self) -> Path:
        """``benchmark.yaml`` (secrets removed)."""
        return self.root / "benchmark.yaml"

    def shard_dir(self, shard: int) -> Path:
        """The folder of a shard's ledger and heartbeat."""
        return self.root / "shards" / f"{shard:03d}"

    def ledger(self, shard: int) -> Ledger:
        """A shard's ledger."""
        return Ledger(self.shard_dir(shard) / "ledger.jsonl")

    def heartbeat(self, shard: int) -> Path:
        """A shard's heartbeat file."""
        return self.shard_dir(shard) / "heartbeat.json"

    def link_lock(self, shard: int) -> Path:
        """The lock a shard's live link holds: a second link of the shard finds it taken."""
        return self.shard_dir(shard) / "link.lock"

    def script(self, shard: int | None) -> Path:
        """A shard's link script, or the aggregation script for None."""
        name = "aggregate" if shard is None else f"shard-{shard:03d}"
        return self.root / "scripts" / f"{name}.sbatch"

    def log_pattern(self, shard: int | None) -> Path:
        """Job output path with ``%j`` for the job id."""
        name = "aggregate" if shard is None else f"shard-{shard:03d}"
        return self.root / "logs" / f"{name}-%j.out"

    def shard_input(self, shard: int) -> Path:
        """A shard's slice of the dataset."""
        return self.root / "inputs" / f"shard-{shard:03d}.jsonl"

    def shard_output(self, shard: int, stem: str) -> Path:
        """A shard's collector output."""
        return self.root / "output" / f"shard-{shard:03d}" / f"{stem}.jsonl"

    def merged_output(self, stem: str) -> Path:
        """The aggregation's merged output."""
        return self.root / "output" / "merged" / f"{stem}.jsonl"

    @property
    def aggregate_ledger(self) -> Ledger:
        """The aggregation job's ledger."""
        return Ledger(self.root / "aggregate" / "ledger.jsonl")

    @property
    def aggregate_lock(self) -> Path:
        """The lock that makes the aggregation's submission exactly-once."""
        return self.root / "aggregate" / "lock"

    @property
    def local_dir(self) -> Path:
        """The local backend's queue."""
        return self.root / "local"

    def read_info(self) -> RunInfo:
        """``run.json``, validated."""
        try:
            return RunInfo.model_validate_json(self.info_path.read_bytes())
        except FileNotFoundError as error:
            raise ConfigError(f"{self.root} is not a gymslurm run: it has no run.json") from error
        except ValidationError as error:
            raise ConfigError(
                f"{self.info_path} is not a run.json this gymslurm understands: {error}"
            ) from error

    def load_settings(self, environ: dict[str, str] | None = None) -> BenchmarkSettings:
        """The saved benchmark with secrets put back from ``GYMSLURM_SECRETS`` in the environment."""
        from omegaconf import OmegaConf

        from gymslurm.launcher.settings import merge_secrets, validate

        data = OmegaConf.to_container(OmegaConf.load(self.config_path), resolve=False)
        env = os.environ if environ is None else environ
        secrets = json.loads(env.get(SECRETS_ENV, "{}"))
        assert isinstance(data, dict)
        merged: dict[str, Any] = merge_secrets(data, secrets)
        return validate(merged, str(self.config_path))


def find_runs(run_root: Path) -> list[RunDir]:
    """Every run under ``run_root``, oldest first."""
    if not run_root.is_dir():
        return []
    return sorted((RunDir(p.parent) for p in run_root.glob("*/run.json")), key=lambda r: r.name)


def resolve_run(ref: str, run_root: Path) -> RunDir:
    """A run given as a path or as a name under ``run_root``."""
    for candidate in (Path(ref), run_root / ref):
        if (candidate / "run.json").is_file():
            return RunDir(candidate.resolve())
    known = ", ".join(r.name for r in find_runs(run_root)[-5:]) or "none"
    raise ConfigError(f"no run {ref!r} (looked at {ref} and {run_root / ref}); recent runs: {known}")


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically (store.atomic's publish), creating its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    publish_bytes(path, data)
