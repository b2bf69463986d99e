"""The live progress record and the heartbeat (gymslurm/store/live.py), and the stall rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymslurm.collector.live import is_stalled
from gymslurm.errors import ManifestError
from gymslurm.store.live import (
    Heartbeat,
    LiveProgress,
    read_heartbeat,
    read_progress,
    write_heartbeat,
    write_progress,
)

RECORD = LiveProgress(
    written_at="2026-12-01T10:00:00+00:00",
    epoch=1.0,
    pid=1,
    expected=10,
    successful=3,
    failed=1,
    intentionally_omitted=0,
    in_flight=2,
    new_outcomes=4,
    started_epoch=0.0,
    rate_per_s=4.0,
)
BEAT = Heartbeat(job_id="7", start="s", at="a", epoch=1.0, interval_s=15, pid=2)

STALL_ROWS = [
    ("requests in flight and quiet for the window: stalled", 2, 30.0, 30.0, True),
    ("quiet for less than the window: not stalled", 2, 29.9, 30.0, False),
    ("nothing in flight (between retries, draining): not stalled", 0, 999.0, 30.0, False),
    ("no window configured: never stalled", 5, 1e9, None, False),
]


@pytest.mark.parametrize(
    ("name", "in_flight", "quiet", "window", "expected"), STALL_ROWS, ids=[r[0] for r in STALL_ROWS]
)
def test_stall_rule(name: str, in_flight: int, quiet: float, window: float | None, expected: bool) -> None:
    """A collection is stalled exactly when requests are in flight and nothing was saved for the window."""
    assert is_stalled(in_flight, quiet, window) is expected


def test_progress_record_round_trips_and_pins_its_fields(tmp_path: Path) -> None:
    """Version 2 of <stem>_progress.json has exactly these fields and reads back equal."""
    path = tmp_path / "out_progress.json"
    write_progress(path, RECORD)
    assert sorted(json.loads(path.read_text())) == sorted(
        [
            "format_version",
            "written_at",
            "epoch",
            "job_id",
            "pid",
            "expected",
            "successful",
            "failed",
            "intentionally_omitted",
            "in_flight",
            "interrupted",
            "new_outcomes",
            "started_epoch",
            "rate_per_s",
            "oldest_in_flight_s",
            "last_outcome_age_s",
            "stalled",
            "ended",
            "busy_s",
            "in_flight_s",
            "requests",
        ]
    )
    assert read_progress(path) == RECORD and RECORD.finished == 4
    assert json.loads(path.read_text())["format_version"] == 2


def test_a_version_1_progress_record_still_reads_with_nothing_measured(tmp_path: Path) -> None:
    """A record written before version 2 (a link that ran an older collector) reads: no time in
    flight, no requests counted, so a suite link weighs that benchmark as a typical one."""
    path = tmp_path / "out_progress.json"
    raw = {**RECORD.model_dump(mode="json"), "format_version": 1}
    del raw["in_flight_s"], raw["requests"]
    path.write_text(json.dumps(raw))
    read = read_progress(path)
    assert read is not None and (read.format_version, read.in_flight_s, read.requests) == (1, 0.0, 0)


def test_heartbeat_round_trips(tmp_path: Path) -> None:
    """The heartbeat reads back equal; a missing one reads as None."""
    path = tmp_path / "shards" / "000" / "heartbeat.json"
    assert read_heartbeat(path) is None
    write_heartbeat(path, BEAT)
    assert read_heartbeat(path) == BEAT


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not valid JSON"),
        ('{"format_version": 2}', "is version 2"),
        ('{"format_version": 1, "job_id": "1"}', "is malformed"),
    ],
)
def test_unreadable_live_files_raise_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    """A torn, foreign-version or malformed record raises ManifestError naming the file."""
    path = tmp_path / "heartbeat.json"
    path.write_text(text)
    with pytest.raises(ManifestError, match=message) as caught:
        read_heartbeat(path)
    assert str(path) in str(caught.value)
