"""``gymslurm resubmit RUN SUITE`` with an edited suite file: benchmarks added to, or dropped from, a run.

Each benchmark of a suite run is a run of its own, with its own identity (docs/suites.md), so a
suite file that changed is read benchmark by benchmark (:func:`plan_change`, pure):

- a benchmark in the run and in the file is **kept** when its composed config is the one it was
  submitted with (its output is reused: a DONE one is not run again); a changed one is refused,
  naming it (submit a new run, or give it another name: a new benchmark);
- a benchmark only in the file is **added**: its folder is written as submit writes it and the
  chains of its shards run again (the DONE benchmarks in them are skipped by their links);
- a benchmark only in the run is **dropped**: it leaves ``suite.json``'s benchmarks for its
  ``dropped`` list, its files stay (a later file that lists it again keeps it, as it was).

The suite's chains are the run's: an added benchmark with more shards than the run has chains is
refused (a new run). ``resubmit --shards`` reruns the chosen shards as they were, so there a file
that adds, drops or changes a benchmark is refused rather than ignored. Everything is checked
before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from gymslurm.commands.new_suite import SuiteInputs, suite_record
from gymslurm.errors import ConfigError
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import split_secrets
from gymslurm.launcher.suite_run import SuiteRecord, member_run, read_suite_record, write_suite_record
from gymslurm.launcher.suite_settings import Suite, own_cluster_problem


@dataclass(frozen=True)
class SuiteChange:
    """What an edited suite file does to a suite run."""

    added: list[str]
    dropped: list[str]
    kept: list[str]
    reopened: list[int]  # the suite chains that run again: every shard of an added benchmark

    @property
    def changes(self) -> bool:
        """Whether the file adds or drops anything."""
        return bool(self.added or self.dropped)


def plan_change(record: SuiteRecord, wanted: dict[str, int], existing: set[str], chains: int) -> SuiteChange:
    """The change from ``record`` to the benchmarks ``wanted`` (name → shards), in the file's order
    (pure). ``existing``: the benchmark folders the run has (a dropped one listed again is kept)."""
    listed = [e.name for e in record.benchmarks]
    added = [name for name in wanted if name not in existing]
    too_big = [f"{name} ({wanted[name]} shards)" for name in added if wanted[name] > chains]
    if too_big:
        raise ConfigError(
            f"added benchmark(s) {', '.join(too_big)} need more than the run's {chains} chain(s); "
            "give them at most that many shards, or submit a new run"
        )
    reopened = sorted({shard for name in added for shard in range(wanted[name])})
    kept = [name for name in wanted if name in existing]
    dropped = [name for name in listed if name not in wanted]
    return SuiteChange(added, dropped, kept, reopened)


def refuse_other_cluster(run: RunDir, suite: Suite) -> None:
    """On Slurm, refuse a suite file one of whose benchmarks (kept or added) now sets its own
    ``slurm.cluster`` (its file edited since the submit), naming its file's line and what to do, as
    submit does: a suite's links run every benchmark on the run's cluster, so it would be ignored
    (a kept one is refused as changed anyway, but without saying why)."""
    info = run.read_info()
    if info.backend == "slurm" and (problem := own_cluster_problem(suite, info.cluster)) is not None:
        raise ConfigError(problem)


def check_change(run: RunDir, suite: Suite, chains: int) -> SuiteChange:
    """The change an edited suite file makes to ``run``, read and checked, nothing written: a
    benchmark that now sets its own cluster, an added one too big for the run's chains and a kept
    one whose composed config is not the one it ran with are refused, naming them."""
    refuse_other_cluster(run, suite)
    record = read_suite_record(run)
    existing = {p.name for p in (run.root / "benchmarks").iterdir() if (p / "run.json").is_file()}
    change = plan_change(record, {m.name: m.settings.shards for m in suite.members}, existing, chains)
    members = {m.name: m for m in suite.members}
    for name in change.kept:
        saved = OmegaConf.to_container(OmegaConf.load(member_run(run, name).config_path), resolve=False)
        if split_secrets(members[name].data)[0] != saved:
            raise ConfigError(
                f"suite {suite.where}: benchmark {name!r} is not the one run {run.name} ran "
                f"({member_run(run, name).config_path}); give it another name to add it as a new benchmark, "
                "or submit a new run"
            )
    return change


def check_unchanged(run: RunDir, suite: Suite, chains: int, workdir: Path) -> dict[str, Any]:
    """``resubmit --shards`` of a suite run: the chosen shards run their benchmarks as saved, so a
    suite file that adds, drops or changes a benchmark is refused (it would be ignored, silently);
    every benchmark's secrets for the new links."""
    change = check_change(run, suite, chains)
    if change.changes:
        edits = [f"adds {', '.join(change.added)}"] if change.added else []
        edits += [f"drops {', '.join(change.dropped)}"] if change.dropped else []
        raise ConfigError(
            f"suite {suite.where} {' and '.join(edits)} since run {run.name} was submitted, "
            "but --shards reruns the chosen shards as they were; resubmit without --shards to add or drop "
            "benchmarks, then select shards"
        )
    return SuiteInputs(suite, workdir).secrets()


def apply_change(run: RunDir, suite: Suite, chains: int, workdir: Path) -> tuple[SuiteChange, dict[str, Any]]:
    """Check an edited suite file against the run (:func:`check_change`), write the added benchmarks'
    folders and the new ``suite.json``; the change and every benchmark's secrets for the new links."""
    change = check_change(run, suite, chains)
    record = read_suite_record(run)
    members = {m.name: m for m in suite.members}
    wanted = {m.name: m.settings.shards for m in suite.members}
    info = run.read_info()
    inputs = SuiteInputs(suite, workdir)
    if change.changes:
        inputs.prepare(only=change.added)
        for name in change.added:
            inputs.write_member(run, members[name], info.model_copy(deep=True))
        dropped = [n for n in [*record.dropped, *change.dropped] if n not in wanted]
        new = suite_record(suite).model_copy(update={"dropped": dropped})
        write_suite_record(run, new)
        for name in change.added:
            print(f"benchmark {name}: added (chains {', '.join(map(str, range(wanted[name])))} run again)")
        for name in change.dropped:
            print(f"benchmark {name}: dropped from the suite; its files stay in {member_run(run, name).root}")
    return change, inputs.secrets()
