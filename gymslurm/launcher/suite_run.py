"""A suite run's folder: the suite's own chains, and one whole run of each benchmark inside it.

Layout (below ``<run_root>/<suite>-<UTC time>/``)::

    run.json, benchmark.yaml, scripts/, shards/NNN/ledger.jsonl, aggregate/, logs/, local/
                                  the suite's link chains, as any run's (benchmark.yaml: the stack)
    suite.json                    which benchmarks, their shards, weights and folders (version 1)
    benchmarks/<name>/            one run of each benchmark, with exactly a run's files: run.json,
                                  benchmark.yaml (its stack included), scripts/, inputs/, output/
                                  (manifest, identity, coverage, merged output), shards/NNN/ledger.jsonl
    suite_metrics.json            what the model scored (store/suite_metrics.py)

A benchmark's shard ``k`` ledger holds the ``start`` and ``decision`` of each suite link of chain
``k`` that ran it (the suite link is its one writer), so its verdict, budgets and resubmits are
those of a shard chain; ``status``, ``aggregate`` and ``reverify`` read a benchmark's folder as a run.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gymslurm.errors import ConfigError
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.rundir import RunDir, atomic_write, suite_record_path
from gymslurm.launcher.verdicts import VERDICT_OF_STOP, ChainVerdict
from gymslurm.process_env import SECRETS_ENV

MEMBER_SECRETS = "@benchmarks"  # the key of each benchmark's secrets in the job's secrets bundle


class SuiteEntry(BaseModel):
    """One benchmark of a suite run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    shards: int
    weight: float = 1.0
    metric: str = "reward"
    output_stem: str = "rollouts"


class SuiteRecord(BaseModel):
    """``suite.json`` (version 1): written at submit, rewritten when a submit adds or drops benchmarks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    suite: str
    order: Literal["concurrent", "sequential"] = "concurrent"
    benchmarks: list[SuiteEntry]
    dropped: list[str] = Field(default_factory=list)  # benchmarks no longer in the suite (files kept)

    @property
    def shards(self) -> dict[str, int]:
        """Each benchmark's shard count, in the suite's order."""
        return {entry.name: entry.shards for entry in self.benchmarks}


def member_run(run: RunDir, name: str) -> RunDir:
    """The folder of benchmark ``name`` of a suite run: a run of its own."""
    return RunDir(run.root / "benchmarks" / name)


def write_suite_record(run: RunDir, record: SuiteRecord) -> None:
    """Replace ``suite.json`` whole."""
    atomic_write(suite_record_path(run), record.model_dump_json(indent=2).encode())


def read_suite_record(run: RunDir) -> SuiteRecord:
    """``suite.json``, validated."""
    path = suite_record_path(run)
    try:
        return SuiteRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError as error:
        raise ConfigError(f"{run.root} is not a suite run: it has no suite.json") from error
    except ValidationError as error:
        raise ConfigError(f"{path} is not a suite.json this gymslurm understands: {error}") from error


def benchmark_verdict(run: RunDir, entry: SuiteEntry) -> str:
    """A benchmark's verdict over its shards: DONE when every one is, else the first shard's stop
    (RUNNING while one has not finished)."""
    sub = member_run(run, entry.name)
    states = sub.chain_states(None, entry.shards)
    if all(s.last_decision is not None and s.last_decision.decision == Decision.DONE for s in states):
        return "DONE"
    if not all(s.finished for s in states):
        return "RUNNING" if any(s.last_decision for s in states) else "PENDING"
    stops = [
        s.last_decision.decision for s in states if s.last_decision and s.last_decision.decision != "DONE"
    ]
    return str(VERDICT_OF_STOP.get(stops[0], ChainVerdict.FAILED) if stops else ChainVerdict.CANCELLED)


def load_member_settings(run: RunDir, name: str, environ: dict[str, str] | None = None) -> Any:
    """Benchmark ``name``'s saved settings with its secrets put back from the job's bundle."""
    from gymslurm.launcher.settings import merge_secrets, validate
    from gymslurm.redaction import learn

    member = member_run(run, name)
    data = OmegaConf.to_container(OmegaConf.load(member.config_path), resolve=False)
    env = os.environ if environ is None else environ
    bundle = json.loads(env.get(SECRETS_ENV, "{}"))
    secrets = bundle.get(MEMBER_SECRETS, {}).get(name, {}) if isinstance(bundle, dict) else {}
    assert isinstance(data, dict)
    merged: dict[str, Any] = merge_secrets(data, secrets)
    learn(merged)
    return validate(merged, str(member.config_path))
