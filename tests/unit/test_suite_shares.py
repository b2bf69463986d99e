"""A suite link's shares kept to the benchmarks' work left (job/shares.py): read from the collectors'
live progress records, told through their supervision channels (real files, real pipes)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gymslurm.job import shares as shares_mod
from gymslurm.job.shares import ShareKeeper, work_of
from gymslurm.launcher.suite_rules import Work
from gymslurm.store.live import LiveProgress, progress_path, write_progress
from gymslurm.supervision import ServerEvent, parse_event


@dataclass
class Job:
    """A running collector as the keeper sees it: its name and the write end of its channel."""

    name: str
    channel: int | None
    read_end: int = -1

    def told(self) -> list[ServerEvent]:
        """Every event written to its channel so far."""
        os.set_blocking(self.read_end, False)
        try:
            raw = os.read(self.read_end, 65536)
        except BlockingIOError:
            raw = b""
        return [parse_event(line + b"\n") for line in raw.split(b"\n") if line.strip()]


@pytest.fixture
def jobs() -> Iterator[dict[str, Job]]:
    """Two collectors, each with its own pipe."""
    out = {}
    for name in ("fast", "slow"):
        read_end, write_end = os.pipe()
        out[name] = Job(name, write_end, read_end)
    yield out
    for job in out.values():
        for fd in (job.read_end, job.channel):
            if fd is not None:
                os.close(fd)


def _record(output: Path, *, expected: int, finished: int, in_flight_s: float, requests: int) -> None:
    """The collector's live progress record beside ``output``, as the collector writes it."""
    output.parent.mkdir(parents=True, exist_ok=True)
    record = LiveProgress(
        written_at="2026-12-07T17:00:00Z",
        epoch=0.0,
        pid=1,
        expected=expected,
        successful=finished,
        failed=0,
        intentionally_omitted=0,
        in_flight=2,
        new_outcomes=finished,
        started_epoch=0.0,
        rate_per_s=1.0,
        in_flight_s=in_flight_s,
        requests=requests,
    )
    write_progress(progress_path(output), record)


def _keeper(tmp_path: Path) -> ShareKeeper:
    outputs = {name: tmp_path / name / "rollouts.jsonl" for name in ("fast", "slow")}
    return ShareKeeper({"fast": 1.0, "slow": 1.0}, outputs)


def test_a_benchmarks_work_is_read_from_its_collectors_live_progress_record(tmp_path: Path) -> None:
    """Rollouts left and the mean time in flight of the requests sent; none without a record."""
    output = tmp_path / "fast" / "rollouts.jsonl"
    assert work_of(output) is None
    _record(output, expected=40, finished=10, in_flight_s=5.0, requests=20)
    assert work_of(output) == Work(30, 0.25)


def test_a_collector_is_told_its_new_share_once_the_work_left_differs(
    tmp_path: Path, jobs: dict[str, Job]
) -> None:
    """The slow benchmark (4 s a rollout beside 0.25 s, as many left) is told a small share, the fast
    one the rest, each through its own channel."""
    keeper = _keeper(tmp_path)
    assert keeper.initial() == {"fast": 0.5, "slow": 0.5}  # nothing recorded yet: by weight
    _record(tmp_path / "fast" / "rollouts.jsonl", expected=40, finished=10, in_flight_s=5.0, requests=20)
    _record(tmp_path / "slow" / "rollouts.jsonl", expected=40, finished=10, in_flight_s=8.0, requests=2)
    keeper.round(jobs.values())
    [fast], [slow] = jobs["fast"].told(), jobs["slow"].told()
    assert (fast.kind, slow.kind) == ("share", "share")
    assert fast.share == pytest.approx(16 / 17)
    assert slow.share == pytest.approx(1 / 17)


def test_a_share_that_barely_moved_is_not_told_again(
    tmp_path: Path, jobs: dict[str, Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within a tenth of itself, a share is not sent again; nor is anything before the next round."""
    monkeypatch.setattr(shares_mod, "EVERY_S", 0.0)
    keeper = _keeper(tmp_path)
    keeper.initial()
    _record(tmp_path / "fast" / "rollouts.jsonl", expected=40, finished=10, in_flight_s=5.0, requests=20)
    _record(tmp_path / "slow" / "rollouts.jsonl", expected=40, finished=10, in_flight_s=5.5, requests=20)
    keeper.round(jobs.values())
    assert jobs["fast"].told() == [] and jobs["slow"].told() == []


def test_the_last_collector_running_is_given_the_whole_server_again(
    tmp_path: Path, jobs: dict[str, Job]
) -> None:
    """Its partners ended: the one still running gets share 1 (its share caps nothing then)."""
    keeper = _keeper(tmp_path)
    keeper.told = {"fast": 0.9, "slow": 0.1}
    keeper.round([jobs["slow"]])
    [event] = jobs["slow"].told()
    assert event.share == 1.0
