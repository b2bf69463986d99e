"""Status never calls a chain STALLED while someone is about to move it (issue 32): a link that outlived
its job (fresh heartbeat, link lock held) is live, and a shard whose first link a killed submit's
queuing has not reached yet is waiting; the lock is looked at without being taken."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymslurm.launcher.ledger import Started, Submitted, summarize
from gymslurm.launcher.views.status import outlived_link, verdict
from gymslurm.store.flock import held_here, try_lock
from gymslurm.store.live import Heartbeat

NOW = 1_780_000_100.0
OPEN = summarize([Submitted(job_id="7"), Started(job_id="7")])


def _beat(job: str = "7", age_s: float = 5.0, restart: int = 0) -> Heartbeat:
    return Heartbeat(
        job_id=job, restart_count=restart, start="s", at="a", epoch=NOW - age_s, interval_s=15.0, pid=1
    )


@pytest.mark.parametrize(
    ("beat", "lock", "live"),
    [
        (_beat(), True, "7"),
        (_beat(), None, "7"),  # the lock is on another host: the fresh heartbeat alone
        (_beat(), False, None),  # nobody holds the lock: the link is dead, whatever its last beat
        (_beat(age_s=31.0), True, None),  # silent for more than two beats
        (_beat(job="8"), True, None),  # another job's heartbeat
        (_beat(restart=1), True, None),  # another run of the job
        (None, True, None),
    ],
    ids=["fresh-held", "fresh-elsewhere", "lock-free", "stale", "other-job", "other-run", "no-beat"],
)
def test_a_link_outlived_its_job_when_its_run_beats_and_holds_the_lock(
    beat: Heartbeat | None, lock: bool | None, live: str | None
) -> None:
    """The rule, row by row."""
    assert outlived_link(OPEN, beat, lock, NOW) == live


def test_an_outlived_link_is_healthy_never_stalled() -> None:
    """No live job in the queue: STALLED, unless a link outlived its job."""
    assert verdict(OPEN, [])[0] == "STALLED"
    word, why = verdict(OPEN, [], outlived="7")
    assert word == "HEALTHY" and "outlived its job" in why


def test_a_shard_not_queued_yet_waits_while_the_queuing_is_completed() -> None:
    """A killed submit's mark: a shard with no job yet is WAITING with the reason given, not STALLED;
    a shard that had jobs is judged by them."""
    reason = "submit was killed before it queued this shard's first link; the queuing is being completed"
    assert verdict(summarize([]), [], queuing=reason) == ("WAITING", reason)
    assert verdict(OPEN, [], queuing=reason)[0] == "STALLED"


def test_the_lock_is_seen_held_without_being_taken(tmp_path: Path) -> None:
    """held_here lists a flock of this host's processes from /proc/locks; it never takes the lock."""
    path = tmp_path / "link.lock"
    assert held_here(path) is False  # no such file: nobody holds it
    fd = try_lock(path)
    assert fd is not None
    assert held_here(path) is True
    os.close(fd)
    assert held_here(path) is False
    again = try_lock(path)  # looking never took it
    assert again is not None
    os.close(again)
