"""Aggregation's inputs: paths and globs resolved to one :class:`ShardSource` per rollout file.

Aliases of one file count once; a run's companions live beside the resolved target (a legacy run's
may live only beside its alias, and two competing sets are an error, spec 000); and an output that
is an input, a companion or an established run is refused before a byte is written
(:func:`check_output`, also used by reverification).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gymslurm.errors import ConfigError, StoreError
from gymslurm.store.paths import COMPANION_SUFFIXES as PATH_SUFFIXES
from gymslurm.store.paths import companion_path as companion
from gymslurm.store.paths import companion_refusal

_GLOB_CHARS = frozenset("*?[")

# Companion suffixes of a run (store/paths.py). RECOVERY companions make a path an established run.
COMPANION_SUFFIXES = tuple(PATH_SUFFIXES.values())
RECOVERY_SUFFIXES = (
    "_manifest.json",
    "_materialized_inputs.jsonl",
    "_failures.jsonl",
    "_reservations.bin",
    "_attempts.jsonl",
)
_JSONL_COMPANIONS = tuple(s for s in COMPANION_SUFFIXES if s.endswith(".jsonl"))


# --- paths ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardSource:
    """One rollout file to aggregate: its resolved target, every spelling given, and its companions."""

    results: Path
    spellings: tuple[Path, ...]
    companion_base: Path  # the path whose stem names the companions (the target, or a legacy alias)

    def companion(self, suffix: str) -> Path:
        return companion(self.companion_base, suffix)

    @property
    def has_manifest(self) -> bool:
        return self.companion("_manifest.json").exists()


def expand_inputs(patterns: Sequence[str]) -> list[Path]:
    """Paths and globs → paths, in the order given; a glob skips companion files of its matches."""
    found: list[Path] = []
    for pattern in patterns:
        if _GLOB_CHARS & set(pattern):
            matches = [Path(m) for m in sorted(glob.glob(os.path.expanduser(pattern)))]
            matches = [m for m in matches if not m.name.endswith(_JSONL_COMPANIONS) and m.is_file()]
            if not matches:
                raise ConfigError(f"the input glob {pattern!r} matches no rollout file; check the pattern")
            found.extend(matches)
        else:
            found.append(Path(pattern).expanduser())
    if not found:
        raise ConfigError(
            "no inputs given: pass shard outputs as +input_jsonl_fpaths=[a.jsonl,b.jsonl] or a glob"
        )
    return found


def resolve_inputs(paths: Iterable[Path]) -> list[ShardSource]:
    """Resolve symlinks, count aliases of one file once, and locate each file's companions."""
    by_target: dict[Path, list[Path]] = {}
    for path in paths:
        if path.name.endswith(_JSONL_COMPANIONS):
            raise ConfigError(
                f"{path} is a companion file of a run, not its rollout output; pass the main output "
                f"(<stem>.jsonl) instead"
            )
        target = path.resolve()
        if not target.is_file():
            raise ConfigError(f"input {path} does not exist (resolved to {target}); check the path")
        by_target.setdefault(target, []).append(path.absolute())
    return [_locate_companions(target, tuple(spellings)) for target, spellings in by_target.items()]


def _locate_companions(target: Path, spellings: tuple[Path, ...]) -> ShardSource:
    """Companions live beside the resolved target; a legacy run's may live only beside its alias.

    Two sets (beside the target and beside an alias, or beside two aliases) compete: which one holds
    the run's history cannot be told, so that is an error (000), never a silent choice.
    """
    alias_bases = {s for s in spellings if s != target and _own_companions(s, target)}
    if _has_any(target, RECOVERY_SUFFIXES):
        alias_bases.add(target)
    if not alias_bases:
        return ShardSource(target, spellings, target)
    if len(alias_bases) > 1:
        raise StoreError(
            f"{target} has competing companion sets beside {sorted(map(str, alias_bases))}; keep exactly "
            "one set of a run's files together (beside the resolved output) and aggregate again"
        )
    if target in alias_bases:
        return ShardSource(target, spellings, target)
    alias = next(iter(alias_bases))
    if companion(alias, "_manifest.json").exists():
        raise StoreError(
            f"the manifest of {target} sits beside the symlink {alias}, not beside its target; move the "
            "run's files together beside the resolved output and aggregate again"
        )
    return ShardSource(target, spellings, alias)


def _has_any(output: Path, suffixes: Iterable[str]) -> bool:
    return any(companion(output, suffix).exists() for suffix in suffixes)


def _own_companions(alias: Path, target: Path) -> bool:
    """Whether recovery companions exist beside ``alias`` that are not the target's own (via links)."""
    return any(
        companion(alias, suffix).exists()
        and companion(alias, suffix).resolve() != companion(target, suffix).resolve()
        for suffix in RECOVERY_SUFFIXES
    )


def check_output(
    output: Path, sources: Sequence[ShardSource], *, what: str = "the merged output", source: str = "input"
) -> None:
    """Refuse, before writing a byte, an output that is an input, a companion, or an established run.

    Both spellings are checked: the output as given and its resolved target. ``what`` and ``source``
    name the output and its inputs in the message (reverification writes a reverified output of a
    source run, not a merged output of inputs).
    """
    target = output.resolve()
    protected: dict[Path, Path] = {}
    for shard in sources:
        protected[shard.results] = shard.results
        for suffix in COMPANION_SUFFIXES:
            protected[shard.companion(suffix).resolve()] = shard.results
    if target in protected:
        raise ConfigError(
            f"{what} {output} is (or is a file of) the {source} {protected[target]}; writing it would "
            "destroy that run's output. Choose a new output path"
        )
    if refusal := companion_refusal(output, what):  # any other run's file: the collector's rule too
        raise ConfigError(refusal)
    for base in {output.absolute(), target}:
        present = [companion(base, s) for s in RECOVERY_SUFFIXES if companion(base, s).exists()]
        if present:
            raise ConfigError(
                f"{what} {output} belongs to an established run: {', '.join(map(str, present))} "
                "exist beside it. Replacing its output would leave that history behind; choose a new "
                "output path (or move that run away first)"
            )
