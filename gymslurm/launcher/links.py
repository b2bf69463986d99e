"""A chain's links as facts: how each ended, what interrupted it, and the GPU-hours it held (pure).

One *link* is one run of one job of a shard's chain: its ``start`` record, and the ``decision``
that ended it (its own, or one written by its successor, ``accounted_by``). :func:`links_of`
pairs them; every view (``status``, the report) and the budget read the figures below from it,
so they cannot disagree.

**Interruptions by kind** (:func:`interruption`), in this order, for a link that has ended.
"Slurm's state" is its accounting of the run: for a link that wrote its own decision after a signal,
the ``slurm_end`` record the chain's next link wrote once it asked Slurm (``sacct -D`` for an earlier
run of its own job, else how the job ended), so a node failure whose TERM reached the link is
``node_failure``, not ``requeued``, and a CANCEL-mode preemption ``preempted``, not ``cancelled``:

==============  ===================================================================================
kind            the ledger (and, where it exists, Slurm's accounting) says
==============  ===================================================================================
requeued        the same job ran again afterwards (a higher restart count) and this run had written
                its own decision after a TERM: ``scontrol requeue``, a requeueing preemption
node_failure    Slurm's state is NODE_FAIL or BOOT_FAIL, or the run died without a word and Slurm
                started the same job again (what a node failure does under ``JobRequeue=1``)
preempted       Slurm's state is PREEMPTED, or ``gymslurm inject --kind preempt`` hit this job
time_limit      the link got USR1 (the ``--signal`` warning before ``--time``) or Slurm says TIMEOUT
cancelled       the link got TERM (or INT) and its job never ran again: ``scancel``; or CANCELLED
crashed         the collector was killed by a signal Slurm did not send, or the link crashed
                (FAILED, OUT_OF_MEMORY, dead within a minute with nothing saved)
lost            the link died without writing a decision and nothing says why
==============  ===================================================================================

A link that ended by itself (collector exit 0, 1, 75, 76), or that ``gymslurm pause`` stopped
(decision PAUSED: a choice, not a fault), was not interrupted (None). Retries
spent and server restarts are counted beside the interruptions (:func:`faults_survived`).

**GPU-hours** (:func:`gpu_hours`): a link holds ``gpus`` (its start record: what Slurm allocated,
else the benchmark's ``slurm.gpus``) for ``elapsed_s`` (its decision; a running link until now).
Allocated GPU-hours are their product summed over every link, requeued runs and resubmitted
chains included; nothing is estimated. ``idle_s`` is the part of a link's time in which no request
was in flight (start-up, probe waits, a dead server): its elapsed time less the collector's busy
time (``busy_s`` of its live progress record), recorded with the decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from gymslurm.launcher.ledger import (
    DecisionRecord,
    Injected,
    Record,
    Resubmitted,
    ServerRecord,
    SlurmEnded,
    Started,
)

BAD_NODE_FAILURES = 2  # node failures under one chain that make a node bad for its later links
MAX_EXCLUDED_NODES = 3  # at most this many nodes excluded from one chain's links
KINDS = ("requeued", "node_failure", "preempted", "time_limit", "cancelled", "crashed", "lost")
NODE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
CRASH_STATES = frozenset({"FAILED", "OUT_OF_MEMORY"})


def _new_link(record: Started) -> dict[str, Any]:
    return {
        "job": record.job_id,
        "restart": record.restart_count,
        "host": record.host,
        "start": record.at,
        "end": None,
        "elapsed_s": None,
        "slurm_state": "RUNNING",
        "exit_code": None,
        "decision": None,
        "reason": "running (no decision yet)",
        "accounted_by": None,
        "gpus": record.gpus,
        "idle_s": None,
        "outcomes_before": None,
        "outcomes_after": None,
    }


def links_of(records: Iterable[Record]) -> list[dict[str, Any]]:
    """Each run of a job of a chain, in order: start, end, how it ended, the decision, GPUs held."""
    links: list[dict[str, Any]] = []
    open_runs: dict[tuple[str, int], dict[str, Any]] = {}
    for record in records:
        if isinstance(record, Started):
            link = _new_link(record)
            open_runs[(record.job_id, record.restart_count)] = link
            links.append(link)
        elif isinstance(record, DecisionRecord):
            found = open_runs.pop((record.job_id, record.restart_count), None)
            link = (
                found
                if found is not None
                else {**_new_link(Started(job_id=record.job_id)), "start": record.start}
            )
            if found is None:
                link["restart"] = record.restart_count
                links.append(link)
            link.update(
                end=record.end,
                elapsed_s=record.elapsed_s,
                slurm_state=record.slurm_state,
                exit_code=record.exit_code,
                decision=str(record.decision),
                reason=record.reason,
                accounted_by=record.accounted_by,
                idle_s=record.idle_s,
                outcomes_before=record.outcomes_before,
                outcomes_after=record.outcomes,
            )
        elif isinstance(record, SlurmEnded):
            run = (record.job_id, record.restart_count)
            ended = next((link for link in reversed(links) if (link["job"], link["restart"]) == run), None)
            if ended is not None:
                ended["slurm_end"] = record.state
    return links


def _signals(slurm_state: str) -> set[str]:
    """``SIGNALLED:SIGUSR1,SIGTERM`` → ``{"USR1", "TERM"}`` (the chain step's record of what it received)."""
    if not slurm_state.startswith("SIGNALLED:"):
        return set()
    return {name.removeprefix("SIG") for name in slurm_state.removeprefix("SIGNALLED:").split(",")}


def interruption(
    link: Mapping[str, Any],
    rerun: bool,
    injected: frozenset[str] = frozenset(),
    slurm_state: str | None = None,
) -> str | None:
    """What interrupted an ended link (table in the module docstring), None when it ended by itself.

    ``rerun``: the same job ran again after this run; ``injected``: faults ``gymslurm inject`` sent
    to this job; ``slurm_state``: Slurm's accounting of the job, when known (else the ``slurm_end``
    record a later link wrote for a run that decided after a signal).
    """
    if link.get("decision") in (None, "PAUSED"):  # a pause is the user's choice, not a fault survived
        return None
    state = slurm_state or str(link.get("slurm_end") or "")  # Slurm's word, as a later link asked it
    own_state = str(link.get("slurm_state") or "")
    if state in NODE_STATES or own_state in NODE_STATES:
        return "node_failure"
    if state == "PREEMPTED" or own_state == "PREEMPTED" or "preempt" in injected:
        return "preempted"
    dead = link.get("accounted_by") is not None
    signals = _signals(own_state)
    if dead:
        if rerun or own_state == "REQUEUED":
            return "node_failure"
        return _dead_kind(own_state, str(link.get("reason") or ""))
    if "USR1" in signals or state == "TIMEOUT":
        return "time_limit"
    if signals & {"TERM", "INT"}:
        return "requeued" if rerun else "cancelled"
    if link.get("exit_code") is None and own_state == "RUNNING" and link.get("decision") == "RETRY":
        return "crashed"  # the collector was killed by a signal nobody forwarded
    return None


def _dead_kind(state: str, reason: str) -> str:
    if state in ("TIMEOUT", "DEADLINE"):
        return "time_limit"
    if state == "CANCELLED":
        return "cancelled"
    if state in CRASH_STATES or "crashed" in reason:
        return "crashed"
    return "lost"


def faults_survived(
    records: list[Record], links: list[dict[str, Any]], slurm_states: Mapping[str, str] | None = None
) -> dict[str, int]:
    """Every interruption of a chain counted by kind, then retries spent and server restarts.

    Also sets each link's ``interruption`` (its kind or None) for the views.
    """
    injected: dict[str, set[str]] = {}
    restarts = 0
    for record in records:
        if isinstance(record, Injected):
            injected.setdefault(record.job_id, set()).add(record.fault)
        elif isinstance(record, ServerRecord) and record.event == "restarted":
            restarts += 1
    counts = dict.fromkeys(KINDS, 0)
    for index, link in enumerate(links):
        rerun = any(
            later["job"] == link["job"] and later["restart"] > link["restart"] for later in links[index + 1 :]
        )
        kind = interruption(
            link, rerun, frozenset(injected.get(link["job"], ())), (slurm_states or {}).get(link["job"])
        )
        link["interruption"] = kind
        if kind is not None:
            counts[kind] += 1
    counts["retries_spent"] = sum(link.get("decision") == "RETRY" for link in links)
    counts["server_restarts"] = restarts
    return counts


def bad_nodes(records: list[Record]) -> dict[str, int]:
    """The chain's bad nodes and their node failures, most first (pure): a node on which at least
    :data:`BAD_NODE_FAILURES` of the chain's links met a node failure (Slurm said NODE_FAIL or
    BOOT_FAIL, or the link died with its node and Slurm ran the job again), at most
    :data:`MAX_EXCLUDED_NODES` of them. The chain's later links are queued ``--exclude`` them.

    Two failures, not one: a node an administrator rebooted once is not bad. Bounded: a chain never
    excludes a small partition out of existence (its jobs would wait for ever for nodes it refuses).
    """
    links = links_of(records)
    faults_survived(records, links)
    failed = Counter(
        str(link["host"]) for link in links if link["interruption"] == "node_failure" and link["host"]
    )
    bad = [(node, n) for node, n in failed.most_common() if n >= BAD_NODE_FAILURES]
    return dict(bad[:MAX_EXCLUDED_NODES])


def fault_text(counts: Mapping[str, int]) -> str:
    """``cancelled 6, requeued 3, node failure 1`` (kinds with a count only; ``none`` when none)."""
    parts = [f"{name.replace('_', ' ')} {n}" for name, n in counts.items() if n]
    return ", ".join(parts) or "none"


def link_gpu_hours(
    link: Mapping[str, Any], now_epoch: float | None = None, start_epoch: float | None = None
) -> float:
    """GPU-hours one link held: GPUs × elapsed (a running link: until ``now_epoch``)."""
    elapsed = link.get("elapsed_s")
    if elapsed is None and now_epoch is not None and start_epoch is not None:
        elapsed = max(now_epoch - start_epoch, 0.0)
    return float(link.get("gpus") or 0) * float(elapsed or 0.0) / 3600.0


def idle_gpu_hours(link: Mapping[str, Any]) -> float:
    """GPU-hours a link held while no request was in flight (0 when not recorded)."""
    return float(link.get("gpus") or 0) * float(link.get("idle_s") or 0.0) / 3600.0


def human_gpu_hours(value: float | None) -> str:
    """``0.42 GPU-h``, ``12.5 GPU-h``, ``1,204 GPU-h`` (``-`` for unknown)."""
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.2f} GPU-h"
    if value < 100:
        return f"{value:.1f} GPU-h"
    return f"{value:,.0f} GPU-h"


def iso_epoch(iso: str | None) -> float | None:
    """ISO-8601 as seconds since the epoch, None when missing or unreadable (the ledger's times)."""
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


def chain_gpu_hours(records: Iterable[Record], now_epoch: float) -> float:
    """GPU-hours every link of one chain held (a running link: until ``now_epoch``)."""
    return sum(link_gpu_hours(link, now_epoch, iso_epoch(link.get("start"))) for link in links_of(records))


def run_gpu_hours(chains: Iterable[Iterable[Record]], now_epoch: float) -> float:
    """GPU-hours of every chain of a run (shards and aggregation), requeues and resubmits included."""
    return sum(chain_gpu_hours(records, now_epoch) for records in chains)


def gpu_budget(configured: float | None, run_records: Iterable[Record]) -> float | None:
    """``budget.gpu_hours`` plus every ``resubmit --gpu-hours +H`` (the run-level ledger's resubmits)."""
    added = sum(record.gpu_hours_added for record in run_records if isinstance(record, Resubmitted))
    if configured is None:
        return added or None
    return configured + added


def allocated_gpus(environ: Mapping[str, str], declared: int) -> int:
    """GPUs this job holds: what Slurm says it allocated (``SLURM_GPUS_ON_NODE`` × nodes, else
    ``SLURM_JOB_GPUS``), else the benchmark's declared count (the local backend, or a site that sets
    neither)."""
    on_node, nodes = environ.get("SLURM_GPUS_ON_NODE", ""), environ.get("SLURM_JOB_NUM_NODES", "1")
    if on_node.isdigit() and int(on_node) > 0:
        return int(on_node) * (int(nodes) if nodes.isdigit() and int(nodes) > 0 else 1)
    listed = [gpu for gpu in environ.get("SLURM_JOB_GPUS", "").split(",") if gpu.strip()]
    return len(listed) if listed else declared
