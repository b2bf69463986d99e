"""The gates a link passes before it starts its servers and collector, in order.

Each gate is a small function of the link (:class:`~gymslurm.job.context.LinkContext`)
that answers None (go on), a :class:`Stop` (end the link now: nothing more is recorded or
queued), or a :class:`~gymslurm.launcher.decide.Verdict` (the chain is decided without starting
anything: the link records it and runs the steps after a decision). A feature that must hold a
link back adds a gate to one of the two lists, in the place its order asks for:

- :data:`BEFORE_ACCOUNTING`: on the chain as read at the start (a pause, a duplicate, a full disk);
- :data:`BEFORE_START`: once the dead runs before this one are accounted for (a finished chain, how
  Slurm ended a run that decided after a signal, the chain's bad nodes, this link's own start record
  and the cancel that may race it, pending notifications, the budget).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

from gymslurm.errors import SlurmError, StoreError
from gymslurm.exitcodes import ExitCode
from gymslurm.job.aggregation import maybe_submit_aggregation
from gymslurm.job.chain import cancel_pending, other_live_link, pending_of_chain, slurm_end
from gymslurm.job.collector_files import saved_bytes
from gymslurm.job.context import Chain, LinkContext
from gymslurm.job.disk import disk_full, wait_for_space
from gymslurm.job.heartbeat import log
from gymslurm.launcher.decide import Verdict, start_gate
from gymslurm.launcher.ledger import Cancelled, ChainState, DecisionRecord, Record, SlurmEnded, Started
from gymslurm.launcher.links import allocated_gpus, bad_nodes, faults_survived, links_of
from gymslurm.launcher.notify import Notifier
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.server_placement import job_gpus
from gymslurm.site.backend import SlurmBackend


@dataclass(frozen=True)
class Stop:
    """A gate's answer: end the link now with this exit code; nothing more is recorded or queued."""

    code: int


Gate = Callable[[LinkContext], "Stop | Verdict | None"]


def _duplicate(link: LinkContext) -> str:
    return f"this job {link.job} exits without a decision, a successor or spending anything"


def paused(link: LinkContext) -> Stop | None:
    """A job queued when the run was paused starts nothing and spends nothing (it cancels its queued)."""
    if not link.chain.state.paused:
        return None
    cancelled = " ".join(cancel_pending(link.chain.state, link.job, link.backend)) or "-"
    log(
        f"the run is paused (gymslurm pause): job {link.job} starts nothing; cancelled the queued {cancelled}"
    )
    return Stop(ExitCode.DONE)


def duplicate(link: LinkContext) -> Stop | None:
    """Another started run of this chain is still alive in the queue: this one leaves it the chain."""
    other = other_live_link(link.chain.state, link.me, link.backend)
    if other is None:
        return None
    log(
        f"another link of shard {link.shard} is live: job {other} started and is still in the queue; "
        f"{_duplicate(link)}"
    )
    return Stop(0)


def budget_read(link: LinkContext) -> None:
    """The run's GPU budget and spend at the start (read only when a budget is set)."""
    link.read_spend()


def disk(link: LinkContext) -> Stop | None:
    """A full disk: keep the chain's next links queued, then wait for space (re-reading the chain after,
    for what cancel, pause or inject wrote meanwhile)."""
    if disk_full(link.run.root) is None:
        return None
    with contextlib.suppress(SlurmError, StoreError, OSError):
        link.ensure_lookahead()
    if not wait_for_space(link.run.root, link.ledger, link.job, link.signals):
        return Stop(ExitCode.DONE)
    link.chain = Chain.read(link.run, link.shard)
    return None


def finished(link: LinkContext) -> Stop | None:
    """The chain is already finished (a stop, a cancel): nothing to do, but an aggregation may be due."""
    state = link.chain.state
    if not state.finished:
        return None
    log(f"the chain of shard {link.shard} is already finished ({_finished_why(state)}); nothing to do")
    if not state.cancelled:  # a stop written by accounting, or by a link killed right after it
        maybe_submit_aggregation(link.run, link.settings, link.backend, link.job, (link.shard, state))
        cancel_pending(state, link.job, link.backend)
    return Stop(ExitCode.DONE)


def start_record(link: LinkContext) -> Stop | None:
    """Append this link's start record (the GPUs it holds, the bytes saved so far); a cancel that came
    as this first link started ends it here (nothing is queued, nothing to do)."""
    settings = link.settings
    gpus = allocated_gpus(os.environ, job_gpus(settings.servers, settings.slurm.declared_gpus))
    host, saved = socket.gethostname(), saved_bytes(link.output)
    started = Started(job_id=link.me[0], restart_count=link.me[1], host=host, saved_bytes=saved, gpus=gpus)
    link.ledger.append(started)
    raced = cancelled_while_starting(link.run, link.shard, started)
    if raced is None:
        link.started = started
        link.chain.add(started)
        return None
    if raced:
        link.ledger.append(Cancelled(job_ids=[link.job], by="cancel (the run's record, read at start)"))
    log(f"the run was cancelled as this first link of shard {link.shard} started; nothing queued")
    return Stop(ExitCode.DONE)


def slurm_word(link: LinkContext) -> None:
    """The chain's newest decision was its link's own, written after a signal: how Slurm ended that run
    (node failure, preemption, cancel, requeue) is asked once and recorded (``slurm_end``), so its fault
    is counted by Slurm's word (launcher/links.py), not by the signal alone."""
    run = signalled_decision(link.chain.records)
    if run is None:
        return
    state = slurm_end(run, link.me, link.backend)
    if state is not None:
        record = SlurmEnded(job_id=run.job_id, restart_count=run.restart_count, state=state)
        link.ledger.append(record)
        link.chain.add(record)


def bad_node_exclusion(link: LinkContext) -> None:
    """The chain's bad nodes (:func:`gymslurm.launcher.links.bad_nodes`): every link this job queues
    is kept off them (``--exclude``), and when the newest run made a node bad, the links already
    queued behind this job are too (``scontrol update ... ExcNodeList``)."""
    nodes = bad_nodes(link.chain.records)
    link.excluded = list(nodes)
    if not nodes or not isinstance(link.backend, SlurmBackend) or not _newest_failed_on(link, nodes):
        return
    with contextlib.suppress(SlurmError):
        pending = pending_of_chain(link.chain.state, link.job, link.backend, link.settings.slurm.lookahead)
        link.backend.exclude(pending, list(nodes))
        kept = " ".join(pending) or "-"
        log(f"nodes {', '.join(nodes)} failed under shard {link.shard}'s links: jobs {kept} kept off them")


def _newest_failed_on(link: LinkContext, nodes: dict[str, int]) -> bool:
    """The chain's newest ended link met a node failure on one of ``nodes`` (so the exclusion is new)."""
    links = links_of(link.chain.records)
    faults_survived(link.chain.records, links)
    ended = [one for one in links if one["decision"] is not None]
    return bool(ended) and ended[-1]["interruption"] == "node_failure" and ended[-1]["host"] in nodes


def signalled_decision(records: list[Record]) -> DecisionRecord | None:
    """The chain's newest decision when its own link wrote it after a signal and no ``slurm_end`` says
    yet how Slurm ended that run (pure)."""
    decisions = [r for r in records if isinstance(r, DecisionRecord)]
    if not decisions or decisions[-1].accounted_by is not None:
        return None
    last = decisions[-1]
    if not last.slurm_state.startswith("SIGNALLED:"):
        return None
    run = (last.job_id, last.restart_count)
    known = any(isinstance(r, SlurmEnded) and (r.job_id, r.restart_count) == run for r in records)
    return None if known else last


def pending_notifications(link: LinkContext) -> None:
    """What earlier links left undelivered (a receiver that was down) goes out meanwhile."""
    link.notifier = Notifier(link.run, link.settings.notify, link.settings.name)
    if link.settings.notify:
        link.notifier.deliver_soon()


def budget(link: LinkContext) -> Verdict | None:
    """Rule 0: the run's GPU budget is spent: the chain stops before this link starts anything."""
    if link.budget is None:
        return None
    return start_gate(link.spent, link.chain.state.budgets, link.limits)


BEFORE_ACCOUNTING: tuple[Gate, ...] = (paused, duplicate, budget_read, disk)
BEFORE_START: tuple[Gate, ...] = (
    finished,
    slurm_word,
    bad_node_exclusion,
    start_record,
    pending_notifications,
    budget,
)


def first_answer(link: LinkContext, gates: tuple[Gate, ...]) -> Stop | Verdict | None:
    """Pass ``gates`` in order; the first answer that is not None."""
    for gate in gates:
        answer = gate(link)
        if answer is not None:
            return answer
    return None


def cancelled_while_starting(run: RunDir, shard: int, started: Started) -> bool | None:
    """``gymslurm cancel`` came while this link was starting on an empty ledger (an array's first link):
    True when the shard's cancel is still to be written here, False when cancel wrote it, None: not.

    The run's record stands only for shards whose ledger is empty, and this link's ``start`` just
    ended that: cancel writes its record, then reads the ledgers; this link writes its start, then
    reads the run's ledger. Whichever comes second sees the other, so the shard is cancelled.
    """
    if not any(r.kind == "cancelled" for r in run.run_ledger.read()):
        return None
    records = run.ledger(shard).read()
    if records[:1] != [started]:  # the ledger had records before this start: the run's record is not its
        return None
    return not any(r.kind == "cancelled" for r in records)


def _finished_why(state: ChainState) -> str:
    if state.cancelled:
        return "cancelled"
    return state.last_decision.decision if state.last_decision else "finished"
