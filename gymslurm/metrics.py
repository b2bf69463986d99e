"""Metrics over selected rollouts: the ``coverage/*`` and ``retries/*`` counts and the mean reward. Pure.

Collection and aggregation export the same counts (spec 000, "coverage metrics"). One
:class:`MetricsAccumulator` is fed one shard at a time: every logical rollout of a manifest-backed
shard as its selected :class:`RolloutState` (so an older attempt can never count twice), and every
observed row of a legacy shard (no manifest: line by line, no claimed inventory). It never reads a
file; the store and ``aggregate.py`` do the reading.

Scoring policies (explicit, both off by default):

- ``count_failure_classes_as_zero``: a selected failure whose canonical ``failure_kind``, routing
  class or legacy class is listed scores a zero, counted once however many of its names match. An
  explicit ``skipped`` entry also scores a *terminal* omission that carries a ``skipped`` failure
  payload; the rollout stays intentionally omitted. A bare omission (no payload) is never scored.
- ``count_missing_rollouts_as_zero``: a rollout with no outcome for its newest reservation
  (``missing``) or no reservation at all (``not_started``) adds a zero to the reward metrics only,
  reported as ``scoring/imputed``. It is never written to results and the rollout stays unfinished.
  Known failures need the policy above; unscored completions and omissions are not missing.

Each rollout contributes to at most one of measured / counted-as-zero / imputed, so no count can
exceed ``expected``. Masked results are completed but never enter the mean reward (they are not
measurements); ``scored`` still counts them when they carry a numeric reward (README reading 9).

Trade-off: the accumulator keeps sums and counters only (O(classes) memory), so a million rows cost
a million small method calls; per-row work is a few attribute reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gymslurm.records import ROUTING_CLASS_UNSPECIFIED
from gymslurm.selection import Disposition, RolloutState, SavedOutcome, result_disposition

SKIPPED = "skipped"
METRICS_SOURCE_OWN = "gymslurm"

_INVENTORY_KEYS = (
    "coverage/omitted",
    "coverage/not_started",
    "coverage/missing",
    "coverage/missing_outcomes",
    "coverage/not_scored",
    "coverage/expected",
    "retries/at_cap",
)


@dataclass(frozen=True)
class ScoringPolicy:
    """The explicit reporting choices that add zeros to the reward metrics."""

    count_failure_classes_as_zero: frozenset[str] = frozenset()
    count_missing_rollouts_as_zero: bool = False


def outcome_names(outcome: SavedOutcome) -> set[str]:
    """Every name a failure answers to: canonical kind, routing class and legacy class."""
    names = (outcome.failure_kind, outcome.failure_class, outcome.legacy_class)
    return {name for name in names if name}


def counts_as_zero(state: RolloutState, policy: ScoringPolicy) -> bool:
    """Whether a selected failure (or a terminal ``skipped`` omission) scores a zero under the policy."""
    selected = state.selected
    classes = policy.count_failure_classes_as_zero
    if selected is None or not classes:
        return False
    if state.disposition is Disposition.FAILED:
        return bool(outcome_names(selected) & classes)
    if state.disposition is Disposition.OMITTED:
        return SKIPPED in classes and selected.terminal and SKIPPED in outcome_names(selected)
    return False


def is_imputed(state: RolloutState, policy: ScoringPolicy) -> bool:
    """Whether a rollout without an outcome for its newest execution adds an imputed zero."""
    return policy.count_missing_rollouts_as_zero and state.disposition in (
        Disposition.MISSING,
        Disposition.NOT_STARTED,
    )


@dataclass
class MetricsAccumulator:
    """Sums and counters over shards; :meth:`metrics` turns them into flat metric keys."""

    policy: ScoringPolicy = field(default_factory=ScoringPolicy)
    dispositions: Counter[Disposition] = field(default_factory=Counter)
    failed_by_class: Counter[str] = field(default_factory=Counter)
    scored: int = 0
    counted_zero: int = 0
    imputed: int = 0
    reward_sum: float = 0.0
    reward_count: int = 0
    at_cap: int = 0
    historical_failed_attempts: int = 0
    max_attempts: set[int] = field(default_factory=set)
    legacy_shards: int = 0
    legacy_row_capped: int = 0  # legacy rollouts with their own per-row limit (their at_cap is known)
    shards: int = 0

    def add_shard(self, *, max_rollout_attempts: int | None, historical_failed_attempts: int) -> None:
        """Record one shard's saved limit (None for a legacy shard) and its historical failure lines."""
        self.shards += 1
        self.historical_failed_attempts += historical_failed_attempts
        if max_rollout_attempts is None:
            self.legacy_shards += 1
        else:
            self.max_attempts.add(max_rollout_attempts)

    def merge(self, other: MetricsAccumulator) -> None:
        """Add another accumulator's counts (a shard read elsewhere, under the same policy)."""
        self.dispositions.update(other.dispositions)
        self.failed_by_class.update(other.failed_by_class)
        self.scored += other.scored
        self.counted_zero += other.counted_zero
        self.imputed += other.imputed
        self.reward_sum += other.reward_sum
        self.reward_count += other.reward_count
        self.at_cap += other.at_cap
        self.historical_failed_attempts += other.historical_failed_attempts
        self.max_attempts |= other.max_attempts
        self.legacy_shards += other.legacy_shards
        self.legacy_row_capped += other.legacy_row_capped
        self.shards += other.shards

    def add_state(self, state: RolloutState) -> None:
        """Count one logical rollout of a manifest-backed shard by its selected state."""
        disposition = state.disposition
        self.dispositions[disposition] += 1
        self.at_cap += state.exhausted
        selected = state.selected
        if disposition is Disposition.FAILED and selected is not None:
            self.failed_by_class[failure_class_of(selected)] += 1
        self._score(disposition, selected, state)

    def add_legacy_caps(self, capped: int, at_cap: int) -> None:
        """A legacy shard's rollouts with a per-row limit, and those that spent it (000)."""
        self.legacy_row_capped += capped
        self.at_cap += at_cap

    def add_legacy_outcome(self, outcome: SavedOutcome) -> None:
        """Count one observed row of a legacy shard (no selection, no inventory)."""
        if outcome.kind == "result":
            disposition = result_disposition(outcome)
        elif outcome.kind == "failure":
            disposition = Disposition.FAILED
            self.failed_by_class[failure_class_of(outcome)] += 1
        else:
            disposition = Disposition.OMITTED
        self.dispositions[disposition] += 1
        state = RolloutState(disposition, outcome, 0, pending=False, exhausted=False)
        self._score(disposition, outcome, state)

    def _score(self, disposition: Disposition, selected: SavedOutcome | None, state: RolloutState) -> None:
        if disposition is Disposition.MEASURED and selected is not None and selected.reward is not None:
            self.scored += 1
            self.reward_sum += selected.reward
            self.reward_count += 1
        elif disposition is Disposition.MASKED and selected is not None and selected.reward is not None:
            self.scored += 1
        elif counts_as_zero(state, self.policy):
            self.scored += 1
            self.counted_zero += 1
            self.reward_count += 1
        elif is_imputed(state, self.policy):
            self.imputed += 1
            self.reward_count += 1

    @property
    def inventory_known(self) -> bool:
        """Inventory categories are known only when every shard has validated (manifest) history."""
        return self.legacy_shards == 0

    def metrics(self) -> dict[str, float | int]:
        """The flat metric keys of docs/aggregation.md (inventory keys omitted for legacy input)."""
        d = self.dispositions
        expected = sum(d.values())
        out: dict[str, float | int] = {
            "coverage/measured": d[Disposition.MEASURED],
            "coverage/masked": d[Disposition.MASKED],
            "coverage/unscored": d[Disposition.UNSCORED],
            "coverage/failed": d[Disposition.FAILED],
            "coverage/omitted": d[Disposition.OMITTED],
            "coverage/not_started": d[Disposition.NOT_STARTED],
            "coverage/missing": d[Disposition.MISSING],
            "coverage/missing_outcomes": d[Disposition.MISSING],
            "coverage/expected": expected,
            "coverage/not_scored": expected - self.scored,
            "coverage/scored": self.scored,
            "retries/at_cap": self.at_cap,
            "retries/attempts": self.historical_failed_attempts,
            "scoring/counted_failures_as_zero": self.counted_zero,
            "scoring/imputed": self.imputed,
        }
        for name, count in sorted(self.failed_by_class.items()):
            out[f"coverage/failed/{name}"] = count
        if len(self.max_attempts) == 1 and not self.legacy_shards:
            out["retries/max_attempts"] = next(iter(self.max_attempts))
        if not self.inventory_known:
            for key in _INVENTORY_KEYS:
                if key != "retries/at_cap" or not self.legacy_row_capped:  # per-row caps: known (000)
                    out.pop(key, None)
        if self.reward_count:
            out["mean/reward"] = self.reward_sum / self.reward_count
        if d[Disposition.MEASURED]:
            out["mean/reward_measured"] = self.reward_sum / d[Disposition.MEASURED]
        return out


def failure_class_of(outcome: SavedOutcome) -> str:
    """The class a failure is grouped under: its routing class, else its kind, else the generic label."""
    return outcome.failure_class or outcome.failure_kind or ROUTING_CLASS_UNSPECIFIED


def compute_metrics(
    states: Iterable[RolloutState],
    *,
    max_rollout_attempts: int,
    historical_failed_attempts: int = 0,
    policy: ScoringPolicy | None = None,
) -> dict[str, float | int]:
    """Metrics of one manifest-backed run (what the collector exports at the end of collection)."""
    accumulator = MetricsAccumulator(policy=policy or ScoringPolicy())
    accumulator.add_shard(
        max_rollout_attempts=max_rollout_attempts, historical_failed_attempts=historical_failed_attempts
    )
    for state in states:
        accumulator.add_state(state)
    return accumulator.metrics()
