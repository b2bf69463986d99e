"""Which failures are the run's, not the rollout's: the supervision timeline and its rule. Pure.

A link (``job/link.py``) starts the servers of a job, watches them while the collector runs
(``job/server_watch.py``) and tells the collector what it sees through the *supervision channel*:
a pipe whose read end the collector inherits (its number in ``GYMSLURM_SUPERVISION_FD``), one JSON
event per line, format version 1 (:func:`parse_event` checks the version first, then the fields).
Times are ``time.monotonic()`` seconds: the link and the collector run on the same host, and
CLOCK_MONOTONIC is one clock for every process of a host.

Events:

- ``watching``: supervision started; ``interval_s`` is how often every server is probed;
- ``healthy``: a probe round that started at ``at`` found every server in rotation healthy;
- ``down``: ``server`` died (its process exited) or stopped answering its probe; ``since`` is the
  start of the last round that found it healthy, so the death happened in ``[since, at]``;
  ``carried``: it is one replica of several and the others carry the load (it left the router's
  rotation at ``at``): dispatch goes on, and only requests sent by ``at`` can have met it;
- ``up``: ``server`` was restarted in place and is healthy again (``restarts`` so far);
- ``gave_up``: ``server`` died more often than its ``restart_limit``: the link stops the collector;
- ``stopping``: the job is being stopped (SIGTERM, SIGUSR1, SIGINT reached the link). The
  collector reads the end of the channel the same way: a link that is gone (SIGKILL, a crash)
  took its servers with it (``PR_SET_PDEATHSIG``), so what fails from then on is not the rollouts'.
- ``share`` (version 2): the collector's new ``share`` of the model server (a suite link's
  collectors, as their work left changes: launcher/suite_rules.load_shares); nothing else.

The rule (docs/spec-readings.md, "a server death the job owns"): a failure of a request whose
span ``[sent, failed]`` overlaps an outage ``[since, up]`` of any supervised server (of a replica the
others carried: ``[since, detected]``, after which the router sent it nothing), or that
failed after the job began to stop, is an *interruption* of the attempt, not the rollout's
failure: the collector records it as a collector-side, non-terminal ``kill_shaped`` failure
(the spec's "kill_shaped interruption", which spends no budget and is not progress) with the
evidence in ``_ng_failure_diagnostics.interruption``. A failure that ended before the start of a
round that found every server healthy is the rollout's own. Anything else waits for the next
round (:data:`Verdict` ``wait``); the caller bounds the wait (:func:`evidence_wait_s`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from gymslurm.errors import SupervisionError
from gymslurm.formats import version_of, versioned_object
from gymslurm.records import MAX_FAILURE_REASON, EpisodeFailure, RolloutFailureRecord

SUPERVISION_FD_ENV = "GYMSLURM_SUPERVISION_FD"
EVENT_VERSION = version_of("supervision_event")
INTERRUPTION_KIND = "kill_shaped"
EventKind = Literal["watching", "healthy", "down", "up", "gave_up", "stopping", "share"]
EVENT_KINDS: frozenset[str] = frozenset({"watching", "healthy", "down", "up", "gave_up", "stopping", "share"})
_FIELDS = frozenset(
    {"v", "kind", "at", "server", "since", "cause", "restarts", "interval_s", "carried", "share"}
)
Verdict = Literal["interruption", "rollout", "wait"]


@dataclass(frozen=True)
class ServerEvent:
    """One line of the supervision channel."""

    kind: EventKind
    at: float
    server: str | None = None
    since: float | None = None
    cause: str | None = None
    restarts: int = 0
    interval_s: float | None = None
    carried: bool = False
    share: float | None = None  # a ``share`` event's: 0 < share <= 1

    def encode(self) -> bytes:
        """The event as one line of the channel."""
        body = {"v": EVENT_VERSION, "kind": self.kind, "at": self.at}
        for name in ("server", "since", "cause", "interval_s", "share"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        if self.restarts:
            body["restarts"] = self.restarts
        if self.carried:
            body["carried"] = True
        return orjson.dumps(body) + b"\n"


def parse_event(line: bytes) -> ServerEvent:
    """One channel line; the version is checked first, unknown fields are refused."""
    where = "the supervision channel (GYMSLURM_SUPERVISION_FD)"
    raw = versioned_object(line, "supervision_event", f"{where}: the line {line[:200]!r}", SupervisionError)
    unknown = set(raw) - _FIELDS
    kind, at = raw.get("kind"), raw.get("at")
    share = _number(raw.get("share"))
    bad_share = kind == "share" and (share is None or not 0 < share <= 1)
    if unknown or kind not in EVENT_KINDS or not isinstance(at, int | float) or bad_share:
        raise SupervisionError(f"{where} sent a malformed event {raw!r} (unknown fields {sorted(unknown)})")
    return ServerEvent(
        kind=kind,
        at=float(at),
        server=raw.get("server"),
        since=_number(raw.get("since")),
        cause=raw.get("cause"),
        restarts=int(raw.get("restarts", 0)),
        interval_s=_number(raw.get("interval_s")),
        carried=raw.get("carried") is True,
        share=share,
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass
class Outage:
    """One server's time down: it died in ``[since, detected_at]`` and was back at ``ended_at``."""

    server: str
    since: float
    detected_at: float
    cause: str
    ended_at: float | None = None
    carried: bool = False  # a replica the others covered for: it could meet requests sent by detected_at

    @property
    def last_send(self) -> float:
        """The latest send instant a request could meet this outage at (a carried one: its detection)."""
        if self.carried:
            return self.detected_at
        return self.ended_at if self.ended_at is not None else float("inf")


@dataclass
class Timeline:
    """What the collector knows of the servers of its job, folded from the channel's events."""

    interval_s: float = 5.0
    outages: list[Outage] = field(default_factory=list)
    checked_until: float = float("-inf")
    stopping_at: float | None = None
    stop_cause: str = "the job was being stopped"
    gave_up: str | None = None
    restarts: dict[str, int] = field(default_factory=dict)

    def apply(self, event: ServerEvent) -> None:
        """Fold one event in."""
        if event.kind == "watching" and event.interval_s:
            self.interval_s = event.interval_s
        elif event.kind == "healthy" and not self.down:
            self.checked_until = max(self.checked_until, event.at)
        elif event.kind == "down" and event.server is not None:
            since = event.since if event.since is not None else event.at - self.interval_s
            cause = event.cause or "unknown"
            self.outages.append(Outage(event.server, since, event.at, cause, carried=event.carried))
        elif event.kind == "up" and event.server is not None:
            for outage in self.outages:
                if outage.server == event.server and outage.ended_at is None:
                    outage.ended_at = event.at
            self.restarts[event.server] = event.restarts
        elif event.kind == "gave_up":
            self.gave_up = event.server or "a server"
        elif event.kind == "stopping" and self.stopping_at is None:
            self.stopping_at = event.at
            self.stop_cause = event.cause or self.stop_cause

    @property
    def down(self) -> bool:
        """Whether a server is down now and no replica carries its load (dispatch pauses till it is back)."""
        return any(outage.ended_at is None and not outage.carried for outage in self.outages)


@dataclass(frozen=True)
class Judgement:
    """Whose a failure is, and the evidence when it is an interruption."""

    verdict: Verdict
    evidence: dict[str, Any] | None = None


def judge_failure(sent_at: float, failed_at: float, timeline: Timeline) -> Judgement:
    """Whose the failure of a request in flight over ``[sent_at, failed_at]`` is, or ``wait``."""
    for outage in timeline.outages:
        if outage.since <= failed_at and sent_at <= outage.last_send:
            evidence = {
                "cause": "server_died",
                "server": outage.server,
                "how": outage.cause,
                "down_since": outage.since,
                "detected_at": outage.detected_at,
                "back_at": outage.ended_at,
            }
            return Judgement("interruption", evidence)
    stopping = timeline.stopping_at
    if stopping is not None and failed_at >= stopping - timeline.interval_s:
        evidence = {"cause": "job_stopping", "how": timeline.stop_cause, "stopping_at": stopping}
        return Judgement("interruption", evidence)
    if failed_at <= timeline.checked_until:
        return Judgement("rollout")
    return Judgement("wait")


TRANSPORT_KINDS = frozenset({"transport_unreachable", "transport_peer_drop", "transport_timeout"})


def is_transport_failure(record: RolloutFailureRecord) -> bool:
    """A failure the collector saw on the wire (no answer from the server), not one it reported."""
    return record.source == "collector" and record.failure.failure_kind in TRANSPORT_KINDS


@dataclass
class Streak:
    """The circuit breaker's count: transport failures in a row, across different rollouts.

    Outside a job nobody watches the server, so the collector judges from the outside: a failure
    that may be the server's is *held* (not saved yet) until either the server answers another
    request (the streak breaks: the held failures are the rollouts' own) or ``threshold`` different
    rollouts failed in a row (:meth:`add` says ``probe``): then a probe decides. The same rollout
    failing twice counts once.
    """

    threshold: int
    rollouts: list[str] = field(default_factory=list)

    def add(self, rollout_id: str) -> Literal["hold", "probe"]:
        """One more held transport failure; ``probe`` once ``threshold`` rollouts are in the streak."""
        if rollout_id not in self.rollouts:
            self.rollouts.append(rollout_id)
        return "probe" if len(self.rollouts) >= self.threshold else "hold"

    def broken(self) -> None:
        """The server answered: the streak starts again."""
        self.rollouts.clear()


def evidence_wait_s(timeline: Timeline) -> float:
    """How long a failure may wait for the next round's evidence before it is the rollout's after all."""
    return 3 * timeline.interval_s + 2.0


def interruption_record(original: RolloutFailureRecord, evidence: dict[str, Any]) -> RolloutFailureRecord:
    """The collector's record of an interrupted attempt, keeping what the attempt itself reported."""
    if evidence.get("cause") == "server_died":
        what = f"supervised server {evidence.get('server')!r} died ({evidence.get('how')})"
    else:
        what = str(evidence.get("how") or "the job was being stopped")
    own = original.failure
    reason = (
        f"interrupted: {what} while this request was in flight; no failure budget spent "
        f"(the attempt reported: {own.failure_kind or 'failure'}: {own.failure_reason})"
    )
    failure = EpisodeFailure(
        failure_reason=reason[:MAX_FAILURE_REASON], terminal=False, failure_kind=INTERRUPTION_KIND
    )
    return RolloutFailureRecord(
        episode_id=original.episode_id,
        run_id=original.run_id,
        source="collector",
        delivery=original.delivery,
        failure=failure,
    )


def interruption_diagnostics(
    original: RolloutFailureRecord, evidence: dict[str, Any], sent_at: float, failed_at: float
) -> dict[str, Any]:
    """What goes under ``_ng_failure_diagnostics.interruption``: the evidence and the attempt's own report."""
    return {
        "interruption": {
            **{k: v for k, v in evidence.items() if v is not None},
            "sent_at": sent_at,
            "failed_at": failed_at,
            "attempt_failure": original.failure.model_dump(mode="json", exclude_none=True),
            "attempt_source": original.source,
        }
    }
