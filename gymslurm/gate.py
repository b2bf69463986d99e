"""``gymslurm gate``: a policy applied to a comparison, one decision per benchmark. Pure.

A policy (YAML, docs/compare.md) gives, per benchmark and as a default, the largest allowed drop
of the metric (``max_drop``, in the metric's own units), the significance level (``alpha``) and the
minimum coverage (``min_coverage``: the share of the tasks either side knows that both measured).
Each benchmark's decision is the first row of :data:`RULES` its facts match; the run's decision is
the worst of them (block, then warn, then pass), and a benchmark only one side of a suite has warns.
The exit code says it (:class:`gymslurm.exitcodes.GateExit`): 0 pass, 1 block, 2 warn, as
NeMo-Evaluator's ``nel gate`` does; an error exits 3, never 2, so a warning is never mistaken for one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gymslurm.comparison import BenchmarkComparison, ComparisonDocument
from gymslurm.errors import ConfigError
from gymslurm.exitcodes import GateExit
from gymslurm.formats import version_of, versioned_object

Verdict = Literal["pass", "warn", "block"]
SEVERITY: dict[Verdict, int] = {"pass": 0, "warn": 1, "block": 2}
EXIT: dict[Verdict, GateExit] = {"pass": GateExit.PASS, "warn": GateExit.WARN, "block": GateExit.BLOCK}
DEFAULT_MAX_DROP, DEFAULT_ALPHA, DEFAULT_MIN_COVERAGE = 0.0, 0.05, 0.9


# --- the policy ---------------------------------------------------------------------------------------


class Limits(BaseModel):
    """A policy entry: any field left out is taken from ``default`` (then from the built-in one)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_drop: float | None = Field(default=None, ge=0.0)
    alpha: float | None = Field(default=None, gt=0.0, lt=1.0)
    min_coverage: float | None = Field(default=None, ge=0.0, le=1.0)


class GatePolicy(BaseModel):
    """The policy file: ``default`` and ``benchmarks: {name: entry}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    default: Limits = Field(default_factory=Limits)
    benchmarks: dict[str, Limits] = Field(default_factory=dict)

    def limits_for(self, benchmark: str) -> Thresholds:
        """The benchmark's entry over ``default`` over the built-in defaults."""
        own = self.benchmarks.get(benchmark, Limits())

        def pick(name: str, builtin: float) -> float:
            for entry in (own, self.default):
                value = getattr(entry, name)
                if value is not None:
                    return float(value)
            return builtin

        return Thresholds(
            max_drop=pick("max_drop", DEFAULT_MAX_DROP),
            alpha=pick("alpha", DEFAULT_ALPHA),
            min_coverage=pick("min_coverage", DEFAULT_MIN_COVERAGE),
        )


@dataclass(frozen=True)
class Thresholds:
    """A benchmark's resolved limits."""

    max_drop: float
    alpha: float
    min_coverage: float


def parse_policy(text: str, where: str) -> GatePolicy:
    """The policy in ``text`` (the file ``where``), or a ConfigError naming the file and the line."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError(f"gate policy {where}{line}: not valid YAML ({problem}); fix the file") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"gate policy {where}, line 1: a policy is a mapping with `default:` and `benchmarks:` "
            "(docs/compare.md)"
        )
    try:
        return GatePolicy.model_validate(data)
    except ValidationError as error:
        problems = [
            f"line {_line_of(root, e['loc'])}: {'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}"
            for e in error.errors()
        ]
        raise ConfigError(
            f"gate policy {where} is invalid: {'; '.join(problems)} (each entry takes max_drop >= 0, "
            "0 < alpha < 1, 0 <= min_coverage <= 1; docs/compare.md)"
        ) from None


def _line_of(node: Any, loc: Sequence[int | str]) -> int:
    """The 1-based line of the YAML node at ``loc`` (or of the deepest one that exists)."""
    import yaml

    line = node.start_mark.line + 1 if node is not None else 1
    for key in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        match = next(((k, v) for k, v in node.value if k.value == str(key)), None)
        if match is None:
            break
        key_node, node = match
        line = (node if isinstance(node, yaml.ScalarNode) else key_node).start_mark.line + 1
    return line


# --- the comparison, read back ------------------------------------------------------------------------


def parse_comparison(raw: bytes, where: str) -> ComparisonDocument:
    """A saved ``gymslurm compare --json`` document: its version checked first, then every field."""
    data = versioned_object(
        raw, "comparison", where, ConfigError, "give a file `gymslurm compare --json` wrote"
    )
    try:
        return ComparisonDocument.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:5])
        raise ConfigError(f"{where} is not a valid comparison document ({problems})") from None


# --- the rule table -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What a benchmark's comparison says, measured against its limits."""

    comparable: bool  # at least one task measured on both sides
    drop_too_large: bool  # the candidate's mean fell by more than max_drop
    significant: bool  # the test's p is below alpha
    covered: bool  # coverage reaches min_coverage


ANY = None
# (comparable, drop_too_large, significant, covered) → decision, why. The first matching row decides.
RULES: tuple[tuple[tuple[bool | None, ...], Verdict, str], ...] = (
    ((False, ANY, ANY, ANY), "warn", "no task was measured on both sides: nothing to judge"),
    ((True, True, True, ANY), "block", "a significant drop larger than allowed"),
    ((True, True, False, ANY), "warn", "a drop larger than allowed, not significant"),
    ((True, False, ANY, False), "warn", "too few tasks measured on both sides to vouch for it"),
    ((True, False, ANY, True), "pass", "no drop beyond the allowed one"),
)


def decide(facts: Facts) -> tuple[Verdict, str]:
    """The first row of :data:`RULES` that ``facts`` match."""
    values = (facts.comparable, facts.drop_too_large, facts.significant, facts.covered)
    for pattern, verdict, why in RULES:
        if all(want is ANY or want == have for want, have in zip(pattern, values, strict=True)):
            return verdict, why
    raise AssertionError(f"no gate rule matches {facts}")  # the table covers every combination


def facts_of(comparison: BenchmarkComparison, limits: Thresholds) -> Facts:
    """A benchmark's facts under its limits."""
    delta, p_value, coverage = comparison.delta, comparison.p_value, comparison.tasks.coverage
    return Facts(
        comparable=comparison.tasks.paired > 0 and delta is not None,
        drop_too_large=delta is not None and -delta > limits.max_drop,
        significant=p_value is not None and p_value < limits.alpha,
        covered=coverage is not None and coverage >= limits.min_coverage,
    )


class BenchmarkDecision(BaseModel):
    """One benchmark's decision, its reason and the figures it rests on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    benchmark: str
    decision: Verdict
    reason: str
    max_drop: float | None
    alpha: float | None
    min_coverage: float | None
    delta: float | None = None
    p_value: float | None = None
    coverage: float | None = None


class GateDocument(BaseModel):
    """``gymslurm gate --json``: the ``gate`` format (``formats.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: int
    decision: Verdict
    exit_code: int
    baseline: str
    candidate: str
    benchmarks: list[BenchmarkDecision]


def apply_policy(comparison: ComparisonDocument, policy: GatePolicy) -> GateDocument:
    """Every benchmark's decision and the run's (the worst of them)."""
    decisions = []
    for entry in comparison.benchmarks:
        limits = policy.limits_for(entry.benchmark)
        verdict, why = decide(facts_of(entry, limits))
        decisions.append(
            BenchmarkDecision(
                benchmark=entry.benchmark,
                decision=verdict,
                reason=_reason(why, entry, limits),
                max_drop=limits.max_drop,
                alpha=limits.alpha,
                min_coverage=limits.min_coverage,
                delta=entry.delta,
                p_value=entry.p_value,
                coverage=entry.tasks.coverage,
            )
        )
    for missing in comparison.unpaired:
        decisions.append(
            BenchmarkDecision(
                benchmark=missing.benchmark,
                decision="warn",
                reason=f"only the {missing.side} has this benchmark: nothing to judge",
                max_drop=None,
                alpha=None,
                min_coverage=None,
            )
        )
    overall: Verdict = max((d.decision for d in decisions), key=SEVERITY.__getitem__, default="warn")
    return GateDocument(
        format_version=version_of("gate"),
        decision=overall,
        exit_code=int(EXIT[overall]),
        baseline=comparison.baseline,
        candidate=comparison.candidate,
        benchmarks=decisions,
    )


def _reason(why: str, entry: BenchmarkComparison, limits: Thresholds) -> str:
    """``why`` with the figures: the change against max_drop, p against alpha, coverage."""
    if entry.delta is None:
        return why
    p = "-" if entry.p_value is None else f"{entry.p_value:.3g}"
    coverage = entry.tasks.coverage or 0.0
    return (
        f"{why}: delta {entry.delta:+.4f} (max_drop {limits.max_drop:g}), p {p} ({entry.test}, alpha "
        f"{limits.alpha:g}), coverage {coverage:.1%} of tasks (min {limits.min_coverage:.0%})"
    )
