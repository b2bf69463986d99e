"""Who hears about a run: the benchmark's ``notify:`` receivers, each told of the events it wants.

Events (``NOTIFY_EVENTS``): ``run_submitted`` (``submit``), ``link_failed`` (a link decided RETRY),
``shard_stopped`` (a shard's chain finished, with its verdict), ``budget_warning`` (the run's
GPU-hours passed ``budget.warn_at`` of ``budget.gpu_hours``), ``aggregation_done`` and ``run_done``.
Receivers: a webhook (JSON POST; ``format: slack`` sends Slack's ``{"text": ...}``) or a command
(the event's JSON on its stdin, ``GYMSLURM_EVENT`` its name in the environment).

**At most once per transition.** Every event has a key naming its transition (the shard's link
that stopped, the budget crossed, the aggregation job that ended). Under ``<run>/notify.lock`` the
event is *claimed* once per receiver in the run's notification ledger ``<run>/notify.jsonl`` (the
ledger format, ``notify`` records); a second claim of the same key finds the first and adds
nothing. Each delivery *attempt* is recorded before it is made and its result after, so an attempt
cut short (the job ended mid-POST) is never repeated: a receiver may miss an event, it never gets
one twice. Bodies carry ``id``, unique across runs and clusters (the run's random ``uid``, then the
key), for receivers that deduplicate anyway.

**Never blocks or fails a chain.** One delivery pass at a time (it holds the lock; another finds it
taken and leaves). A pass sends what is due (claims made meanwhile too), the next attempt of a
receiver that failed after a back-off (1 s, 2 s, 4 s ... at most 30 s; :func:`backoff_s`), and starts
no attempt that could outlast its deadline. An event still unsent stays pending for the next pass:
every link starts one in the background when it starts, and gives it (or one of its own) at most
:data:`LINK_GRACE_S` at its end; the aggregation job and ``submit`` do the same. A receiver is
given up after its ``attempts``. Every error is caught and said on the job's output; nothing here
changes a decision or an exit code.

**No secret.** A command receiver gets no secret of the run unless its ``env`` names it (not the
secrets bundle, not another server's key, no credential-named variable of the job). A webhook URL
is a secret (the key ``webhook`` is redacted by the one rule, so the
saved benchmark holds ``<redacted>`` and jobs get the URL from ``GYMSLURM_SECRETS``); records and
messages name a receiver by its index (``notify[0]``), and a failure by its kind (``HTTP 503``).
Event bodies hold run names, counts, verdicts and reasons (already redacted in the ledgers).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gymslurm.dispatch.webhook import post_webhook
from gymslurm.errors import ConfigError
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import DecisionRecord, NotifyRecord, NotifyStep, Record, summarize, utc_now_ms
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import NotifyTarget
from gymslurm.launcher.verdicts import VERDICT_OF_STOP, chain_verdict
from gymslurm.store.flock import locked, try_lock

EVENT_SCHEMA, EVENT_VERSION = "gymslurm.event", 1
LINK_GRACE_S = 10.0  # how long a link waits at its end for the delivery pass
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 30.0


def backoff_s(attempts: int) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: 1, 2, 4 ... at most 30 (pure)."""
    return min(BACKOFF_FIRST_S * 2 ** max(attempts - 1, 0), BACKOFF_MAX_S)


def event_body(
    name: str, key: str, run: str, benchmark: str, facts: dict[str, Any], *, run_uid: str | None = None
) -> dict[str, Any]:
    """The JSON every receiver of this event gets (pure). ``id`` is unique across runs and clusters:
    the run's own random id (run.json's ``uid``; its name for runs from before), then the transition's
    ``key``, which is unique within the run."""
    return {
        "schema": EVENT_SCHEMA,
        "version": EVENT_VERSION,
        "id": f"{run_uid or run}:{key}",
        "key": key,
        "event": name,
        "run": run,
        "benchmark": benchmark,
        "at": utc_now_ms(),
        **facts,
    }


def headline(body: dict[str, Any]) -> str:
    """One line for a person (Slack's ``text``; pure)."""
    run, name = body.get("run"), body.get("event")
    if name == "run_submitted":
        return f"gymslurm run {run} submitted: {body.get('shards')} shard(s) on {body.get('backend')}"
    if name == "link_failed":
        where = f"shard {body.get('shard')} link {body.get('job')}"
        return f"gymslurm run {run}: {where} failed: {body.get('reason')}"
    if name == "shard_stopped":
        where = f"shard {body.get('shard')} stopped {body.get('verdict')}"
        return f"gymslurm run {run}: {where}: {body.get('reason')}"
    if name == "budget_warning":
        return (
            f"gymslurm run {run}: {body.get('gpu_hours'):.2f} of {body.get('gpu_budget'):g} GPU-hours "
            f"spent ({100 * body.get('fraction', 0):.0f} %)"
        )
    if name == "aggregation_done":
        return f"gymslurm run {run}: aggregation {body.get('decision')}: {body.get('reason')}"
    return f"gymslurm run {run} done: {body.get('verdicts')}"


def wire_body(target: NotifyTarget, body: dict[str, Any]) -> dict[str, Any]:
    """What is POSTed to ``target``: the event as is, or Slack's incoming-webhook body (pure)."""
    return {"text": headline(body)} if target.format == "slack" else body


@dataclass
class Pending:
    """One claimed event for one receiver, not yet sent, and how its attempts went."""

    event: str
    key: str
    target: int
    body: dict[str, Any]
    attempts: int = 0
    open_attempt: bool = False  # an attempt with no recorded result: it may have arrived
    done: bool = False


def fold(records: Iterable[Record]) -> dict[tuple[str, int], Pending]:
    """The notification ledger as (key, receiver) → its state (pure)."""
    out: dict[tuple[str, int], Pending] = {}
    for record in records:
        if not isinstance(record, NotifyRecord):
            continue
        slot = (record.key, record.target)
        if record.step == "claimed":
            out.setdefault(slot, Pending(record.event, record.key, record.target, record.body or {}))
            continue
        item = out.get(slot)
        if item is None:
            continue
        if record.step == "attempt":
            item.attempts, item.open_attempt = record.attempt, True
        elif record.step == "error":
            item.open_attempt = False
        elif record.step in ("sent", "gave_up"):
            item.open_attempt, item.done = False, True
    return out


def due(state: dict[tuple[str, int], Pending], targets: list[NotifyTarget]) -> list[Pending]:
    """Events to try now: claimed, not sent or given up, no attempt in doubt, attempts left (pure)."""
    return [
        item
        for item in state.values()
        if not item.done
        and not item.open_attempt
        and item.target < len(targets)
        and item.attempts < targets[item.target].attempts
    ]


def _log(message: str) -> None:
    print(f"[gymslurm notify {utc_now_ms()}] {message}", file=sys.stderr, flush=True)


def send(target: NotifyTarget, body: dict[str, Any]) -> str | None:
    """Deliver one event to one receiver: None when it took it, else what went wrong (no secret)."""
    if target.webhook is not None:
        return post_webhook(target.webhook, wire_body(target, body), target.timeout_s)
    assert target.command is not None
    env = {**command_environment(os.environ, target.env), "GYMSLURM_EVENT": str(body.get("event"))}
    try:
        done = subprocess.run(
            target.command,
            input=json.dumps(body).encode(),
            env=env,
            timeout=target.timeout_s,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"command timed out after {target.timeout_s:g}s"
    except OSError as error:
        return f"command could not start ({error.strerror})"
    return None if done.returncode == 0 else f"command exited {done.returncode}"


def command_environment(environ: dict[str, str] | os._Environ[str], own: dict[str, str]) -> dict[str, str]:
    """A command receiver's environment: the job's without the secrets bundle, the collector's
    overrides or any credential-named variable, plus what its own ``env`` names (resolved here)."""
    from gymslurm.launcher.environment import child_environment
    from gymslurm.redaction import is_credential_name

    credentials = [name for name in environ if is_credential_name(name)]
    return child_environment(environ, own, withheld=credentials, where="notify.env")


def _step(item: Pending, step: NotifyStep, attempt: int, detail: str | None = None) -> NotifyRecord:
    return NotifyRecord(
        event=item.event, key=item.key, target=item.target, step=step, attempt=attempt, detail=detail
    )


class Notifier:
    """Claims a run's events and delivers them (docstring above); ``sleep`` and ``clock`` for tests."""

    def __init__(
        self,
        run: RunDir,
        targets: list[NotifyTarget],
        benchmark: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run, self.targets, self.benchmark = run, targets, benchmark
        self.sleep, self.clock = sleep, clock
        self._threads: list[threading.Thread] = []

    def emit(self, name: str, key: str, **facts: Any) -> int:
        """Claim event ``name`` (transition ``key``) for every receiver that wants it; returns new claims."""
        wanted = [i for i, target in enumerate(self.targets) if name in target.events]
        if not wanted:
            return 0
        body = event_body(name, key, self.run.name, self.benchmark, facts, run_uid=self._run_uid())
        ledger, claimed = self.run.notify_ledger, 0
        with locked(self.run.notify_lock):
            known = fold(ledger.read())
            for index in wanted:
                if (key, index) not in known:
                    ledger.append(NotifyRecord(event=name, key=key, target=index, step="claimed", body=body))
                    claimed += 1
        return claimed

    def _run_uid(self) -> str | None:
        """run.json's ``uid`` (None: a run from before it, or no run.json: the name stands in)."""
        with contextlib.suppress(ConfigError, OSError):
            return self.run.read_info().uid
        return None

    def emit_all(self, events: Iterable[Event | None]) -> int:
        """:meth:`emit` each event (None: skipped); returns the new claims."""
        return sum(self.emit(name, key, **facts) for name, key, facts in filter(None, events))

    def deliver(self, deadline_s: float) -> int:
        """One delivery pass (skipped while another runs); returns how many events were sent."""
        if not self.targets:
            return 0
        fd = try_lock(self.run.delivery_lock)
        if fd is None:
            return 0
        try:
            return self._pass(self.clock() + deadline_s)
        finally:
            os.close(fd)

    def _pass(self, deadline: float) -> int:
        """Send what is due until nothing is or the deadline: claims made meanwhile are picked up, a
        receiver that failed waits its back-off, and no attempt starts that could outlast the deadline."""
        ledger, sent = self.run.notify_ledger, 0
        next_try = dict.fromkeys(range(len(self.targets)), self.clock())
        while self.clock() < deadline:
            waiting = due(fold(ledger.read()), self.targets)
            if not waiting:
                break
            item = min(waiting, key=lambda p: next_try[p.target])
            target, attempt = self.targets[item.target], item.attempts + 1
            pause = max(next_try[item.target] - self.clock(), 0.0)
            if self.clock() + pause + target.timeout_s > deadline:
                break  # the next pass (the next link, the aggregation) tries again
            if pause:
                self.sleep(pause)
            ledger.append(_step(item, "attempt", attempt))  # first: an attempt cut short is not repeated
            problem = send(target, item.body)
            if problem is None:
                ledger.append(_step(item, "sent", attempt))
                sent += 1
                continue
            gave_up = attempt >= target.attempts
            ledger.append(_step(item, "gave_up" if gave_up else "error", attempt, problem))
            _log(f"{item.event} to notify[{item.target}]: attempt {attempt} of {target.attempts}: {problem}")
            next_try[item.target] = self.clock() + backoff_s(attempt)
        return sent

    def deliver_soon(self, deadline_s: float = LINK_GRACE_S) -> None:
        """Start a delivery pass in a daemon thread (:meth:`wait` lets it finish before the process ends).

        Whatever goes wrong is said and swallowed: a notification never fails what sent it.
        """

        def work() -> None:
            try:
                self.deliver(deadline_s)
            except Exception as error:  # never let a notification fail a chain
                _log(f"delivery pass failed: {type(error).__name__}: {error}")

        thread = threading.Thread(target=work, name="gymslurm-notify", daemon=True)
        thread.start()
        self._threads.append(thread)

    def wait(self, seconds: float = LINK_GRACE_S) -> None:
        """Wait at most ``seconds`` in all for the passes this notifier started."""
        end = time.monotonic() + seconds
        for thread in self._threads:
            thread.join(max(end - time.monotonic(), 0.0))


Event = tuple[str, str, dict[str, Any]]  # name, key, facts


def chain_events(shard: int, records: Iterable[Record]) -> list[Event]:
    """Every event a shard's chain has given so far (pure): a ``link_failed`` per RETRY decision, a
    ``shard_stopped`` per decision that finished the chain. Claims deduplicate by key, so emitting
    them all again at each link's end sends each once."""
    out: list[Event] = []
    for record in records:
        if not isinstance(record, DecisionRecord):
            continue
        where = f"{shard}:{record.job_id}:{record.restart_count}"
        facts = {
            "shard": shard,
            "job": record.job_id,
            "restart": record.restart_count,
            "decision": str(record.decision),
            "reason": record.reason,
            "exit_code": record.exit_code,
        }
        if record.decision == Decision.RETRY:
            out.append(("link_failed", f"link_failed:{where}", facts))
        elif not record.decision.continues:
            verdict = str(VERDICT_OF_STOP.get(record.decision, record.decision))
            out.append(("shard_stopped", f"shard_stopped:{where}", {**facts, "verdict": verdict}))
    return out


def budget_event(spent: float, budget: float | None, warn_at: float) -> Event | None:
    """``budget_warning`` once the run's GPU-hours reach ``warn_at`` of the budget (one per budget; pure)."""
    if budget is None or spent < warn_at * budget:
        return None
    facts = {"gpu_hours": round(spent, 4), "gpu_budget": budget, "fraction": round(spent / budget, 4)}
    return ("budget_warning", f"budget_warning:{budget:g}", facts)


def run_done_event(run: RunDir, shards: int, aggregation: DecisionRecord | None) -> Event | None:
    """``run_done`` once every chain finished (and the aggregation, when there is one), else None.

    Its key is the transition that ended the run: the aggregation job's run, else the newest
    finishing decision of any shard (a resubmitted run can end again).
    """
    array = run.read_array()
    states = [summarize(run.chain_records(shard, array)) for shard in range(shards)]
    if not all(state.finished for state in states):
        return None
    verdicts: dict[str, int] = {}
    for state in states:
        word = chain_verdict(state)
        verdicts[word] = verdicts.get(word, 0) + 1
    if aggregation is not None:
        key = f"run_done:aggregation:{aggregation.job_id}:{aggregation.restart_count}"
        facts: dict[str, Any] = {"verdicts": verdicts, "aggregation": str(aggregation.decision)}
        return ("run_done", key, facts)
    ends = sorted(s.last_decision.end for s in states if s.last_decision is not None)
    return ("run_done", f"run_done:{ends[-1] if ends else 'cancelled'}", {"verdicts": verdicts})


def safely(action: Callable[[], object]) -> None:
    """Run a notification step, saying and swallowing any error (a chain never fails on one)."""
    try:
        action()
    except Exception as error:  # the ledger and the decision are written already
        _log(f"notification skipped: {type(error).__name__}: {error}")


def notify_submitted(run: RunDir, targets: list[NotifyTarget], benchmark: str, facts: dict[str, Any]) -> None:
    """``run_submitted`` from ``submit``, with a bounded moment to be delivered; never fails submit."""
    if not targets:
        return
    notifier = Notifier(run, targets, benchmark)
    safely(lambda: notifier.emit("run_submitted", "run_submitted", **facts))
    notifier.deliver_soon()
    notifier.wait(LINK_GRACE_S)
