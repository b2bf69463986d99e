"""A suite: many benchmarks evaluated on one model, in one run, against one shared model server.

A suite is ``configs/suites/<name>.yaml`` (or a path, or ``gymslurm submit b1 b2 b3``): a list of
benchmarks, each a benchmark as today (``configs/benchmarks/<name>.yaml``) with its own overrides
(dataset, repeats, shards, Hydra overrides for its Environment Servers and metrics) and an optional
weight, and one shared ``stack`` (the model server(s)) started once per link. Everything is composed
and validated here, before anything is written: a mistake names the suite file and its line.

Each benchmark becomes a whole benchmark config of its own (:class:`Member`): its servers are the
suite's stack followed by its own servers not named in the stack, its ``slurm`` section the suite's
(the link belongs to the suite). The suite link itself runs with :func:`chain_settings`: a benchmark
config whose servers are the stack and whose shards are the suite's chains, so every launcher
part that works on a run (status, cancel, pause, inject, resubmit, budgets, notifications) works
on a suite run unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from omegaconf import OmegaConf
from pydantic import Field, ValidationError, field_validator

from gymslurm.errors import ConfigError
from gymslurm.launcher.settings import (
    BenchmarkSettings,
    ServerSettings,
    compose_benchmark,
    validate,
)
from gymslurm.launcher.settings_sections import Strict
from gymslurm.resources import configs_dir

SUITE_DATASET = "(a suite: each benchmark has its own dataset)"  # the chain settings' dataset
SUITE_FILE = "suite.json"


def _slug(value: str) -> str:
    if not value or not all(c.isalnum() or c in "-_." for c in value) or value.startswith("."):
        raise ValueError(f"{value!r} must be a name of letters, digits, '-', '_' or '.'")
    return value


class SuiteBenchmark(Strict):
    """One benchmark of a suite: which one, under which name, and what differs from its own file."""

    name: str | None = None  # the sub-run's name (default: the benchmark's); unique in the suite
    benchmark: str  # configs/benchmarks/<benchmark>.yaml, or a path to a YAML file
    overrides: list[str] = Field(default_factory=list)  # Hydra overrides of that benchmark
    dataset: str | None = None
    repeats: int | None = Field(default=None, ge=1)  # +num_repeats of its collector
    shards: int | None = Field(default=None, ge=1)
    weight: float = Field(default=1.0, gt=0)  # its share of the model server's load
    metric: str = "reward"  # the row field whose per-task mean is its headline

    @property
    def label(self) -> str:
        """The benchmark's name in the suite (the sub-run's folder)."""
        return self.name or Path(self.benchmark).stem

    @field_validator("name")
    @classmethod
    def _name_is_slug(cls, value: str | None) -> str | None:
        return None if value is None else _slug(value)


class SuiteSettings(Strict):
    """A suite file, validated (the benchmarks themselves are composed by :func:`load_suite`)."""

    name: str
    benchmarks: list[SuiteBenchmark] = Field(min_length=1)
    stack: list[ServerSettings] = Field(default_factory=list)  # the shared servers, started once a link
    order: Literal["concurrent", "sequential"] = "concurrent"
    shards: int | None = Field(default=None, ge=1)  # every benchmark's, unless it sets its own
    run_root: str = "gymslurm_runs"
    backend: Literal["auto", "slurm", "local"] = "auto"
    slurm: dict[str, Any] = Field(default_factory=dict)  # the link's slurm section (every benchmark's)
    aggregation: dict[str, Any] = Field(default_factory=dict)  # the suite aggregation job's (time)
    budget: dict[str, Any] = Field(default_factory=dict)
    report: dict[str, Any] = Field(default_factory=dict)
    notify: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name_is_slug(cls, value: str) -> str:
        return _slug(value)

    def model_post_init(self, _context: Any) -> None:
        """Benchmark names are unique (each is a folder of the run)."""
        labels = [b.label for b in self.benchmarks]
        if twice := sorted({label for label in labels if labels.count(label) > 1}):
            raise ValueError(f"benchmarks: two benchmarks are named {twice[0]!r}; give one a `name:`")


@dataclass(frozen=True)
class Member:
    """One benchmark of a suite, composed: its settings, the composed dict (secrets in), its entry."""

    entry: SuiteBenchmark
    settings: BenchmarkSettings
    data: dict[str, Any]

    @property
    def name(self) -> str:
        """The benchmark's name in the suite."""
        return self.entry.label


@dataclass(frozen=True)
class Suite:
    """A composed suite: the suite file's settings, where it came from, and every benchmark composed."""

    settings: SuiteSettings
    where: str
    members: list[Member]
    overrides: tuple[str, ...] = ()  # the command line's, applied to every benchmark and the links

    @property
    def chains(self) -> int:
        """How many link chains the suite runs: its largest benchmark's shards (:mod:`suite_rules`)."""
        return max(m.settings.shards for m in self.members)


def suite_path(name: str) -> Path | None:
    """The suite file of ``name`` (``configs/suites/<name>.yaml`` or a path), None when there is none."""
    given = Path(name)
    if given.suffix in (".yaml", ".yml"):
        return given.resolve() if given.is_file() else None
    path = configs_dir() / "suites" / f"{name}.yaml"
    return path if path.is_file() else None


def is_suite_file(path: Path) -> bool:
    """Whether a YAML file is a suite (it has a ``benchmarks:`` list) rather than a benchmark."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list)


def key_line(text: str, loc: tuple[str | int, ...]) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (keys and list indices), or of its deepest parent."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if k.value == part), None)
            key = next((k for k, _ in node.value if k.value == part), None)
            line = key.start_mark.line + 1 if key is not None else line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
            line = child.start_mark.line + 1
        if child is None:
            break
        node = child
    return line


def _invalid(where: Path | str, text: str, loc: tuple[str | int, ...], problem: str) -> ConfigError:
    line = key_line(text, loc)
    at = f"{where}:{line}" if line else str(where)
    dotted = ".".join(str(p) for p in loc) or "(top)"
    return ConfigError(f"suite {at}: {dotted}: {problem}")


def parse_suite(text: str, where: Path | str, default_name: str) -> SuiteSettings:
    """A suite file's text, validated; an error names the file, the line and the key, and what to do."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"suite {where} is not YAML: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"suite {where} is not a mapping with a `benchmarks:` list")
    data.setdefault("name", default_name)
    try:
        return SuiteSettings.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        loc = tuple(p for p in first["loc"] if not str(p).startswith("function-after"))
        raise _invalid(where, text, loc, first["msg"].removeprefix("Value error, ")) from None


def member_data(suite: SuiteSettings, entry: SuiteBenchmark, composed: dict[str, Any]) -> dict[str, Any]:
    """A benchmark's composed config made a member of ``suite`` (pure): its name, dataset, repeats,
    shards, the suite's run root, backend and slurm section, and the stack in front of its own servers
    (a server of its own named as one of the stack's is the stack's: started once, shared)."""
    data = dict(composed)
    data["name"] = entry.label
    if entry.dataset is not None:
        data["dataset"] = entry.dataset
    shards = entry.shards or suite.shards
    if shards is not None:
        data["shards"] = shards
    if entry.repeats is not None:
        collector = dict(data.get("collector") or {})
        collector["overrides"] = [*collector.get("overrides", []), f"+num_repeats={entry.repeats}"]
        data["collector"] = collector
    data["run_root"], data["backend"] = suite.run_root, suite.backend
    data["slurm"] = {**(data.get("slurm") or {}), **suite.slurm}
    shared = [s.model_dump(exclude_defaults=True) | {"name": s.name} for s in suite.stack]
    names = {s.name for s in suite.stack}
    own = [s for s in data.get("servers") or [] if isinstance(s, dict) and s.get("name", "env") not in names]
    data["servers"] = [*shared, *own]
    for key in ("budget", "notify", "report"):  # the suite's: one budget, one notifier, one report
        data.pop(key, None)
    return data


# the keys of a suite link's own settings a top-level override reaches (besides every benchmark)
CHAIN_KEYS = frozenset({"slurm", "aggregation", "budget", "report", "notify", "run_root", "backend"})


def chain_data(suite: SuiteSettings, chains: int) -> dict[str, Any]:
    """The benchmark config the suite's links run with (pure): the stack, the suite's chains, slurm,
    budget, notifications and report, no dataset of its own."""
    return {
        "name": suite.name,
        "dataset": SUITE_DATASET,
        "shards": chains,
        "run_root": suite.run_root,
        "backend": suite.backend,
        "servers": [s.model_dump(exclude_defaults=True) | {"name": s.name} for s in suite.stack],
        "slurm": suite.slurm,
        "aggregation": suite.aggregation,
        "budget": suite.budget,
        "report": suite.report,
        "notify": suite.notify,
    }


def load_suite(name: str, overrides: list[str]) -> Suite:
    """Compose and validate a suite and each of its benchmarks (``overrides`` apply to every benchmark)."""
    path = suite_path(name)
    if path is None:
        known = sorted(p.stem for p in (configs_dir() / "suites").glob("*.yaml"))
        raise ConfigError(f"unknown suite {name!r}: no configs/suites/{name}.yaml. Known: {', '.join(known)}")
    text = path.read_text()
    settings = parse_suite(text, path, path.stem)
    members = []
    for index, entry in enumerate(settings.benchmarks):
        try:
            composed = compose_benchmark(entry.benchmark, [*entry.overrides, *overrides])
            data = member_data(settings, entry, composed)
            member_settings = validate(data, f"{entry.benchmark} (as {entry.label!r} in suite {path})")
        except ConfigError as error:
            raise _invalid(path, text, ("benchmarks", index), str(error)) from None
        members.append(Member(entry, member_settings, data))
    return Suite(settings, str(path), members, tuple(overrides))


def adhoc_suite(benchmarks: list[str], overrides: list[str]) -> Suite:
    """``gymslurm submit b1 b2 b3``: a suite of those benchmarks sharing the servers they all declare
    identically (the model server of benchmarks written for one model), named after them."""
    composed = [compose_benchmark(b, overrides) for b in benchmarks]
    first = [s for s in composed[0].get("servers") or [] if isinstance(s, dict)]
    stack = [s for s in first if all(s in (c.get("servers") or []) for c in composed[1:])]
    name = "suite-" + "-".join(Path(b).stem for b in benchmarks)
    text = yaml.safe_dump(
        {"name": name[:80], "stack": stack, "benchmarks": [{"benchmark": b} for b in benchmarks]}
    )
    settings = parse_suite(text, "(the benchmarks on the command line)", name)
    members = []
    for entry, data in zip(settings.benchmarks, composed, strict=True):
        merged = member_data(settings, entry, data)
        members.append(Member(entry, validate(merged, entry.benchmark), merged))
    return Suite(settings, "(command line)", members, tuple(overrides))


def chain_settings(suite: Suite, chains: int | None = None) -> tuple[BenchmarkSettings, dict[str, Any]]:
    """The settings the suite's links, scripts and views run with, and their composed dict
    (``chains``: a run's, kept when benchmarks are added or dropped)."""
    data = chain_data(suite.settings, suite.chains if chains is None else chains)
    for override in suite.overrides:  # slurm.time=..., budget.gpu_hours=...: the links' too
        key, _, value = override.lstrip("+").partition("=")
        if key.split(".")[0] in CHAIN_KEYS and "=" in override:
            conf = OmegaConf.create(data)
            OmegaConf.update(conf, key, yaml.safe_load(value) if value else None, force_add=True)
            data = OmegaConf.to_container(conf, resolve=False)  # type: ignore[assignment]
    return validate(data, f"suite {suite.where}"), data


ACROSS_CLUSTERS = (
    "shards across clusters are not for suites: a suite link runs every benchmark's shard of its "
    "chain against one model server, and each benchmark's run folder (its status, resume and "
    "merge) is kept on one cluster. Submit the suite to one cluster (`slurm.cluster: NAME` in "
    "the suite's `slurm:`), or one suite run per cluster"
)


def _file_line(path: Path, loc: tuple[str | int, ...]) -> str:
    """``path:line`` of the YAML node at ``loc`` in a user's file (just ``path`` when unreadable)."""
    try:
        line = key_line(path.read_text(), loc)
    except OSError:
        line = None
    return f"{path}:{line}" if line else str(path)


def across_clusters_problem(suite: Suite) -> str | None:
    """Why a suite asks for shards across clusters (``slurm.clusters``), naming where: the suite
    file's line, the command line, or the line of a benchmark's own file; None when it does not."""
    where = Path(suite.where)
    if "clusters" in suite.settings.slurm and suite.settings.slurm["clusters"] is not None:
        return f"suite {_file_line(where, ('slurm', 'clusters'))}: slurm.clusters: {ACROSS_CLUSTERS}"
    if any(o.lstrip("+").startswith("slurm.clusters=") and not o.endswith("=null") for o in suite.overrides):
        return f"slurm.clusters on the command line (suite {suite.where}): {ACROSS_CLUSTERS}"
    from gymslurm.launcher.settings import benchmark_path

    for index, member in enumerate(suite.members):
        if member.settings.slurm.clusters is not None:
            own = _file_line(benchmark_path(member.entry.benchmark), ("slurm", "clusters"))
            entry = _file_line(where, ("benchmarks", index)) if where.is_file() else suite.where
            return (
                f"suite {entry}: benchmark {member.name!r} sets slurm.clusters in {own}: {ACROSS_CLUSTERS} "
                "(a suite's links take the suite's `slurm:` section: remove it from the benchmark's file)"
            )
    return None


def own_cluster_problem(suite: Suite, links_cluster: str | None) -> str | None:
    """Why a benchmark of the suite would run on another cluster than the suite's links
    (``links_cluster``: ``slurm.cluster`` of :func:`chain_settings`), naming its file's line (or
    the suite's line of its overrides); None when none does. Its own ``slurm.cluster`` was ignored
    silently: a suite link runs every benchmark's shard of its chain in one allocation."""
    from gymslurm.launcher.settings import benchmark_path

    where = Path(suite.where)
    for index, member in enumerate(suite.members):
        own = member.settings.slurm.cluster
        if own == links_cluster:
            continue
        entry = _file_line(where, ("benchmarks", index)) if where.is_file() else suite.where
        path = benchmark_path(member.entry.benchmark)
        source = f"in {_file_line(path, ('slurm', 'cluster'))}" if _sets_cluster(path) else "in its overrides"
        runs_on = f"cluster {links_cluster!r}" if links_cluster else "the default cluster"
        return (
            f"suite {entry}: benchmark {member.name!r} sets slurm.cluster: {own} {source}, but a "
            f"suite's links run every benchmark on the suite's cluster ({runs_on}: one allocation, "
            f"one model server). To run the suite on {own!r}, set `slurm.cluster: {own}` in the "
            f"suite's `slurm:` (or `slurm.cluster={own}` on the command line); else remove it from "
            "the benchmark's file"
        )
    return None


def _sets_cluster(path: Path) -> bool:
    """Whether a benchmark's own file names ``slurm.cluster`` (else it came from an override)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False
    slurm = data.get("slurm") if isinstance(data, dict) else None
    return isinstance(slurm, dict) and slurm.get("cluster") is not None
