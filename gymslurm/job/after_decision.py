"""The steps a link takes once its decision is written, in order.

Each step is a small function of the link and its decision; it looks at the chain as read after
the collector (this link's decision folded in: ``link.chain``) and acts only where its rule says
so. The order matters in one place: when a chain stops, the aggregation is queued (if due)
*before* the lookahead is cancelled, so a kill between the two leaves a link that finishes it.
A feature that acts after a decision adds a step to :data:`AFTER_DECISION`.
"""

from __future__ import annotations

from collections.abc import Callable

from gymslurm.errors import SlurmError
from gymslurm.job.aggregation import maybe_submit_aggregation
from gymslurm.job.chain import cancel_pending
from gymslurm.job.context import LinkContext
from gymslurm.job.heartbeat import log
from gymslurm.job.spend import tally_spend
from gymslurm.job.summary import write_summary_if_ended
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.notify import LINK_GRACE_S, budget_event, chain_events, run_done_event, safely

Step = Callable[[LinkContext, Decision], None]


def _stops(link: LinkContext, decision: Decision) -> bool:
    """The chain ends here by its own decision (a cancelled chain ended already)."""
    return not decision.continues and not link.chain.state.cancelled


def tally(link: LinkContext, decision: Decision) -> None:
    """What this link held goes into the run's tally (its decision is the chain's last record), so the
    budget gate of every other link reads it without reading this chain."""
    records = link.chain.records
    tally_spend(link.run, link.settings, link.shard, records, records[-1:])


def cancelled(link: LinkContext, decision: Decision) -> None:
    """A cancelled chain queues nothing: what this link queued before its collector, should cancel
    have missed it, is cancelled now."""
    if link.chain.state.cancelled:
        stale = " ".join(cancel_pending(link.chain.state, link.job, link.backend)) or "-"
        log(f"the chain of shard {link.shard} was cancelled; not queuing anything (cancelled {stale})")


def lookahead(link: LinkContext, decision: Decision) -> None:
    """The chain goes on: the links behind this job are queued again if someone cancelled them."""
    if not decision.continues or link.chain.state.cancelled:
        return
    try:
        link.ensure_lookahead()
    except (SlurmError, OSError) as error:  # the links queued before are still there
        log(f"could not restore the queued links now: {error}")


def aggregation(link: LinkContext, decision: Decision) -> None:
    """The chain stops: the aggregation job is queued if every chain has finished (exactly once)."""
    if _stops(link, decision):
        own = (link.shard, link.chain.state)
        maybe_submit_aggregation(link.run, link.settings, link.backend, link.job, own)


def summary(link: LinkContext, decision: Decision) -> None:
    """Without an aggregation step, the last chain to end writes the run's summary."""
    if _stops(link, decision) and not link.settings.aggregation.enabled and decision != Decision.PAUSED:
        write_summary_if_ended(link.run, link.settings, link.backend, f"job {link.job} (shard {link.shard})")


def stop_lookahead(link: LinkContext, decision: Decision) -> None:
    """The chain stops: the links queued behind this job are cancelled (after the aggregation step)."""
    if not _stops(link, decision):
        return
    queued = " ".join(cancel_pending(link.chain.state, link.job, link.backend)) or "-"
    ended = "paused" if decision == Decision.PAUSED else "finished"
    log(f"chain of shard {link.shard} {ended} ({decision}); cancelled the queued links {queued}")


def notifications(link: LinkContext, decision: Decision) -> None:
    """Claim this chain's events (its decision included) and the budget warning, and give delivery a
    bounded moment."""
    settings, notifier = link.settings, link.notifier
    if not settings.notify or notifier is None:
        return
    warning = budget_event(link.spent, link.budget, settings.budget.warn_at)
    events = [*chain_events(link.shard, link.chain.records), warning]
    safely(lambda: notifier.emit_all(events))
    if not settings.aggregation.enabled:
        safely(lambda: notifier.emit_all([run_done_event(notifier.run, settings.shards, None)]))
    notifier.deliver_soon()
    notifier.wait(LINK_GRACE_S)


AFTER_DECISION: tuple[Step, ...] = (
    tally,
    cancelled,
    lookahead,
    aggregation,
    summary,
    stop_lookahead,
    notifications,
)


def after_decision(link: LinkContext, decision: Decision) -> None:
    """Take every step of :data:`AFTER_DECISION`, in order."""
    for step in AFTER_DECISION:
        step(link, decision)
