"""``gymslurm aggregate``: merge shard outputs into one selected-result projection, plus metrics.

Arguments are overrides in NeMo Gym's spelling (``+key=value``; ``key=value`` works too), like
``collect``. Plain arguments (no ``=``) are input paths or globs. The overrides parser here is shared
by ``health`` and ``reverify``: values ``true``/``false`` are booleans, ``[a,b]`` is a list.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gymslurm.exitcodes import ExitCode

USAGE = """usage: gymslurm aggregate [INPUT...] OVERRIDE...

Merge shard outputs into one selected-result projection (each rollout's selected completed result,
once), with metrics and an aggregate coverage. Inputs are never modified.

  INPUT or +input_jsonl_fpaths=[A,B]     shard outputs (paths or globs; symlinks resolve to their run)
  +output_jsonl_fpath=PATH                the merged file (refused if it is an input or an established run)
  +merge_shards=false                     write only <stem>_aggregate_metrics.json and
                                          <stem>_aggregate_coverage.json (never <stem>_coverage.json)
  +environment_server_url=URL             take reward metrics from its POST /aggregate_metrics
  +count_failure_classes_as_zero=[K,...]  score selected failures of these kinds/classes as 0 (skipped too)
  +count_missing_rollouts_as_zero=true    impute 0 for rollouts without an outcome (metrics only)

Docs: docs/aggregation.md. Exit codes: 0 written, 2 refused or unreadable input (nothing written)."""

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


def parse_value(raw: str) -> Any:
    """``true``/``false`` → bool, ``[a,b]`` → list of str, anything else stays a string."""
    text = raw.strip()
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    if text.startswith("[") and text.endswith("]"):
        return [item.strip().strip("'\"") for item in text[1:-1].split(",") if item.strip()]
    return text.strip("'\"")


def parse_overrides(argv: list[str], known: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Split ``argv`` into known ``+key=value`` settings and plain arguments; unknown keys are errors."""
    from gymslurm.errors import ConfigError

    settings: dict[str, Any] = {}
    plain: list[str] = []
    for item in argv:
        if "=" not in item:
            plain.append(item)
            continue
        key, _, value = item.lstrip("+~").partition("=")
        if key not in known:
            names = ", ".join(f"+{name}" for name in known)
            raise ConfigError(f"unknown setting {item!r}; this command takes {names} (see --help)")
        settings[key] = parse_value(value)
    return settings, plain


def as_bool(settings: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """A boolean setting; a non-boolean value is an error naming the key."""
    from gymslurm.errors import ConfigError

    value = settings.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"+{key} must be true or false, got {value!r}")
    return value


def as_list(value: Any) -> list[str]:
    """A list setting given as ``[a,b]`` or a single value."""
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


KNOWN = {
    "input_jsonl_fpaths": "shard outputs",
    "input_jsonl_fpath": "one shard output or a glob",
    "output_jsonl_fpath": "the merged output",
    "merge_shards": "false: metrics only",
    "environment_server_url": "metrics endpoint",
    "count_failure_classes_as_zero": "kinds scored as zero",
    "count_missing_rollouts_as_zero": "impute zeros",
    "aggregate_metrics_timeout_s": "seconds",
}


def main(argv: list[str]) -> int:
    """Run ``gymslurm aggregate``; return its exit code."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE)
        return ExitCode.DONE
    from gymslurm.aggregate import AggregateOptions, aggregate
    from gymslurm.errors import ConfigError
    from gymslurm.metrics import ScoringPolicy

    settings, plain = parse_overrides(argv, KNOWN)
    inputs = plain + as_list(settings.get("input_jsonl_fpaths")) + as_list(settings.get("input_jsonl_fpath"))
    output = settings.get("output_jsonl_fpath")
    if not output:
        raise ConfigError("+output_jsonl_fpath=PATH is required: where the merged output (and metrics) go")
    options = AggregateOptions(
        inputs=tuple(inputs),
        output=Path(str(output)).expanduser(),
        merge_shards=as_bool(settings, "merge_shards", True),
        scoring=ScoringPolicy(
            count_failure_classes_as_zero=frozenset(as_list(settings.get("count_failure_classes_as_zero"))),
            count_missing_rollouts_as_zero=as_bool(settings, "count_missing_rollouts_as_zero"),
        ),
        environment_server_url=settings.get("environment_server_url") or None,
        timeout_s=float(settings.get("aggregate_metrics_timeout_s", 60.0)),
    )
    from gymslurm.clock import utc_now

    result = aggregate(options, written_at=utc_now())
    for warning in result.warnings:
        print(f"gymslurm aggregate: warning: {warning}", file=sys.stderr)
    _report(result, options)
    return ExitCode.DONE


def _report(result: Any, options: Any) -> None:
    cov = result.coverage
    shards = len(cov["shards"])
    if options.merge_shards:
        print(f"merged {result.merged_rows} selected results from {shards} shard(s) into {options.output}")
    else:
        print(f"metrics only (+merge_shards=false) over {shards} shard(s); no merged file written")
    if cov["inventory_known"]:
        print(
            f"coverage: {cov['successful']} of {cov['expected']} completed (measured {cov['measured']}, "
            f"masked {cov['masked']}, unscored {cov['unscored']}), failed {cov['failed']}, omitted "
            f"{cov['intentionally_omitted']}, not started {cov['not_started']}, missing {cov['missing']}, "
            f"retryable {cov['retryable']}; complete={cov['complete']}"
        )
    else:
        print("coverage: not claimed (legacy shards without a manifest have no known inventory)")
    mean = result.metrics.get("mean/reward")
    print(f"metrics source: {result.metrics_source}; mean/reward: {mean if mean is not None else 'n/a'}")
