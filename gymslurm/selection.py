"""Selection (``latest_allocated``), the failure budget, and which rollouts are pending. Pure.

The store reads a run's files into :class:`SavedOutcome` summaries grouped per rollout; this module
decides, for each logical rollout, its disposition and whether another execution may start. Rules
(spec 000; spec README, readings 1, 5 and 7, and "Easy to get wrong"):

- The newest reserved execution decides. With an outcome, that outcome is selected; without one the
  rollout is ``missing`` (reserved, no outcome) and restarts without spending budget. No reservation
  at all is ``not_started``. An older outcome never replaces the newest nor counts twice.
- Only recorded, non-terminal failures whose delivery is ``delivered`` or ``possibly_delivered`` and
  whose sidecar line is at or after the resubmit offset count against ``max_rollout_attempts``;
  ``kill_shaped``, admission-stage and ``not_sent`` failures do not. ``retry_terminal_timeouts`` makes
  terminal timeouts eligible, and then they count. A masked result whose kind is evaluation-side and
  that kept no model answer (``retry_masked``) counts one failed attempt and may be retried.
- Terminal failures and omissions are final whatever the budget.

The execution number and the budget are different counters: three interruptions reserve executions
0, 1 and 2 and spend nothing.
"""

from __future__ import annotations

import inspect
import math
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Literal

OutcomeKind = Literal["result", "failure", "omission"]

COUNTED_DELIVERIES = frozenset({"delivered", "possibly_delivered"})
NEVER_COUNTED_KINDS = frozenset({"kill_shaped"})
TIMEOUT_KINDS = frozenset({"agent_timeout", "timeout_exceeded", "transport_timeout"})

# Kinds a grader may put on a masked result that mean the evaluation's infrastructure, not the
# evaluated model, left it unmeasured (001: masked_infrastructure_kind). Model-side kinds, judge
# kinds (whose saved answer is graded again, not regenerated), unregistered and namespaced
# kinds keep the masked row as the result. ``verifier_error`` is a verifier that could not run: with
# no saved answer there is nothing to grade again, so the episode runs again. The ``transport_*``
# kinds are not here: on a graded (masked) result they are the verify call's transport, and 001
# grades such a saved answer again instead of regenerating it (_MASKED_REGRADE_KINDS).
EVALUATION_SIDE_KINDS = frozenset(
    {
        "provider_unavailable",
        "provider_quota_exhausted",
        "provider_oom_killed",
        "session_lost",
        "session_expired",
        "session_release_failed",
        "persistence_failed",
        "cohort_incomplete",
        "cancelled",
        "shutdown",
        "verifier_error",
    }
)
# Registered provider/session kinds that are model-side at the agent stage (001: "agent OOM remains
# model-side while seed OOM is evaluation-side when its originating stage is available").
MODEL_SIDE_AT_AGENT_STAGE = frozenset({"provider_oom_killed"})


class _Compact:
    """A record that stores only its core fields while its details sit at their defaults.

    The store builds a :class:`SavedOutcome` per saved record and a :class:`RolloutState` per rollout
    when it reconciles, so at a million rollouts their size is most of what a resume holds. A record
    whose details are all at their defaults is an instance of the class itself, with slots for its
    core fields only; the defaults are class attributes, read as fast as slots. Any other record is
    an instance of the class's ``_Detailed`` subclass, which has a slot for every field. Each class's
    ``__new__`` spells its fields out (a generic one cost ~10x as much per record). Compared by value.
    Not frozen on purpose (a frozen class costs about ten times as much to build): treat it as
    immutable. The selection loop's fast path builds plain records without the constructor (:data:`plain`).
    """

    __slots__ = ()
    _FIELDS: tuple[str, ...] = ()  # a public class's annotated fields, in the order its constructor takes

    def __init_subclass__(cls) -> None:
        own = inspect.get_annotations(cls)
        if own:  # the public class (a _Detailed one only adds slots)
            cls._FIELDS = tuple(own)

    def fields(self) -> tuple[object, ...]:
        """Every field's value, in ``_FIELDS`` order (the order the constructor takes them)."""
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Compact) or other._FIELDS != self._FIELDS:
            return NotImplemented
        return self.fields() == other.fields()

    __hash__ = None  # type: ignore[assignment]  # mutable by type, compared by value

    def __repr__(self) -> str:
        values = zip(self._FIELDS, self.fields(), strict=True)
        shown = ", ".join(f"{name}={value!r}" for name, value in values)
        return f"{_public(type(self)).__name__}({shown})"

    def __reduce__(self) -> tuple[Any, tuple[object, ...]]:
        return _public(type(self)), self.fields()


def _public(kind: type[_Compact]) -> type[_Compact]:
    """The class a record was built as: the one right below :class:`_Compact` (a detailed record's base)."""
    return next(c for c in kind.__mro__ if _Compact in c.__bases__)


plain = object.__new__  # the fast path's constructor: ``record = plain(SavedOutcome)``, then its core fields


class SavedOutcome(_Compact):
    """What selection needs to know of one saved record: a result, a failure or an omission.

    A plain result keeps only its first four fields (48 bytes instead of 128); see :class:`_Compact`.
    """

    __slots__ = ("attempt", "kind", "line", "reward")

    attempt: int
    kind: OutcomeKind
    line: int  # 0-based line in its own file (results file or failure sidecar)
    reward: float | None
    masked: bool = False
    retry_masked: bool = False
    terminal: bool = False
    delivery: str | None = None
    failure_kind: str | None = None
    stage: str | None = None
    failure_class: str | None = None
    legacy_class: str | None = None
    kept_answer: bool = False  # a failure that kept the model's answer (001): final, never regenerated
    max_attempts: int | None = None  # a legacy row's own attempt limit (_ng_failure_max_attempts), else None

    def __new__(  # noqa: PLR0917  (the fields, positional as a dataclass took them)
        cls,
        attempt: int,
        kind: OutcomeKind,
        line: int,
        reward: float | None = None,
        masked: bool = False,
        retry_masked: bool = False,
        terminal: bool = False,
        delivery: str | None = None,
        failure_kind: str | None = None,
        stage: str | None = None,
        failure_class: str | None = None,
        legacy_class: str | None = None,
        kept_answer: bool = False,
        max_attempts: int | None = None,
    ) -> SavedOutcome:
        if (
            masked is False
            and retry_masked is False
            and terminal is False
            and delivery is None
            and failure_kind is None
            and stage is None
            and failure_class is None
            and legacy_class is None
            and kept_answer is False
            and max_attempts is None
        ):
            record = object.__new__(cls)
        else:
            record = object.__new__(_DetailedOutcome)
            record.masked, record.retry_masked, record.terminal = masked, retry_masked, terminal
            record.delivery, record.failure_kind, record.stage = delivery, failure_kind, stage
            record.failure_class, record.legacy_class = failure_class, legacy_class
            record.kept_answer, record.max_attempts = kept_answer, max_attempts
        record.attempt, record.kind, record.line, record.reward = attempt, kind, line, reward
        return record


class _DetailedOutcome(SavedOutcome):
    __slots__ = SavedOutcome._FIELDS[len(SavedOutcome.__slots__) :]


@dataclass(frozen=True)
class BudgetPolicy:
    """The saved retry policy of a run and where its current budget starts (the resubmit offset)."""

    max_rollout_attempts: int
    retry_terminal_timeouts: bool = False
    failure_offset: int = 0
    result_offset: int = 0


class Disposition(StrEnum):
    """The coverage category of a logical rollout's selected state."""

    MEASURED = "measured"
    MASKED = "masked"
    UNSCORED = "unscored"
    FAILED = "failed"
    OMITTED = "intentionally_omitted"
    NOT_STARTED = "not_started"
    MISSING = "missing"


SUCCESSFUL = frozenset({Disposition.MEASURED, Disposition.MASKED, Disposition.UNSCORED})


class RolloutState(_Compact):
    """A logical rollout's selected state and whether another execution may start now.

    A rollout with nothing counted, nothing pending and no own limit keeps only its first two fields;
    see :class:`_Compact`.
    """

    __slots__ = ("disposition", "selected")

    disposition: Disposition
    selected: SavedOutcome | None
    counted_failures: int = 0
    pending: bool = False
    exhausted: bool = False
    limit: int | None = None  # a legacy row's own attempt limit that holds for this rollout, else None

    def __new__(  # noqa: PLR0917  (the fields, positional as a dataclass took them)
        cls,
        disposition: Disposition,
        selected: SavedOutcome | None,
        counted_failures: int = 0,
        pending: bool = False,
        exhausted: bool = False,
        limit: int | None = None,
    ) -> RolloutState:
        if counted_failures == 0 and pending is False and exhausted is False and limit is None:
            record = object.__new__(cls)
        else:
            record = object.__new__(_DetailedState)
            record.counted_failures, record.pending = counted_failures, pending
            record.exhausted, record.limit = exhausted, limit
        record.disposition, record.selected = disposition, selected
        return record


class _DetailedState(RolloutState):
    __slots__ = RolloutState._FIELDS[len(RolloutState.__slots__) :]


def is_numeric_reward(value: object) -> bool:
    """A reward counts as a score only when it is a real, finite number (never a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# Distinct float rewards shared between the outcomes that have them (a verifier's 0.0 and 1.0, or a
# few grades): one float object each instead of one per outcome, 24 bytes a rollout. Bounded, so a
# continuous reward costs a dict of this size at most.
SHARED_REWARDS = 4096


def shared_reward(shared: dict[float, float], reward: float) -> float:
    """``reward`` as the one object ``shared`` keeps for its value (the readers of saved outcomes
    build millions); a negative zero is kept as it is (it equals 0.0 and must not become it)."""
    if (reward or math.copysign(1.0, reward) > 0.0) and (len(shared) < SHARED_REWARDS or reward in shared):
        return shared.setdefault(reward, reward)
    return reward


def is_timeout(outcome: SavedOutcome) -> bool:
    """Whether a failure is a timeout by its canonical kind or its routing names."""
    names = (outcome.failure_kind, outcome.failure_class, outcome.legacy_class)
    return any(name in TIMEOUT_KINDS for name in names)


def is_kill_shaped(outcome: SavedOutcome) -> bool:
    """Whether a failure is an interruption (``kill_shaped``): it runs again and never spends budget."""
    names = (outcome.failure_kind, outcome.failure_class, outcome.legacy_class)
    return any(name in NEVER_COUNTED_KINDS for name in names)


def retryable_in_kind(outcome: SavedOutcome, policy: BudgetPolicy) -> bool:
    """Whether a failure may run again at all (budget aside): non-terminal, or an opted-in timeout.

    An agent timeout that kept its answer never runs again, terminal or not: the deadline was the
    agent's, so what it kept is the evaluated model's final result (001).
    """
    if outcome.kept_answer:
        return False
    return not outcome.terminal or (policy.retry_terminal_timeouts and is_timeout(outcome))


# The names of an agent running out of its own deadline (timeout_exceeded: the older routing class).
AGENT_TIMEOUT_NAMES = frozenset({"agent_timeout", "timeout_exceeded"})


def kept_partial_answer(stage: object, response: object, *, legacy: bool = False) -> bool:
    """Whether a failure kept the agent's partial response: the agent ran, so it is never regenerated.

    001: "Whether the row keeps the agent's partial response from a native cleanup, even one without
    output. The agent ran, so its partial response stays a kept answer and is never regenerated. An
    agent-stage response the outcome policy rejected as failed is diagnostic only." A response *object*
    is kept (a string is diagnostic text, not a response); a native failure keeps it at stage
    ``cleanup``; a legacy sidecar row (no stage, or any but ``agent``) keeps its saved response.
    """
    if not isinstance(response, Mapping):
        return False
    return stage == "cleanup" or (legacy and stage != "agent")


def kept_timeout_answer(names: Iterable[object], response: object) -> bool:
    """Whether a failure is an agent timeout that kept the model's answer (001: its final result).

    ``names`` are the failure's kind and routing names; ``response`` the response the failure kept
    (``_ng_failure_response``). A timeout that kept no answer keeps its retry policy.
    """
    return any(name in AGENT_TIMEOUT_NAMES for name in names) and has_saved_generation(response)


def _failure_counts(outcome: SavedOutcome, policy: BudgetPolicy) -> bool:
    return (
        retryable_in_kind(outcome, policy)
        and outcome.delivery in COUNTED_DELIVERIES
        and outcome.stage != "admission"
        and not is_kill_shaped(outcome)
    )


def counts_against_budget(outcome: SavedOutcome, policy: BudgetPolicy) -> bool:
    """Whether this saved record spends one unit of the rollout's current failure budget."""
    if outcome.kind == "failure":
        return outcome.line >= policy.failure_offset and _failure_counts(outcome, policy)
    if outcome.kind == "result":
        return outcome.retry_masked and outcome.line >= policy.result_offset
    return False


def establishes_progress(outcome: SavedOutcome, policy: BudgetPolicy) -> bool:
    """Whether a newly saved outcome is progress for exit code 75.

    Successes, omissions, terminal failures and counted failures are; admission timeouts,
    non-terminal ``kill_shaped`` replies and failures known not to have been sent are not.
    """
    if outcome.kind != "failure":
        return True
    return outcome.terminal or outcome.kept_answer or _failure_counts(outcome, policy)


def history_problem(reserved: int, outcomes: Sequence[SavedOutcome]) -> str | None:
    """Why a rollout's saved history cannot be trusted, or None: an unreserved or doubled execution."""
    seen: set[int] = set()
    for outcome in outcomes:
        if outcome.attempt >= reserved or outcome.attempt < 0:
            return (
                f"an outcome for execution {outcome.attempt}, which was never reserved ({reserved} reserved)"
            )
        if outcome.attempt in seen:
            return f"two outcomes for execution {outcome.attempt}"
        seen.add(outcome.attempt)
    return None


def result_disposition(outcome: SavedOutcome) -> Disposition:
    """The coverage category of a selected completed result: masked, measured (a reward) or unscored."""
    if outcome.masked:
        return Disposition.MASKED
    return Disposition.MEASURED if outcome.reward is not None else Disposition.UNSCORED


def select_rollout(reserved: int, outcomes: Sequence[SavedOutcome], policy: BudgetPolicy) -> RolloutState:
    """Select a rollout's state under ``latest_allocated`` and decide whether it may run again.

    The attempt limit is the run's, unless a legacy sidecar row set its own (000: legacy runs "retain
    ... their per-row _ng_failure_max_attempts limits"): the newest such row's limit holds.
    """
    counted = sum(1 for outcome in outcomes if counts_against_budget(outcome, policy))
    own = row_limit(outcomes)
    budget_left = counted < (own or policy.max_rollout_attempts)
    if reserved == 0:
        return RolloutState(Disposition.NOT_STARTED, None, counted, pending=True, exhausted=False)
    newest = reserved - 1
    selected = next((outcome for outcome in outcomes if outcome.attempt == newest), None)
    if selected is None:
        return RolloutState(Disposition.MISSING, None, counted, pending=True, exhausted=False, limit=own)
    if selected.kind == "result":
        pending = selected.retry_masked and budget_left
        return RolloutState(result_disposition(selected), selected, counted, pending, exhausted=False)
    if selected.kind == "omission":
        return RolloutState(Disposition.OMITTED, selected, counted, pending=False, exhausted=False)
    if not retryable_in_kind(selected, policy):
        return RolloutState(Disposition.FAILED, selected, counted, pending=False, exhausted=False)
    return RolloutState(Disposition.FAILED, selected, counted, budget_left, not budget_left, limit=own)


def row_limit(outcomes: Sequence[SavedOutcome]) -> int | None:
    """A rollout's own attempt limit: its newest legacy row's ``_ng_failure_max_attempts``, else None."""
    own = [(outcome.attempt, outcome.max_attempts) for outcome in outcomes if outcome.max_attempts]
    return max(own)[1] if own else None


def legacy_row_caps(histories: Iterable[Sequence[SavedOutcome]], policy: BudgetPolicy) -> tuple[int, int]:
    """Of a legacy shard's rollouts, how many carry their own ``_ng_failure_max_attempts`` limit, and
    how many of those spent it (000: legacy runs keep their per-row limits; ``retries/at_cap``)."""
    capped = at_cap = 0
    for history in histories:
        if row_limit(history) is not None:
            capped += 1
            at_cap += select_rollout(len(history), history, policy).exhausted
    return capped, at_cap


# One rollout's saved outcomes as the store's history reader groups them: None (nothing saved), the
# one outcome itself (the common case, no container), or a list of outcomes.
Group = SavedOutcome | list[SavedOutcome] | None


def select_rollouts(
    counts: Sequence[int],
    groups: Sequence[Group],
    policy: BudgetPolicy,
    conflict: Callable[[int, str], Exception],
) -> tuple[list[RolloutState], array[int]]:
    """Every rollout's state, and the newest execution holding an outcome (-1 for none): the one loop.

    The rule is :func:`select_rollout`'s, checked first by :func:`history_problem`: a conflict raises
    ``conflict(index, problem)`` (the store's one message, naming the files). Its fast case is
    inlined here on purpose (bench/store.py): when a rollout's only outcome is a completed result
    of its newest execution that is not retry-masked, ``select_rollout`` would select it with
    :func:`result_disposition`, nothing counted and nothing pending, and its history is valid (its
    one execution was reserved), so that state is built directly. Rollouts with nothing saved share
    one state per reservation count (a fresh run of 1,000,000 rollouts holds one, not a million).
    The store's reconcile, and so aggregation and health, select through this loop only.
    """
    states: list[RolloutState] = []
    nothing_saved: dict[int, RolloutState] = {}
    newest = array("q", [-1]) * len(counts)
    add_state = states.append
    measured, masked, unscored = Disposition.MEASURED, Disposition.MASKED, Disposition.UNSCORED
    new, State = plain, RolloutState  # noqa: N806  (locals: read once per rollout)
    for index, reserved in enumerate(counts):
        group = groups[index]
        if (
            isinstance(group, SavedOutcome)  # a plain or a detailed one
            and group.attempt == reserved - 1
            and group.kind == "result"
            and not group.retry_masked
        ):
            newest[index] = reserved - 1
            made = new(State)  # RolloutState(disposition, group, 0, False, False), inlined
            made.disposition = masked if group.masked else unscored if group.reward is None else measured
            made.selected = group
            add_state(made)
            continue
        if group is None:  # one shared state per reservation count (states are replaced, never changed)
            state = nothing_saved.get(reserved)
            if state is None:
                state = nothing_saved[reserved] = select_rollout(reserved, (), policy)
            add_state(state)
            continue
        outcomes: Sequence[SavedOutcome] = (group,) if isinstance(group, SavedOutcome) else group
        newest[index] = max([outcome.attempt for outcome in outcomes])
        problem = history_problem(reserved, outcomes)
        if problem:
            raise conflict(index, problem)
        add_state(select_rollout(reserved, outcomes, policy))
    return states, newest


def advance_state(
    state: RolloutState, saved: SavedOutcome, reserved: int, policy: BudgetPolicy
) -> RolloutState:
    """The state after a new outcome for the newest execution, by :func:`select_rollout`'s own rules.

    Older outcomes only matter through the failures they counted, so the selection runs on the new
    outcome alone with the budget already spent taken off the limit (the collector's live view).
    """
    spent = state.counted_failures
    if saved.kind == "result" and not saved.retry_masked:  # the fast case: a final result
        return RolloutState(result_disposition(saved), saved, spent, False, False)
    limit = state.limit or policy.max_rollout_attempts
    remaining = replace(policy, max_rollout_attempts=limit - spent)
    fresh = select_rollout(reserved, [saved], remaining)
    return RolloutState(
        fresh.disposition,
        fresh.selected,
        spent + fresh.counted_failures,
        fresh.pending,
        fresh.exhausted,
        limit=state.limit,
    )


# --- reading result rows ------------------------------------------------------------------------


def has_saved_generation(response: object) -> bool:
    """Whether a response holds a model answer: output items or a finished status, or non-empty text.

    A diagnostic error object, an empty mapping, or a response with neither output nor status is a
    placeholder (an agent that never ran), not a generation.
    """
    if not isinstance(response, Mapping):  # a string is diagnostic text, not a response object (001)
        return False
    output = response.get("output")
    return bool(output) or response.get("status") is not None or bool(response.get("answer"))


def is_retry_masked(result_row: Mapping[str, object]) -> bool:
    """Whether a saved masked result is an infrastructure miss to retry within the attempt cap.

    Only a masked row whose ``failure_kind`` is evaluation-side and that kept no model answer: a
    saved answer is never sampled again (001: masked_infrastructure_kind).
    """
    if result_row.get("mask_sample") is not True:
        return False
    kind = result_row.get("failure_kind")
    if kind not in EVALUATION_SIDE_KINDS:
        return False
    if kind in MODEL_SIDE_AT_AGENT_STAGE and result_row.get("stage") == "agent":
        return False
    return not has_saved_generation(result_row.get("response"))
