"""The suite's rules, pure: which benchmarks a link runs, how their ends make the link's decision.

**Shards to links.** Link chain ``k`` runs shard ``k`` of every benchmark that has one: a suite of
benchmarks with 4, 2 and 1 shards has 4 chains; chain 0 runs three collectors, chain 1 two, chains
2 and 3 one. Why: a chain is the unit the scheduler sees (one allocation, one model server), so the
work of shard ``k`` of every benchmark shares one model load; the shard's input is exactly the slice
the benchmark alone would cut (same rows, same task indices), so each benchmark's output is the one
it gives submitted alone; and a benchmark's shard always lands in the same chain, so its ledger,
resume and identity are those of one shard chain, whatever the other benchmarks do.

**The link's decision** (:func:`combine`): each benchmark that ran in the link gets its own verdict
from the one decision table (:func:`gymslurm.launcher.decide.decide`, with the benchmark's own
budgets, so a crash loop in one benchmark spends only its retries); benchmarks finished earlier keep
theirs. Then the link: any PAUSED → PAUSED; else any benchmark going on → CONTINUE (RETRY when every
one that goes on is a retry); else every benchmark DONE → DONE; else the first stop by
:data:`STOP_ORDER` (a FAILED benchmark stops only itself: the others went on while it was stopped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gymslurm.launcher.decide import Budgets, Decision, Verdict

# The stop a chain records when its benchmarks ended differently, first listed first: the one that
# needs a person (a fix) before the ones that need only a resubmit.
STOP_ORDER = (
    Decision.STOP_FAILED,
    Decision.STOP_EXHAUSTED,
    Decision.STOP_NO_PROGRESS,
    Decision.STOP_WALLTIME,
    Decision.STOP_BUDGET,
)


def chains_for(shards: Sequence[int]) -> int:
    """How many link chains a suite runs: its largest benchmark's shard count."""
    return max(shards, default=0)


def in_chain(shards: Mapping[str, int], chain: int) -> list[str]:
    """The benchmarks with a shard in ``chain`` (shard ``chain`` of each), in the suite's order."""
    return [name for name, count in shards.items() if chain < count]


def combine(decisions: Mapping[str, Decision]) -> Decision:
    """The link's decision from each benchmark's (this link's verdict, or the stop it had already)."""
    values = list(decisions.values())
    if not values:
        return Decision.DONE
    if Decision.PAUSED in values:
        return Decision.PAUSED
    going = [d for d in values if d.continues]
    if going:
        return Decision.CONTINUE if Decision.CONTINUE in going else Decision.RETRY
    if all(d == Decision.DONE for d in values):
        return Decision.DONE
    return next(stop for stop in STOP_ORDER if stop in values)


def combined_verdict(
    decisions: Mapping[str, Decision], budgets: Budgets, elapsed_s: float, progressed: bool
) -> Verdict:
    """The link's verdict for the suite chain's own ledger: :func:`combine`, a reason naming each
    benchmark's decision, and the chain's budgets with this link counted (a retry spent only when
    every benchmark going on retries; a link without progress when no benchmark saved anything)."""
    decision = combine(decisions)
    spent = replace(
        budgets,
        jobs=budgets.jobs + 1,
        walltime_s=budgets.walltime_s + max(elapsed_s, 0.0),
        infra_retries_used=budgets.infra_retries_used + (decision == Decision.RETRY),
        links_without_progress=0 if progressed else budgets.links_without_progress + 1,
    )
    said = ", ".join(f"{name} {d}" for name, d in decisions.items()) or "no benchmark had work"
    return Verdict(decision, f"suite link: {said}", spent)


def needs_resubmit_copy(member_epochs: int, suite_epochs: int, member_done: bool, decided: bool) -> bool:
    """Whether a benchmark's shard chain takes the suite chain's last ``resubmit`` record.

    A resubmit (or resume) of a suite chain restarts every benchmark of it that did not finish DONE,
    with the suite's fresh budgets; one that is DONE is skipped, and a shard that never ran (a
    benchmark added later) has nothing to restart.
    """
    return decided and not member_done and member_epochs < suite_epochs


@dataclass(frozen=True)
class Work:
    """A benchmark's model work left in a link, from its collector's live progress record.

    ``remaining``: its rollouts without an outcome yet; ``request_s``: the seconds one of its
    requests (a rollout: every model call of it) holds a place at the servers, measured as the mean
    time in flight of the requests it sent (one still out counts its time so far: a benchmark whose
    first rollouts take minutes is seen as slow before one of them ends), None before it sent one.
    """

    remaining: int
    request_s: float | None = None

    @classmethod
    def measured(cls, remaining: int, in_flight_s: float, requests: int) -> Work:
        """From a record's counts: ``in_flight_s`` summed over the ``requests`` it sent."""
        return cls(max(remaining, 0), in_flight_s / requests if requests > 0 and in_flight_s > 0 else None)


MIN_SHARE = 1e-3  # a share is never 0: a collector always keeps one request at the server


def load_shares(
    weights: Mapping[str, float], sequential: bool, work: Mapping[str, Work] | None = None
) -> dict[str, float]:
    """Each collector's share of the one model server (``+dispatch_load_share``, then ``share`` events).

    Concurrent collectors split the server in proportion to ``weight / remaining model work``, the
    work being ``remaining × request_s`` (the seconds of server places its rollouts still need): the
    benchmark with the least work left gets the most, so the short ones end first, while the longest
    one ends when it would anyway (the server kept full, the total work is the same; a split by
    weight alone held the four fast benchmarks of ``bench/suite.py`` to four fifths of the server
    beside a slow one). What is not measured yet counts as the others' mean (nothing known: a split by
    weight alone). A collector with nothing left, and one alone, has it all (a share caps only
    what a collector keeps while the server is full: one that holds less leaves the rest to the
    others, concurrency.py), and so does each in order.
    """
    work = work or {}
    active = [name for name in weights if name not in work or work[name].remaining > 0]
    shares = dict.fromkeys(weights, 1.0)
    if sequential or len(active) < 2:
        return shares
    left = _work_left({name: work[name] for name in active if name in work}, active)
    priority = {name: max(weights[name], 0.0) / left[name] for name in active}
    total = sum(priority.values())
    for name in active:
        shares[name] = max(priority[name] / total, MIN_SHARE) if total > 0 else 1.0 / len(active)
    return shares


def _work_left(known: Mapping[str, Work], active: Sequence[str]) -> dict[str, float]:
    """Each active collector's work left in server seconds; what is unknown is the known mean."""
    measured = [w.request_s for w in known.values() if w.request_s is not None]
    typical_s = sum(measured) / len(measured) if measured else 1.0
    typical_left = sum(w.remaining for w in known.values()) / len(known) if known else 1.0
    out = {}
    for name in active:
        one = known.get(name)
        remaining = float(one.remaining) if one is not None else typical_left
        seconds = one.request_s if one is not None and one.request_s is not None else typical_s
        out[name] = max(remaining, 1.0) * max(seconds, 1e-6)
    return out


def gpu_hours_split(busy_s: Mapping[str, float], gpu_hours: float | None) -> dict[str, float | None]:
    """Each benchmark's part of the suite's GPU-hours: its share of the model server's busy time
    (the seconds its collectors had requests in flight, over every link). None where nothing is
    known (no GPU-hours, or no busy time at all)."""
    total = sum(busy_s.values())
    if gpu_hours is None or total <= 0:
        return dict.fromkeys(busy_s)
    return {name: gpu_hours * busy / total for name, busy in busy_s.items()}


def eta_s(remaining: int, rate_per_s: float, running: bool) -> float | None:
    """Seconds until a benchmark's rollouts all have an outcome at its collectors' present rate:
    0 when none remains, None when it is not running or has no rate yet."""
    if remaining <= 0:
        return 0.0
    if not running or rate_per_s <= 0:
        return None
    return remaining / rate_per_s
