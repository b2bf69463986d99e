"""Whose a failure is when the job's servers are supervised: one row per sentence of the rule."""

from __future__ import annotations

import pytest

from gymslurm.records import EpisodeFailure, EpisodeId, RolloutFailureRecord
from gymslurm.selection import BudgetPolicy, SavedOutcome, counts_against_budget, establishes_progress
from gymslurm.supervision import (
    ServerEvent,
    SupervisionError,
    Timeline,
    interruption_record,
    judge_failure,
    parse_event,
)


def timeline(*events: ServerEvent) -> Timeline:
    folded = Timeline()
    for event in events:
        folded.apply(event)
    return folded


WATCH = ServerEvent("watching", 0.0, interval_s=1.0)
HEALTHY_10 = ServerEvent("healthy", 10.0)
HEALTHY_20 = ServerEvent("healthy", 20.0)
DOWN_12 = ServerEvent("down", 12.5, server="policy", since=12.0, cause="process killed by signal 9")
UP_15 = ServerEvent("up", 15.0, server="policy", restarts=1)
STOPPING_30 = ServerEvent("stopping", 30.0)
REPLICA_DOWN_12 = ServerEvent(
    "down", 12.5, server="policy-r1", since=12.0, cause="process killed by signal 9", carried=True
)

JUDGE_CASES = [
    # (id, events, sent_at, failed_at, verdict)
    ("a failure before a healthy round began is the rollout's", [WATCH, HEALTHY_10], 5.0, 9.0, "rollout"),
    ("a failure after the last healthy round waits for the next one", [WATCH, HEALTHY_10], 5.0, 11.0, "wait"),
    (
        "a request in flight when the server died is interrupted",
        [WATCH, HEALTHY_10, DOWN_12],
        11.0,
        12.6,
        "interruption",
    ),
    (
        "a request sent while the server is down is interrupted",
        [WATCH, HEALTHY_10, DOWN_12],
        13.0,
        13.1,
        "interruption",
    ),
    (
        "a request that failed after the restart was in flight during the outage",
        [WATCH, DOWN_12, UP_15],
        14.0,
        16.0,
        "interruption",
    ),
    (
        "a request sent after the restart that fails is the rollout's once a round is healthy",
        [WATCH, DOWN_12, UP_15, HEALTHY_20],
        15.5,
        17.0,
        "rollout",
    ),
    (
        "a request that failed before the outage window began is the rollout's",
        [WATCH, HEALTHY_10, DOWN_12],
        5.0,
        9.0,
        "rollout",
    ),
    (
        "a failure while the job is stopping is an interruption",
        [WATCH, HEALTHY_20, STOPPING_30],
        25.0,
        30.2,
        "interruption",
    ),
    (
        "a failure up to one interval before the stop notice is an interruption (signals race)",
        [WATCH, HEALTHY_20, STOPPING_30],
        25.0,
        29.5,
        "interruption",
    ),
    (
        "a failure long before the stop is the rollout's",
        [WATCH, HEALTHY_20, STOPPING_30],
        15.0,
        18.0,
        "rollout",
    ),
    (
        "a request in flight when a replica the others carry died is interrupted",
        [WATCH, HEALTHY_10, REPLICA_DOWN_12],
        11.0,
        12.6,
        "interruption",
    ),
    (
        "a request sent after a carried replica left the rotation never met it: a healthy round judges it",
        [WATCH, HEALTHY_10, REPLICA_DOWN_12, HEALTHY_20],
        13.0,
        14.0,
        "rollout",
    ),
    (
        "a healthy round while a server is down does not clear the outage",
        [WATCH, DOWN_12, HEALTHY_20],
        18.0,
        19.0,
        "interruption",
    ),
]


@pytest.mark.parametrize(
    ("events", "sent", "failed", "verdict"), [c[1:] for c in JUDGE_CASES], ids=[c[0] for c in JUDGE_CASES]
)
def test_judge_failure(events: list[ServerEvent], sent: float, failed: float, verdict: str) -> None:
    """Each row of the rule in docs/spec-readings.md ("a server death the job owns")."""
    assert judge_failure(sent, failed, timeline(*events)).verdict == verdict


def test_a_replica_the_others_carry_does_not_pause_dispatch() -> None:
    """A carried replica's outage leaves dispatch running; a lone server's outage pauses it."""
    assert not timeline(WATCH, REPLICA_DOWN_12).down
    assert timeline(WATCH, DOWN_12).down


def test_the_carried_flag_crosses_the_channel() -> None:
    """A carried down event reads back carried; an ordinary one reads back not carried."""
    assert parse_event(REPLICA_DOWN_12.encode()).carried
    assert not parse_event(DOWN_12.encode()).carried


def test_an_interruption_carries_the_death_as_evidence() -> None:
    """The evidence names the server, how it died and the outage window."""
    judged = judge_failure(11.0, 12.6, timeline(WATCH, HEALTHY_10, DOWN_12))
    assert judged.evidence is not None
    assert (judged.evidence["server"], judged.evidence["how"], judged.evidence["down_since"]) == (
        "policy",
        "process killed by signal 9",
        12.0,
    )


def _peer_drop() -> RolloutFailureRecord:
    failure = EpisodeFailure(
        failure_reason="connection reset", terminal=False, failure_kind="transport_peer_drop"
    )
    return RolloutFailureRecord(
        episode_id=EpisodeId(rollout_id="r1", attempt=2),
        run_id="run-1",
        source="collector",
        delivery="possibly_delivered",
        failure=failure,
    )


def test_an_interruption_record_spends_no_budget_and_is_not_progress() -> None:
    """The record the collector saves for an interrupted attempt is a kill_shaped interruption under
    selection's one budget rule: it spends no budget and establishes no progress."""
    original = _peer_drop()
    assert counts_against_budget(_as_saved(original), BudgetPolicy(3)), (
        "the attempt's own failure would count"
    )
    record = interruption_record(original, {"cause": "server_died", "server": "policy", "how": "signal 9"})
    saved = _as_saved(record)
    assert (record.source, record.failure.terminal, record.episode_id) == (
        "collector",
        False,
        original.episode_id,
    )
    assert (
        "connection reset" in record.failure.failure_reason
        and "'policy' died" in record.failure.failure_reason
    )
    assert not counts_against_budget(saved, BudgetPolicy(3))
    assert not establishes_progress(saved, BudgetPolicy(3))


def _as_saved(record: RolloutFailureRecord) -> SavedOutcome:
    kind = record.failure.failure_kind
    return SavedOutcome(
        record.episode_id.attempt,
        "failure",
        0,
        terminal=record.failure.terminal,
        delivery=record.delivery,
        failure_kind=kind,
        failure_class=kind,
    )


def test_events_round_trip_through_the_channel_format() -> None:
    """An event encodes to one JSON line and parses back equal."""
    for event in (
        WATCH,
        HEALTHY_10,
        DOWN_12,
        UP_15,
        STOPPING_30,
        ServerEvent("gave_up", 1.0, server="policy"),
        ServerEvent("share", 1.0, share=0.25),
    ):
        line = event.encode()
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert parse_event(line) == event


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (b'{"v": 3, "kind": "healthy", "at": 1}', "version 3"),
        (b'{"v": 1, "kind": "healthy", "at": 1, "extra": 0}', "extra"),
        (b'{"v": 1, "kind": "exploded", "at": 1}', "malformed"),
        (b'{"v": 1, "kind": "healthy"}', "malformed"),
        (b"not json", "not valid JSON"),
        (b'{"v": 2, "kind": "share", "at": 1}', "malformed"),
        (b'{"v": 2, "kind": "share", "at": 1, "share": 0}', "malformed"),
        (b'{"v": 2, "kind": "share", "at": 1, "share": 1.5}', "malformed"),
    ],
    ids=[
        "another version",
        "an unknown field",
        "an unknown kind",
        "no time",
        "not JSON",
        "a share event without its share",
        "a share of 0",
        "a share above 1",
    ],
)
def test_a_bad_event_is_refused_with_the_version_checked_first(line: bytes, match: str) -> None:
    """The channel's format is validated in one place: version first, then fields."""
    with pytest.raises(SupervisionError, match=match):
        parse_event(line)


def test_a_version_1_event_still_reads() -> None:
    """A line of version 1 (before the ``share`` event) is read as it was."""
    assert parse_event(b'{"v": 1, "kind": "up", "at": 1, "server": "policy"}') == ServerEvent(
        "up", 1.0, server="policy"
    )


def test_restarts_and_give_up_are_folded_into_the_timeline() -> None:
    """``up`` ends the outage and records the restart count; ``gave_up`` names the server."""
    folded = timeline(WATCH, DOWN_12)
    assert folded.down
    folded.apply(UP_15)
    assert not folded.down and folded.restarts == {"policy": 1}
    folded.apply(ServerEvent("gave_up", 40.0, server="policy"))
    assert folded.gave_up == "policy"


def test_the_breaker_streak_probes_after_threshold_different_rollouts() -> None:
    """Transport failures are held until ``threshold`` different rollouts failed in a row; the same
    rollout twice counts once; an answer from the server breaks the streak."""
    from gymslurm.supervision import Streak

    streak = Streak(3)
    assert [streak.add("a"), streak.add("a"), streak.add("b")] == ["hold", "hold", "hold"]
    assert streak.add("c") == "probe"
    streak.broken()
    assert streak.add("d") == "hold"


@pytest.mark.parametrize(
    ("source", "kind", "transport"),
    [
        ("collector", "transport_peer_drop", True),
        ("collector", "transport_unreachable", True),
        ("collector", "transport_timeout", True),
        ("environment", "transport_peer_drop", False),
        ("collector", "environment_protocol_violation", False),
    ],
    ids=[
        "a dropped connection",
        "a refused connection",
        "a timeout",
        "a kind the server reported",
        "a protocol violation",
    ],
)
def test_only_what_the_collector_saw_on_the_wire_is_a_transport_failure(
    source: str, kind: str, transport: bool
) -> None:
    """The breaker weighs only failures where the server gave no answer."""
    from gymslurm.supervision import is_transport_failure

    failure = EpisodeFailure(failure_reason="x", terminal=False, failure_kind=kind)
    record = RolloutFailureRecord(
        episode_id=EpisodeId(rollout_id="r"),
        run_id="run",
        source=source,  # type: ignore[arg-type]
        delivery="possibly_delivered" if source == "collector" else "delivered",
        failure=failure,
    )
    assert is_transport_failure(record) is transport
