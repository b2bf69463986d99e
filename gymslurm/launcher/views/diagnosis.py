"""What one chain is doing, and why: the verdict rule of ``status`` (pure; the clock is passed in).

From the chain's ledger, its jobs in the one ``squeue`` answer, the running link's heartbeat and
what its collector's progress record says. The words (docs/launcher.md, and their colours) are
gymslurm/launcher/verdicts.py's: HEALTHY (a link is running and beating), UNRESPONSIVE (a RUNNING
link whose heartbeat stopped for more than :data:`STALE_BEATS` intervals: the step is frozen or lost
its node; or its collector does nothing), WAITING (a link is pending), STALLED (no live job and the
chain is not finished: resubmit it), CANCELLED (``gymslurm cancel`` stopped it), PAUSED (``gymslurm
pause``), ORPHANED (a job is queued that the chain will never use), EXHAUSTED (retries or walltime
used up), DISK_FULL, BUDGET, DONE, FAILED (terminal failures).
"""

from __future__ import annotations

from dataclasses import dataclass

from gymslurm.launcher.decide import collector_unresponsive, life_of
from gymslurm.launcher.ledger import ChainState
from gymslurm.launcher.verdicts import VERDICT_OF_STOP, ChainVerdict
from gymslurm.launcher.views.counts import epoch_of, human_duration
from gymslurm.site.backend import HELD_STATES
from gymslurm.site.slurm import QueueRow
from gymslurm.store import live

STALE_BEATS = 2.0
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT"})


@dataclass(frozen=True)
class Beat:
    """How long the running link has been silent: seconds since its last heartbeat, and the interval."""

    age_s: float
    interval_s: float
    since_start: bool = False  # no heartbeat of this job yet: the age counts from its start record

    @property
    def stale(self) -> bool:
        """Silent for more than :data:`STALE_BEATS` intervals."""
        return self.age_s > STALE_BEATS * self.interval_s


def verdict(
    state: ChainState,
    live_jobs: list[QueueRow],
    beat: Beat | None = None,
    stall: str | None = None,
    *,
    outlived: str | None = None,
    queuing: str | None = None,
) -> tuple[ChainVerdict, str]:
    """The chain's verdict and why: from its ledger, its jobs in the queue, the running link's beat
    and what its collector's progress says (``stall``: :func:`collector_stall`); ``outlived``: the job
    of a link that still runs though its job left the queue (views/liveness.py); ``queuing``: why a
    shard with no job yet will get one (a killed submit's queuing is being completed)."""
    running = [row for row in live_jobs if row.state in RUNNING_STATES]
    pending = [row for row in live_jobs if row.state not in RUNNING_STATES]
    if state.finished:
        deciding = state.last_decision.job_id if state.last_decision else None
        left = [row for row in live_jobs if row.job_id != deciding]  # the decider is only exiting
        if state.cancelled:  # cancel's scancel is asynchronous: its jobs leave the queue a moment later
            ending = f"; job {left[0].job_id} is still {left[0].state} (scancel sent, ending)" if left else ""
            return (
                ChainVerdict.CANCELLED,
                f"stopped by 'gymslurm cancel'{ending}; 'gymslurm resubmit' starts it again",
            )
        held = [row for row in left if is_held(row)]
        if held:  # it never runs by itself, so it never exits by itself
            job = held[0]
            why = f"the chain finished but job {job.job_id} is still {job.state}; {held_way_out(job)}"
            return ChainVerdict.ORPHANED, why
        assert state.last_decision is not None
        word, why = VERDICT_OF_STOP[state.last_decision.decision], state.last_decision.reason
        if left:  # a lookahead its decider was killed before cancelling: it starts, sees the end, exits
            why += (
                f"; job {left[0].job_id} is still {left[0].state} and exits at once when it runs "
                "(a link of a finished chain does nothing)"
            )
        stuck = [row for row in live_jobs if row.job_id == deciding and is_held(row)]
        if stuck:  # RequeueExitHold after the decision: the aggregation's afterany waits on it for ever
            why += (
                f"; but job {stuck[0].job_id} was held after writing this decision ({stuck[0].state}, "
                f"{stuck[0].reason}), so nothing after it starts: "
                f"'scancel {stuck[0].job_id}' lets the run end"
            )
        return word, why
    if state.paused:
        saving = f"; job {running[0].job_id} is saving its work and ending" if running else ""
        return (
            ChainVerdict.PAUSED,
            f"paused by 'gymslurm pause'{saving}; 'gymslurm resume' goes on where it stopped",
        )
    full = state.disk_full
    if full is not None and live_jobs:
        return ChainVerdict.DISK_FULL, (
            f"disk full at {full.path} ({full.free_bytes} bytes free, since {full.at[:19]}): job "
            f"{full.job_id} waits for space and the chain goes on by itself once it is freed"
        )
    if len(running) > 1:
        return (
            ChainVerdict.ORPHANED,
            f"{len(running)} links running at once: {' '.join(r.job_id for r in running)}",
        )
    never = [row for row in pending if "NeverSatisfied" in row.reason]
    if never:
        return (
            ChainVerdict.ORPHANED,
            f"job {never[0].job_id} waits on a dependency that can never be satisfied",
        )
    if running:
        job = running[0]
        if beat is not None and beat.stale and job.state == "RUNNING":
            what = "it wrote no heartbeat since it started" if beat.since_start else "its heartbeat stopped"
            return ChainVerdict.UNRESPONSIVE, (
                f"job {job.job_id} is RUNNING but {what} {human_duration(beat.age_s)} ago (one every "
                f"{beat.interval_s:g}s): the step is frozen or lost its node; read 'gymslurm logs', "
                f"then 'scancel {job.job_id}' lets the chain go on with a fresh link"
            )
        if stall is not None and job.state == "RUNNING":
            return ChainVerdict.UNRESPONSIVE, (
                f"job {job.job_id} is RUNNING but {stall}; the link ends it within stall_window_s (exit 1: "
                "the next link goes on)"
            )
        return ChainVerdict.HEALTHY, f"job {job.job_id} {job.state}"
    if outlived is not None:  # never STALLED (and resubmit advised) while that link writes its decision
        return ChainVerdict.HEALTHY, (
            f"job {outlived} left the queue, but its link still runs (its heartbeat is fresh and it holds "
            "the shard's link lock): it outlived its job and writes its decision itself"
        )
    held = [row for row in pending if is_held(row)]
    if held:
        row = held[0]
        return ChainVerdict.WAITING, (
            f"job {row.job_id} is held ({row.state}, {row.reason}) and will not run by itself: "
            f"'scontrol release {row.job_id}' lets it run, 'gymslurm cancel RUN' stops the run"
        )
    if pending:
        return ChainVerdict.WAITING, f"job {pending[0].job_id} pending ({pending[0].reason})"
    if queuing is not None and not state.epoch_jobs:
        return ChainVerdict.WAITING, queuing
    return ChainVerdict.STALLED, "no live job and the chain is not finished; 'gymslurm resubmit' restarts it"


def is_held(row: QueueRow) -> bool:
    """A job that will not run by itself: held by Slurm's requeue-hold states or by a user/admin hold."""
    return row.state in HELD_STATES or row.reason.startswith("JobHeld")


def held_way_out(row: QueueRow) -> str:
    """What to type about a held job whose chain is already over (pure)."""
    return f"it is held ({row.reason}) and blocks what waits on it: 'scancel {row.job_id}' releases them"


def beat_of(
    state: ChainState, running: QueueRow | None, heartbeat: live.Heartbeat | None, now: float
) -> Beat | None:
    """The running link's silence: from its heartbeat, else from its start record (pure)."""
    if running is None:
        return None
    if heartbeat is not None and heartbeat.job_id == running.job_id:
        return Beat(max(now - heartbeat.epoch, 0.0), heartbeat.interval_s)
    starts = [run for run in state.open_runs if run.job_id == running.job_id]
    if starts:
        return Beat(max(now - epoch_of(starts[-1].at), 0.0), live.HEARTBEAT_S, since_start=True)
    return None


def collector_stall(
    heartbeat: live.Heartbeat | None, record: live.LiveProgress | None, now: float
) -> str | None:
    """Why the running link's collector does nothing, from its progress record (pure).

    The link's own rule (:func:`gymslurm.launcher.decide.collector_unresponsive`) with the window
    its heartbeat names; a record is stale here after two heartbeats (or half the window), requests
    quiet after half the window, so ``status`` says UNRESPONSIVE before the link ends the collector.
    """
    if heartbeat is None or heartbeat.collector_pid is None or heartbeat.stall_window_s is None:
        return None
    since = max(now - (heartbeat.collector_started or now), 0.0)
    life = life_of(record, heartbeat.collector_pid, since, now)
    window = heartbeat.stall_window_s
    fresh = min(STALE_BEATS * heartbeat.interval_s, window / 2)
    return collector_unresponsive(life, window, fresh, quiet_limit_s=window / 2)
