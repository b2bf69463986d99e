"""A new suite run: ``gymslurm submit SUITE`` (or ``gymslurm submit b1 b2 b3``).

The suite's chains are made as any run's (new_run.py's ``create_run``, with the suite's link
settings: the shared stack, ``max(shards)`` chains); its inputs (:class:`SuiteInputs`) are one whole
run folder per benchmark under ``benchmarks/<name>/`` (run.json, benchmark.yaml with the stack,
scripts, each shard's slice of its dataset) and ``suite.json``. Everything is validated first
(suite_settings.py): a refusal writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from omegaconf import OmegaConf

from gymslurm.commands.new_run import (
    create_run,
    create_run_dir,
    prepare_dataset,
    render_scripts,
    resolve_backend_name,
    split_dataset,
)
from gymslurm.errors import ConfigError
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.launcher.settings import split_secrets
from gymslurm.launcher.suite_run import (
    MEMBER_SECRETS,
    SuiteEntry,
    SuiteRecord,
    member_run,
    write_suite_record,
)
from gymslurm.launcher.suite_settings import (
    Member,
    Suite,
    across_clusters_problem,
    chain_settings,
    own_cluster_problem,
)


class SuiteInputs:
    """Every benchmark of a suite as a run folder of its own inside the suite's run."""

    def __init__(self, suite: Suite, workdir: Path) -> None:
        self.suite, self.workdir = suite, workdir
        self.datasets: dict[str, Path] = {}

    def prepare(self, only: list[str] | None = None) -> None:
        """Each benchmark's dataset (``only`` these), created by its ``dataset_command`` when missing."""
        for member in self.suite.members:
            if only is None or member.name in only:
                self.datasets[member.name] = prepare_dataset(member.settings, self.workdir)

    def write(self, run: RunDir, array: bool) -> list[int]:
        """Each benchmark's run folder and shard inputs, then ``suite.json``; rows per suite chain."""
        del array  # a benchmark's inputs are cut at submit: one file per shard, whatever the backend
        per_chain = [0] * self.suite.chains
        info = run.read_info()
        for member in self.suite.members:
            counts = self.write_member(run, member, info.model_copy(deep=True))
            for shard, count in enumerate(counts):
                per_chain[shard] += count
        write_suite_record(run, suite_record(self.suite))
        return per_chain

    def write_member(self, run: RunDir, member: Member, suite_info: Any) -> list[int]:
        """One benchmark's run folder and its shards' inputs; rows per shard."""
        sub = member_run(run, member.name)
        create_run_dir(sub)
        info = suite_info.model_copy(
            update={
                "name": sub.name,
                "benchmark": member.name,
                "shards": member.settings.shards,
                "output_stem": member.settings.output_stem,
                "array": False,
                "placement": None,
                "aggregate_cluster": None,
                "aggregation": member.settings.aggregation.enabled,
            }
        )
        atomic_write(sub.info_path, info.model_dump_json(indent=2).encode())
        clean, _ = split_secrets(member.data)
        atomic_write(sub.config_path, OmegaConf.to_yaml(OmegaConf.create(clean)).encode())
        for path, text in render_scripts(sub, member.settings, self.workdir).items():
            atomic_write(path, text.encode())
        (sub.root / "logs").mkdir(mode=0o700, exist_ok=True)
        return split_dataset(self.datasets[member.name], sub, member.settings.shards)

    def secrets(self) -> dict[str, Any]:
        """Each benchmark's own secrets, under its name (suite_run.load_member_settings)."""
        return {MEMBER_SECRETS: {m.name: split_secrets(m.data)[1] for m in self.suite.members}}


def suite_record(suite: Suite) -> SuiteRecord:
    """``suite.json`` of a composed suite (pure)."""
    return SuiteRecord(
        suite=suite.settings.name,
        order=suite.settings.order,
        benchmarks=[
            SuiteEntry(
                name=m.name,
                shards=m.settings.shards,
                weight=m.entry.weight,
                metric=m.entry.metric,
                output_stem=m.settings.output_stem,
            )
            for m in suite.members
        ],
    )


def submit_suite(
    suite: Suite,
    overrides: list[str],
    backend_name: str | None,
    dry_run: bool,
    *,
    wait: bool,
    after_ok: list[str] | None = None,
) -> int:
    """Create the suite's run and queue its chains; with ``wait``, stay until it ended; ``after_ok``
    (Slurm): its first links wait for these jobs to complete successfully (a watch's conversion)."""
    settings, data = chain_settings(suite)
    kind: Literal["slurm", "local"] = resolve_backend_name(settings, backend_name)
    problem = None
    if kind == "slurm":
        problem = across_clusters_problem(suite) or own_cluster_problem(suite, settings.slurm.cluster)
    if problem is not None:
        raise ConfigError(problem)
    if after_ok and kind != "slurm":
        raise ConfigError(f"suite {suite.where}: waiting for other jobs (afterok) needs the Slurm backend")
    workdir = Path.cwd()
    inputs = SuiteInputs(suite, workdir)
    return create_run(
        settings, data, overrides, kind, workdir, dry_run=dry_run, wait=wait, inputs=inputs, after_ok=after_ok
    )
