"""One version gate (formats.py): every reader refuses a version it does not read, in one voice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from gymslurm.errors import GymslurmError
from gymslurm.formats import FORMATS, json_object, version_problem, versioned_object
from gymslurm.launcher.ledger import parse_record
from gymslurm.store import live
from gymslurm.store.files import read_coverage, read_gymslurm_metrics
from gymslurm.store.history import failure_row_problem
from gymslurm.store.manifest import parse_manifest
from gymslurm.store.paths import RunPaths
from gymslurm.store.reservations import HEADER, MAGIC, ReservationTable
from gymslurm.supervision import parse_event

FUTURE = 99


def _manifest(tmp: Path) -> None:
    parse_manifest(tmp / "m.json", orjson.dumps({"format_version": FUTURE}))


def _coverage(tmp: Path) -> None:
    paths = RunPaths.for_output(tmp / "out.jsonl")
    paths.coverage.write_bytes(orjson.dumps({"format_version": FUTURE, "successful": 1}))
    read_coverage(paths)


def _ledger(tmp: Path) -> None:
    parse_record(orjson.dumps({"v": FUTURE, "kind": "start"}), "ledger.jsonl:1")


def _event(tmp: Path) -> None:
    parse_event(orjson.dumps({"v": FUTURE, "kind": "up", "at": 0}))


def _reservations(tmp: Path) -> None:
    path = tmp / "reservations.bin"
    path.write_bytes(HEADER.pack(MAGIC, FUTURE, 0, 1, b"run-x") + bytes(4))
    ReservationTable(path, "run-x", 1)


def _gymslurm_metrics(tmp: Path) -> None:
    (tmp / "m.json").write_bytes(orjson.dumps({"format_version": FUTURE, "metrics": {}}))
    read_gymslurm_metrics(tmp / "m.json")


def _live(kind: str) -> Callable[[Path], None]:
    def read(tmp: Path) -> None:
        (tmp / "live.json").write_bytes(orjson.dumps({"format_version": FUTURE}))
        (live.read_progress if kind == "progress" else live.read_heartbeat)(tmp / "live.json")

    return read


def _rewards(tmp: Path) -> None:
    from gymslurm.store.rewards import read_reward_histogram

    paths = RunPaths.for_output(tmp / "merged.jsonl")
    (tmp / "merged_rewards.json").write_bytes(orjson.dumps({"format_version": FUTURE, "tasksets": []}))
    read_reward_histogram(paths)


def _suite_metrics(tmp: Path) -> None:
    from gymslurm.store.suite_metrics import read_suite_metrics

    (tmp / "suite_metrics.json").write_bytes(orjson.dumps({"format_version": FUTURE, "benchmarks": []}))
    read_suite_metrics(tmp)


def _comparison(tmp: Path) -> None:
    from gymslurm.gate import parse_comparison

    parse_comparison(orjson.dumps({"format_version": FUTURE, "benchmarks": []}), "saved.json")


def _watch(tmp: Path) -> None:
    from gymslurm.store.watch_ledger import WatchFolder

    (tmp / "watch.json").write_bytes(orjson.dumps({"format_version": FUTURE, "name": "w"}))
    WatchFolder(tmp).read_settings()


def _watch_ledger(tmp: Path) -> None:
    from gymslurm.store.watch_ledger import WatchFolder

    (tmp / "ledger.jsonl").write_bytes(orjson.dumps({"v": FUTURE, "kind": "tick", "at": "x"}) + b"\n")
    WatchFolder(tmp).read()


def _failure_record(tmp: Path) -> None:
    problem = failure_row_problem({"_ng_failure_record": {"schema_version": FUTURE}}, 0)
    raise GymslurmError(str(problem))


def _tally(tmp: Path) -> None:
    from gymslurm.store.tally import RunTally

    (tmp / "tally.jsonl").write_bytes(orjson.dumps({"v": FUTURE, "event": "spent"}) + b"\n")
    RunTally(tmp / "tally.jsonl").read()


READERS: dict[str, Callable[[Path], None]] = {
    "run_tally": _tally,
    "manifest": _manifest,
    "coverage": _coverage,
    "ledger": _ledger,
    "supervision_event": _event,
    "reservations": _reservations,
    "failure_record": _failure_record,
    "gymslurm_metrics": _gymslurm_metrics,
    "progress": _live("progress"),
    "heartbeat": _live("heartbeat"),
    "rewards": _rewards,
    "suite_metrics": _suite_metrics,
    "comparison": _comparison,
    "watch": _watch,
    "watch_ledger": _watch_ledger,
}


@pytest.mark.parametrize("kind", sorted(READERS))
def test_every_reader_refuses_a_future_version_in_one_voice(kind: str, tmp_path: Path) -> None:
    """Version 99 of any format is refused, naming the version found and the one this gymslurm reads."""
    fmt = FORMATS[kind]
    reads = f"version {fmt.version} only" if not fmt.older else "versions " + ", ".join(map(str, fmt.read))
    with pytest.raises(GymslurmError, match=rf"is version {FUTURE} .*reads {reads}:"):
        READERS[kind](tmp_path)


@pytest.mark.parametrize("found", [None, "1", True, 1.0, 0])
def test_only_the_exact_integer_version_passes(found: object) -> None:
    """A missing, textual, boolean, float or other version is not version 1."""
    assert version_problem("coverage", found) is not None
    assert version_problem("coverage", 1) is None


def test_every_written_format_is_in_the_table() -> None:
    """The formats docs/formats.md versions are exactly the gate's table."""
    assert sorted(FORMATS) == sorted(
        [
            "manifest",
            "reservations",
            "failure_record",
            "coverage",
            "aggregate_coverage",
            "health",
            "ledger",
            "supervision_event",
            "gymslurm_metrics",
            "progress",
            "heartbeat",
            "rewards",
            "suite_metrics",
            "run_summary",
            "finished_seal",
            "outcome_index",
            "run_info",
            "array",
            "status",
            "report",
            "run_tally",
            "adoptions",
            "comparison",
            "gate",
            "watch",
            "watch_ledger",
        ]
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{oops", r"^d\.jsonl:2 is not valid JSON \(.*\): fix it$"),
        (b"[1]", r"^d\.jsonl:2 is a JSON list, not an object: fix it$"),
        (b'"v"', r"^d\.jsonl:2 is a JSON str, not an object: fix it$"),
    ],
    ids=["not JSON", "a list", "a string"],
)
def test_bad_bytes_are_refused_naming_the_place_and_the_remedy(raw: bytes, message: str) -> None:
    """json_object: bytes that are not one JSON object raise the caller's error, place and remedy named."""
    with pytest.raises(ValueError, match=message):
        json_object(raw, "d.jsonl:2", ValueError, "fix it")


def test_a_versioned_object_is_checked_on_its_own_version_field() -> None:
    """versioned_object checks the field FORMATS names (``v`` for the ledger), then gives the object."""
    assert versioned_object(b'{"v": 3, "kind": "start"}', "ledger", "l:1", ValueError, "r") == {
        "v": 3,
        "kind": "start",
    }
    with pytest.raises(ValueError, match=r"^l:1: the chain ledger is version 99"):
        versioned_object(b'{"v": 99, "format_version": 3}', "ledger", "l:1", ValueError, "r")
