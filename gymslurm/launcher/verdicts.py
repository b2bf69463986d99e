"""The words ``status`` gives a chain, and how each looks: one vocabulary for every reader.

The table colours a verdict on a terminal (:attr:`Look.ansi`, an SGR code), the report draws it and
each link's decision on the page (:attr:`Look.html`, :data:`DECISION_COLOURS`), ``--wait`` and the
notifications name it. Its meaning is docs/launcher.md's verdict table, one line each; a test keeps
the two the same. Pure data, and the one rule that names a finished chain (:func:`chain_verdict`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import ChainState


class ChainVerdict(StrEnum):
    """What a chain is doing, as ``status`` says it (a string: the document holds the word); not
    :class:`gymslurm.launcher.decide.Verdict`, which is one link's decision with its reason."""

    HEALTHY = "HEALTHY"
    UNRESPONSIVE = "UNRESPONSIVE"
    WAITING = "WAITING"
    DISK_FULL = "DISK_FULL"
    STALLED = "STALLED"
    CANCELLED = "CANCELLED"
    PAUSED = "PAUSED"
    ORPHANED = "ORPHANED"
    EXHAUSTED = "EXHAUSTED"
    DONE = "DONE"
    FAILED = "FAILED"
    BUDGET = "BUDGET"

    @property
    def look(self) -> Look:
        """Its meaning and colours."""
        return LOOKS[self]


@dataclass(frozen=True)
class Look:
    """How a verdict reads: one line of meaning, its terminal colour (SGR code), its page colour."""

    meaning: str
    ansi: str
    html: str


_GREEN, _RED, _AMBER, _CYAN = "#2e7d32", "#c62828", "#f9a825", "#00838f"

LOOKS: dict[ChainVerdict, Look] = {
    ChainVerdict.HEALTHY: Look("a link is running and its heartbeat is fresh", "32", _GREEN),
    ChainVerdict.UNRESPONSIVE: Look(
        "a link is RUNNING but its heartbeat or its collector stopped", "31", _RED
    ),
    ChainVerdict.WAITING: Look("a link is pending or held", "36", _CYAN),
    ChainVerdict.DISK_FULL: Look("a link waits for space on the run's filesystem", "31", _RED),
    ChainVerdict.STALLED: Look("no live job and the chain is not finished", "33", _AMBER),
    ChainVerdict.CANCELLED: Look("'gymslurm cancel' stopped the chain", "33", _AMBER),
    ChainVerdict.PAUSED: Look("'gymslurm pause' stopped the chain to go on later", "36", _CYAN),
    ChainVerdict.ORPHANED: Look("a job is queued that will never end by itself", "35", "#ad1457"),
    ChainVerdict.EXHAUSTED: Look("retries, walltime or links without progress used up", "31", _RED),
    ChainVerdict.DONE: Look("every rollout has an outcome", "32", _GREEN),
    ChainVerdict.FAILED: Look("stopped on terminal failures", "31", _RED),
    ChainVerdict.BUDGET: Look("stopped before a link would start past the GPU-hour budget", "33", _AMBER),
}

# The verdict of a chain that stopped with this decision (status, the run's summary, notifications).
VERDICT_OF_STOP: dict[Decision, ChainVerdict] = {
    Decision.DONE: ChainVerdict.DONE,
    Decision.STOP_FAILED: ChainVerdict.FAILED,
    Decision.STOP_EXHAUSTED: ChainVerdict.EXHAUSTED,
    Decision.STOP_WALLTIME: ChainVerdict.EXHAUSTED,
    Decision.STOP_NO_PROGRESS: ChainVerdict.EXHAUSTED,
    Decision.STOP_BUDGET: ChainVerdict.BUDGET,
    Decision.PAUSED: ChainVerdict.PAUSED,
}

# The report's timeline colours each link by its decision: a stop in its verdict's colour, the two
# decisions that go on in their own, a link still running grey (the legend's order is this one).
RUNNING_LINK = "RUNNING"
DECISION_COLOURS: dict[str, str] = {
    Decision.DONE: LOOKS[ChainVerdict.DONE].html,
    Decision.CONTINUE: "#1565c0",
    Decision.RETRY: "#ef6c00",
    **{
        str(decision): LOOKS[VERDICT_OF_STOP[decision]].html
        for decision in (
            Decision.STOP_FAILED,
            Decision.STOP_EXHAUSTED,
            Decision.STOP_WALLTIME,
            Decision.STOP_NO_PROGRESS,
            Decision.STOP_BUDGET,
            Decision.PAUSED,
        )
    },
    RUNNING_LINK: "#9e9e9e",
}


def chain_verdict(state: ChainState) -> str:
    """The word a finished chain ended with (a cancelled one, or one with no decision: CANCELLED); a
    chain read before it finished says its last decision."""
    if state.cancelled or state.last_decision is None:
        return str(ChainVerdict.CANCELLED)
    decision = state.last_decision.decision
    return str(VERDICT_OF_STOP.get(decision, decision))
