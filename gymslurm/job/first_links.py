"""A run's first links: queued by ``submit``, completed by the run's first job when submit died midway.

``submit`` queues the first links with many scheduler calls (on Slurm one ``sbatch`` per job array
and one per spare array; link by link, ``slurm.lookahead`` per shard). While it does, it holds the
run's ``submit.lock`` and the run carries a ``queuing`` mark, removed once every first link is
queued. A submit killed between two calls leaves the mark and (the kernel releases a dead process's
lock) a free lock: the first job of the run to act that finds both completes the queuing, under
the lock, exactly once — the arrays, spare arrays or shards' chains not queued yet, from
``array.json`` and the plan it records (chunk, throttle), each ``sbatch`` recorded before the next
— and removes the mark. So a submit killed after its first call leaves no shard without a job;
one killed before any call returned queued nothing (``status``: STALLED, ``resubmit`` starts it).
``resubmit`` takes the same lock and removes the mark: it restarts what was never queued itself.

Arrays submitted to wait for other jobs' success (``after_ok``: a watch's conversion job) record
them in array.json. A completion by a job of the run needs no wait (a job of the run ran: they
completed); one from the login side (``status``, ``submit``, ``resubmit``) asks Slurm about them
once (:func:`gymslurm.site.backend.job_states`) and keeps the wait, drops it, or queues nothing
(:func:`completion_wait`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from gymslurm.clock import utc_now_ms
from gymslurm.job.chain import queue_chain
from gymslurm.job.heartbeat import log
from gymslurm.launcher.ledger import summarize
from gymslurm.launcher.run_site import run_backend
from gymslurm.launcher.rundir import ArrayPart, ArrayRecord, RunDir, atomic_write, queuing_left
from gymslurm.launcher.settings import SlurmSettings
from gymslurm.process_env import SECRETS_ENV
from gymslurm.redaction import REDACTED
from gymslurm.site.arrays import ArrayPlan
from gymslurm.site.backend import LIVE_STATES, Backend, ClusterSetBackend, SlurmBackend, job_states
from gymslurm.site.job_names import links_job_name
from gymslurm.site.placement import Block, cluster_parts
from gymslurm.store.flock import try_lock


def array_indices(shards: list[int], max_running: int | None) -> str:
    """``--array`` of these task ids: ``0-999%10`` for a contiguous range, ``3,7,9`` otherwise (pure)."""
    ranges: list[str] = []
    for shard in sorted(shards):
        if ranges and "-" not in ranges[-1].split(",")[-1] and int(ranges[-1]) == shard - 1:
            ranges[-1] = f"{ranges[-1]}-{shard}"
        elif ranges and "-" in ranges[-1] and int(ranges[-1].split("-")[1]) == shard - 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{shard}"
        else:
            ranges.append(str(shard))
    text = ",".join(ranges)
    return f"{text}%{max_running}" if max_running else text


def queue_first_links(run: RunDir, shard: int, backend: Backend, by: str, depth: int) -> list[str]:
    """A new chain's first link and its lookahead (``slurm.lookahead`` links, each ``afterany`` the
    one before, each recorded): a first link killed before it runs a line leaves its successor."""
    return queue_chain(run.ledger(shard), backend, run.script(shard), None, depth, by=by)


@contextlib.contextmanager
def queuing(run: RunDir) -> Iterator[None]:
    """``submit``'s queuing: the lock held and the mark present; the mark goes only when the block
    ends normally (a submit killed or failing midway leaves it for the run's first job)."""
    fd = try_lock(run.submit_lock)
    if fd is None:  # a fresh run directory: nobody else can hold it
        raise RuntimeError(f"{run.submit_lock} is held: another process queues this run's first links")
    try:
        atomic_write(run.queuing_mark, b"submit has not queued every first link yet\n")
        yield
        run.queuing_mark.unlink()
    finally:
        os.close(fd)


@contextlib.contextmanager
def queuing_taken_over(run: RunDir, backend: Backend, lookahead: int, *, complete: bool) -> Iterator[bool]:
    """``resubmit``: take the lock when free (yields False when a live submit holds it), and remove
    the mark: ``resubmit`` of every unfinished shard restarts what was never queued itself;
    ``complete`` (``--shards``) first queues what submit left, as the run's first job would."""
    fd = try_lock(run.submit_lock)
    if fd is None:
        yield False
        return
    try:
        if complete and run.queuing_mark.exists():
            _complete(run, backend, lookahead, "resubmit", login=True)
        with contextlib.suppress(FileNotFoundError):
            run.queuing_mark.unlink()
        yield True
    finally:
        os.close(fd)


def _write(
    run: RunDir,
    shards: int,
    max_running: int | None,
    plan: tuple[int, int | None],
    parts: list[ArrayPart],
    *,
    at: str | None = None,
    intent: str | None = None,
    after_ok: list[str] | None = None,
) -> None:
    record = ArrayRecord(
        job_id=parts[0].job_id if parts else "",
        shards=shards,
        max_running=max_running,
        at=at or utc_now_ms(),
        chunk=plan[0],
        parts=parts,
        throttle=plan[1],
        intent=intent,
        after_ok=after_ok or None,
    )
    atomic_write(run.array_path, record.model_dump_json(indent=2).encode())


Write = Callable[[list[ArrayPart], str | None], None]  # array.json: the parts queued, the intent under way


def intent_of(run: RunDir, first: int, array: int) -> str:
    """The ``--comment`` of one ``sbatch`` of a run's first links (pure): the run, the first shard of the
    piece and which array of it (0 the first links, 1.. the spares). The same sbatch always has the
    same comment, so one that went through is found again whoever asks, and however often it was tried."""
    return f"gymslurm-queuing:{run.name}:{first}:{array}"


def _sbatch_once(
    target: SlurmBackend,
    run: RunDir,
    queued: tuple[list[ArrayPart], str | None],
    call: tuple[Path, str, list[str], str],
    write: Write,
    *,
    after_ok: list[str] | None = None,
) -> str:
    """One ``sbatch`` of the queuing, at most once: when ``queued`` (what array.json records: the parts
    and the intent it was left with) names this very sbatch as under way, the job it may have queued is
    looked for first (by its comment); otherwise the intent is written, then the sbatch made."""
    parts, pending = queued
    script, indices, after, comment = call
    if comment == pending:
        found = target.commented(links_job_name(run.name), comment)
        if found:
            log(f"sbatch {comment} went through before its submitter died: job {found[0]}, not queued again")
            return found[0]
    write(parts, comment)
    return target.submit_array(script, indices, after=after, comment=comment, after_ok=after_ok or [])


def _queue_part(
    run: RunDir,
    backend: Backend,
    piece: tuple[int, int, int, str | None],
    *,
    throttle: int | None,
    lookahead: int,
    have: ArrayPart | None,
    record: list[ArrayPart],
    write: Write,
    pending: str | None = None,
    after_ok: list[str] | None = None,
) -> ArrayPart:
    """One array of first links (``piece``: base, offset, size, cluster) and its ``lookahead - 1``
    spare arrays (what ``have`` lacks of them), on the piece's cluster. Each ``sbatch`` is written as
    an intent (array.json's ``intent``, its ``--comment``) before it runs and its job id recorded after
    (``write(parts, intent)``), so a kill at any instant leaves either the job recorded or its intent,
    which ``pending`` (the intent a killed submit left) lets a completion look up instead of repeating.
    ``after_ok``: jobs every one of these arrays waits for to complete successfully (submit's
    ``--after-ok``, a watch's conversion job), spares included: none of them runs if one fails."""
    base, offset, size, cluster = piece
    target = backend.on(cluster) if isinstance(backend, ClusterSetBackend) and cluster else backend
    assert isinstance(target, SlurmBackend)
    indices, script = array_indices(list(range(offset, offset + size)), throttle), run.links_script_for(base)
    first = base + offset
    part = have
    if part is None:
        call: tuple[Path, str, list[str], str] = (script, indices, [], intent_of(run, first, 0))
        job = _sbatch_once(target, run, (list(record), pending), call, write, after_ok=after_ok)
        part = ArrayPart(job_id=job, base=base, size=size, offset=offset, spares=[])
    spares = list(part.spares or [])
    while len(spares) < lookahead - 1:
        now = [*record, part.model_copy(update={"spares": list(spares)})]
        call = (
            script,
            indices,
            [spares[-1] if spares else part.job_id],
            intent_of(run, first, len(spares) + 1),
        )
        spares.append(_sbatch_once(target, run, (now, pending), call, write, after_ok=after_ok))
    part = part.model_copy(update={"spares": spares})
    write([*record, part], None)
    return part


def submit_arrays(
    run: RunDir,
    backend: SlurmBackend | ClusterSetBackend,
    shards: int,
    plan: ArrayPlan,
    *,
    max_running: int | None,
    counts: list[int],
    lookahead: int = 3,
    placement: list[Block] | None = None,
    after_ok: list[str] | None = None,
) -> str:
    """Every shard's first link as the plan's job arrays (one ``sbatch`` each; a run across clusters:
    each range cut by cluster, each piece an array of its cluster, ``--clusters=C``), each array
    followed by its ``lookahead - 1`` spare arrays (one ``sbatch`` each, ``afterany`` the array
    before): a first link killed before its first act leaves its spare task, as a link leaves its
    successor.

    ``array.json`` is rewritten before each ``sbatch`` with its intent and after it with the arrays
    queued so far (and the plan: chunk, throttle), so a submit killed at any instant leaves them
    known; the run's first job, the next ``status`` or ``submit`` queues the rest
    (:func:`complete_queuing`), never an array twice. ``after_ok``: jobs each array (spares too)
    waits for to complete successfully first (Slurm's ``afterok``), recorded in array.json; a
    completion by the run's first job needs none (a job of the run ran: they completed), one from the
    login side keeps what is still needed (:func:`completion_wait`).
    """
    parts: list[ArrayPart] = []

    def write(queued: list[ArrayPart], intent: str | None) -> None:
        _write(
            run, shards, max_running, (plan.chunk, plan.throttle), queued, intent=intent, after_ok=after_ok
        )

    pieces = cluster_parts(plan.parts, placement)
    for piece in pieces:
        part = _queue_part(
            run,
            backend,
            piece,
            throttle=plan.throttle,
            lookahead=lookahead,
            have=None,
            record=parts,
            write=write,
            after_ok=after_ok,
        )
        parts.append(part)
        first, size = part.first, part.size
        rows = counts[first : first + size]
        if len(pieces) <= 20 or first == 0:
            then = f", spare tasks in {' '.join(part.spares or [])}" if part.spares else ""
            indices = array_indices(list(range(part.offset, part.offset + size)), plan.throttle)
            print(
                f"shards {first}..{first + size - 1} ({min(rows)}-{max(rows)} rows each): first links are "
                f"job array {part.job_id} (--array={indices}){then}",
                flush=True,
            )
    if len(pieces) > 20:
        print(f"... {len(pieces)} job arrays in all: {parts[0].job_id} .. {parts[-1].job_id}")
    if plan.throttle:
        print(f"at most {plan.throttle} first links of each array run at once")
    if plan.note:
        print(f"gymslurm submit: {plan.note}")
    return parts[0].job_id


def record_plan(
    run: RunDir, shards: int, max_running: int | None, plan: ArrayPlan, after_ok: list[str] | None = None
) -> None:
    """``array.json`` with the plan (and the ``after_ok`` jobs every array waits for) and no array yet,
    written before the queuing mark: whoever finds the mark (or this record with no array and no mark:
    submit killed between the two) can queue every array from it."""
    _write(run, shards, max_running, (plan.chunk, plan.throttle), [], after_ok=after_ok)


def complete_queuing(
    run: RunDir, backend: Backend, lookahead: int, me: str, *, plan_only: bool = False, login: bool = False
) -> list[str]:
    """What a killed ``submit`` left unqueued, queued now by ``me`` (a job, ``status``, ``submit``: the
    module docstring): the jobs queued, none when the run has no mark, submit still holds the lock, or
    it was cancelled. ``plan_only``: also a plan with no array and no mark (:func:`queuing_left`; a
    job never meets it: no job of the run exists then). ``login``: ``me`` is no job of the run, so
    the arrays' ``after_ok`` jobs are asked about (:func:`completion_wait`); when one failed nothing is
    queued and the mark stays."""
    left = queuing_left if plan_only else (lambda r: r.queuing_mark.exists())
    if not left(run):
        return []
    fd = try_lock(run.submit_lock)
    if fd is None:  # submit is alive and queuing: it finishes the job
        return []
    try:
        if not left(run):  # another job completed it meanwhile
            return []
        if summarize(run.aggregate_ledger.read()).cancelled:
            log("the run was cancelled while submit was queuing it: nothing more is queued")
            run.queuing_mark.unlink(missing_ok=True)
            return []
        queued = _complete(run, backend, lookahead, me, login=login)
        if queued is None:  # what the arrays wait for failed: nothing queued, the mark stays
            return []
        run.queuing_mark.unlink(missing_ok=True)
        log(
            f"submit did not queue every first link (killed midway?); job {me} queued "
            f"{' '.join(queued) or 'nothing more'}"
        )
        return queued
    finally:
        os.close(fd)


def completion_wait(after_ok: list[str], states: Mapping[str, str]) -> tuple[list[str], str | None]:
    """What the arrays a login-side completion queues wait for (pure): of the jobs submit made them
    wait for (``after_ok``), those Slurm still runs or holds (``states``: Slurm's state of each; a job
    left out is one Slurm no longer knows). A completed job is no longer waited for (sbatch refuses a
    dependency on a job slurmctld forgot after MinJobAge); one that ended otherwise, or that Slurm
    forgot with no accounting to tell how it ended, means nothing may be queued: the reason, second."""
    waits: list[str] = []
    for job in after_ok:
        state = states.get(job)
        if state in LIVE_STATES:
            waits.append(job)
        elif state is None:
            return [], (
                f"Slurm no longer knows job {job}, which the first links wait for (forgotten, no "
                "accounting): whether it completed cannot be told, so nothing more is queued; once "
                "it is known good, 'gymslurm resubmit RUN' starts the shards"
            )
        elif state != "COMPLETED":
            return [], f"job {job}, which the first links wait for, ended {state}: nothing more is queued"
    return waits, None


def _complete(
    run: RunDir, backend: Backend, lookahead: int, me: str, *, login: bool = False
) -> list[str] | None:
    """The completion itself (the lock held): the jobs queued; None when the jobs the arrays wait for
    failed (:func:`completion_wait`), said on stderr."""
    info = run.read_info()
    if not info.array or not isinstance(backend, SlurmBackend | ClusterSetBackend):
        queued: list[str] = []
        for shard in range(info.shards):
            if not summarize(run.ledger(shard).read()).jobs:
                queued += queue_first_links(run, shard, backend, f"{me} (completing submit)", lookahead)
        return queued
    record = run.read_array()
    if record is None or record.chunk is None:  # a run from before the plan was recorded first
        return []
    waits: list[str] = []
    if login and record.after_ok:  # a job of the run completing it: what it waited for completed
        waits, refused = completion_wait(record.after_ok, job_states(backend, record.after_ok))
        if refused is not None:
            print(f"gymslurm {me}: run {run.name}: {refused}", file=sys.stderr, flush=True)
            return None
    if info.placement is not None:  # a run across clusters: each array on its own cluster
        backend = run_backend(run)
    chunk = record.chunk
    have = {(part.base, part.offset): part for part in record.arrays}
    plan = [(base, min(chunk, record.shards - base)) for base in range(0, record.shards, chunk)]
    parts: list[ArrayPart] = []

    def write(queued: list[ArrayPart], intent: str | None) -> None:
        tail = [p for p in record.arrays if not queued or p.first > queued[-1].first]
        plan_of = (chunk, record.throttle)
        rest = [*queued, *tail]
        _write(
            run,
            record.shards,
            record.max_running,
            plan_of,
            rest,
            at=record.at,
            intent=intent,
            after_ok=record.after_ok,
        )

    before = {job for p in record.arrays for job in [p.job_id, *(p.spares or [])]}
    for piece in cluster_parts(plan, info.placement):
        known = have.get((piece[0], piece[1]))
        if known is not None and known.spares is None:  # a part written before spares: leave it be
            parts.append(known)
            continue
        parts.append(
            _queue_part(
                run,
                backend,
                piece,
                throttle=record.throttle,
                lookahead=lookahead,
                have=known,
                record=parts,
                write=write,
                pending=record.intent,
                after_ok=waits,
            )
        )
    after = run.read_array()
    ids = [] if after is None else [job for p in after.arrays for job in [p.job_id, *(p.spares or [])]]
    return [job for job in ids if job not in before]


def finish_queuing(run: RunDir, by: str, secrets: dict[str, Any] | None = None) -> list[str]:
    """The first links a killed ``submit`` of ``run`` left unqueued, queued now by ``by`` (``status``, a
    later ``submit``: never an array twice, :func:`complete_queuing`), with a line on stderr saying so.

    A run that holds secrets is finished only with them (``secrets``: what a ``submit`` of the same
    benchmark was given): a job queued from here carries this process's environment, and ``status``
    has no secret to give it. Without them, the run's first job to act finishes the queuing (it has
    them), or ``resubmit`` (given them again).
    """
    if not run.queuing_mark.exists() and not run.array_path.exists():
        return []
    if secrets is None and REDACTED in run.config_path.read_text(errors="replace"):
        return []
    info = run.read_info()
    lookahead = info.lookahead or SlurmSettings.model_fields["lookahead"].default
    with _secrets_given(secrets):  # sbatch passes this process's environment on to the jobs
        queued = complete_queuing(run, run_backend(run), lookahead, by, plan_only=True, login=True)
    if queued:
        print(
            f"gymslurm {by}: run {run.name}: its submit was killed midway; queued {' '.join(queued)}",
            file=sys.stderr,
        )
    return queued


@contextlib.contextmanager
def _secrets_given(secrets: dict[str, Any] | None) -> Iterator[None]:
    """``GYMSLURM_SECRETS`` set to ``secrets`` for the block (None: left as it is), then as it was."""
    before = os.environ.get(SECRETS_ENV)
    if secrets is not None:
        os.environ[SECRETS_ENV] = json.dumps(secrets)
    try:
        yield
    finally:
        if secrets is not None and before is None:
            os.environ.pop(SECRETS_ENV, None)
        elif secrets is not None and before is not None:
            os.environ[SECRETS_ENV] = before
