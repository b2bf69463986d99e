"""The outcome index (store/outcome_index.py): a reconcile takes what it verifies and reads only the rest.

Every test compares a reconcile that uses the index with one that reads every row (the index moved
aside): the index may make a reconcile faster, never different.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from gymslurm import redaction
from gymslurm.errors import CorruptRecordError
from gymslurm.records import EpisodeFailure, EpisodeId, RolloutFailureRecord
from gymslurm.store import RunPaths, RunSpec, RunStore
from gymslurm.store import outcome_index as index_module
from gymslurm.store.history import History

DIGEST = "sha256:" + "2" * 64
ROLLOUTS = 6


def inputs(count: int = ROLLOUTS) -> list[dict[str, Any]]:
    return [
        {
            "_ng_rollout_id": f"ix-t{i}",
            "_ng_task_index": i,
            "_ng_rollout_index": 0,
            "task_id": {"taskset": "ix", "task_id": f"t{i}"},
            "task_input": {"question": f"q{i}"},
        }
        for i in range(count)
    ]


def create(paths: RunPaths) -> RunStore:
    spec = RunSpec(
        source_path="d",
        source_digest=DIGEST,
        inputs=inputs(),
        identity={},
        config_digest=DIGEST,
        max_rollout_attempts=4,
    )
    store = RunStore.create_fresh(paths, spec)
    store.reconcile()
    return store


def fail(
    store: RunStore, index: int, *, terminal: bool = False, kind: str | None = "transport_timeout"
) -> None:
    attempt = store.reserve(index)
    record = RolloutFailureRecord(
        episode_id=EpisodeId(rollout_id=store.rollout_ids()[index], attempt=attempt),
        run_id=store.run_id,
        source="collector",
        delivery="possibly_delivered",
        failure=EpisodeFailure(failure_reason="upstream timed out", terminal=terminal, failure_kind=kind),
    )
    store.append_failure(index, attempt, record, response={"output": "partial"} if terminal else None)


def save(store: RunStore, index: int, **result: Any) -> None:
    store.append_result(index, store.reserve(index), result)


def every_kind(store: RunStore) -> None:
    """One of each saved outcome: plain, int, None, -0.0 and huge rewards, masks, failures, omissions."""
    fail(store, 0)
    save(store, 0, reward=1.0)
    save(store, 1, reward=1)
    save(store, 2, reward=None, response={"output": "no grade"})
    save(store, 3, reward=-0.0)
    save(store, 4, reward=0.5, mask_sample=True, failure_kind="verifier_error")
    fail(store, 5, terminal=True, kind=None)
    store.append_omission(5, store.reserve(5))
    save(store, 1, reward=2**60)


@pytest.fixture
def paths(tmp_path: Path) -> RunPaths:
    return RunPaths.for_output(tmp_path / "run.jsonl")


def read(paths: RunPaths) -> History:
    store = RunStore.open(paths, writable=False)
    try:
        return store.read_history()
    finally:
        store.close()


def read_every_row(paths: RunPaths) -> History:
    """The history read with the index moved aside (and put back)."""
    aside = paths.outcome_index.with_name("aside.bin")
    os.replace(paths.outcome_index, aside)
    try:
        return read(paths)
    finally:
        os.replace(aside, paths.outcome_index)


def same(left: History, right: History) -> bool:
    """Equal outcomes in the same order per rollout, equal reports of each file's end."""
    return (
        [left.outcomes(i) == right.outcomes(i) for i in range(ROLLOUTS)] == [True] * ROLLOUTS
        and [type(o.reward) for i in range(ROLLOUTS) for o in left.outcomes(i)]
        == [type(o.reward) for i in range(ROLLOUTS) for o in right.outcomes(i)]
        and left.results_tail == right.results_tail
        and left.failures_tail == right.failures_tail
        and left.failure_lines == right.failure_lines
    )


def count_parsed_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every saved row the store parses from now on (rows, not its other files)."""
    parsed = [0]
    loads = orjson.loads

    def counting(data: Any) -> Any:
        parsed[0] += b'"_ng_run_id"' in bytes(data)
        return loads(data)

    monkeypatch.setattr(orjson, "loads", counting)
    return parsed


def test_a_closed_run_leaves_an_index_that_reads_as_every_row_does(paths: RunPaths) -> None:
    """Every kind of outcome (rewards of every type, masks, failures, omissions) reads back the same."""
    store = create(paths)
    every_kind(store)
    store.close()
    assert index_module.read_index(paths, store.run_id, ROLLOUTS) is not None
    assert same(read(paths), read_every_row(paths))
    assert read(paths).outcomes(3)[0].reward == 0.0 and str(read(paths).outcomes(3)[0].reward) == "-0.0"


def test_a_reconcile_parses_only_the_rows_after_the_index(
    paths: RunPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link killed after its first saves leaves the index of its start: the next reads only its rows."""
    store = create(paths)
    every_kind(store)
    store.close()
    killed = RunStore.open(paths)
    killed.reconcile()
    save(killed, 2, reward=0.25)  # the first save writes the index of what the reconcile read
    save(killed, 3, reward=0.75)
    fail(killed, 4)  # no close: killed
    parsed = count_parsed_rows(monkeypatch)
    history = read(paths)
    assert parsed[0] == 2  # the index holds the first save; the second and the failure are read
    monkeypatch.undo()
    assert same(history, read_every_row(paths))


def test_a_writer_that_saved_nothing_changes_no_byte(paths: RunPaths) -> None:
    """Reconciling without saving (a resume refused after it, a read) leaves every file as it was."""
    store = create(paths)
    every_kind(store)
    store.close()
    os.unlink(paths.outcome_index)
    before = {p.name: p.read_bytes() for p in paths.folder.iterdir()}
    for writable in (True, False):
        reopened = RunStore.open(paths, writable=writable)
        reopened.reconcile()
        reopened.close()
    assert {p.name: p.read_bytes() for p in paths.folder.iterdir()} == before


def test_an_edit_inside_the_covered_rows_is_read_from_the_rows(paths: RunPaths) -> None:
    """A reward changed by hand (same length) is what the reconcile sees: the digest no longer matches."""
    store = create(paths)
    save(store, 0, reward=0.25)
    store.close()
    paths.results.write_bytes(paths.results.read_bytes().replace(b'"reward":0.25', b'"reward":0.75'))
    assert read(paths).outcomes(0)[0].reward == 0.75


@pytest.mark.parametrize(
    "change",
    [
        "truncated",
        "replaced",
        "other run",
        "damaged",
        "future version",
        "other reader",
        "short payload",
        "a flipped record",
        "a link",
    ],
)
def test_an_index_that_does_not_hold_is_ignored_never_an_error(
    paths: RunPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Whatever happened to the index or the files it covers, the reconcile reads every row instead."""
    store = create(paths)
    every_kind(store)
    store.close()
    expected = read_every_row(paths)
    data = paths.outcome_index.read_bytes()
    header, _, payload = data.partition(b"\n")
    fields = orjson.loads(header)
    if change == "truncated":
        paths.results.write_bytes(paths.results.read_bytes()[: len(paths.results.read_bytes()) // 2])
        expected = read_every_row(paths)
    elif change == "replaced":
        lines = paths.results.read_bytes().splitlines(keepends=True)
        paths.results.write_bytes(b"".join([lines[1], lines[0], *lines[2:]]))
        expected = read_every_row(paths)
    elif change == "other run":
        paths.outcome_index.write_bytes(orjson.dumps({**fields, "run_id": "run-other"}) + b"\n" + payload)
    elif change == "damaged":
        paths.outcome_index.write_bytes(b"\x00garbage\n" + payload)
    elif change == "future version":
        paths.outcome_index.write_bytes(orjson.dumps({**fields, "format_version": 99}) + b"\n" + payload)
    elif change == "other reader":
        monkeypatch.setattr(index_module, "reader_digest", lambda: "sha256-of-another-gymslurm")
    elif change == "short payload":
        paths.outcome_index.write_bytes(data[:-5])
    elif (
        change == "a flipped record"
    ):  # rollout 0's first result read as rollout 1's: same shape, other meaning
        first = data.index(b"\n") + 1
        paths.outcome_index.write_bytes(data[:first] + bytes([payload[0] ^ 1]) + data[first + 1 :])
    else:
        planted = tmp_path / "planted.bin"
        planted.write_bytes(data)
        paths.outcome_index.unlink()
        paths.outcome_index.symlink_to(planted)
    assert index_module.read_index(paths, store.run_id, ROLLOUTS) is None
    assert same(read(paths), expected)


def test_a_bad_row_after_the_index_is_refused_with_its_line(paths: RunPaths) -> None:
    """The rows after the index keep the reader's contract: a bad complete line names its line number."""
    store = create(paths)
    every_kind(store)
    store.close()
    lines = len(paths.results.read_bytes().splitlines())
    with open(paths.results, "ab") as handle:
        handle.write(b"{not json\n")
    with pytest.raises(CorruptRecordError, match=rf"line {lines + 1}: is not valid JSON"):
        read(paths)


def test_a_torn_tail_after_the_index_is_reported_and_the_index_still_holds(paths: RunPaths) -> None:
    """A torn last line is reported as before; the complete lines still come from the index."""
    store = create(paths)
    every_kind(store)
    store.close()
    with open(paths.results, "ab") as handle:
        handle.write(b'{"torn": ')
    history = read(paths)
    assert (
        history.results_tail.torn_bytes,
        index_module.read_index(paths, store.run_id, ROLLOUTS) is not None,
    ) == (
        9,
        True,
    )
    assert same(history, read_every_row(paths))


def test_a_row_with_a_secret_cut_out_leaves_no_index_of_it(paths: RunPaths) -> None:
    """A row the store wrote differently from what it was given (a learned secret cut out) is never
    indexed from the row as given: the index left covers what came before it."""
    store = create(paths)
    save(store, 0, reward=1.0)
    redaction.remember(["s3cr3t-value-for-the-index"])
    try:
        save(store, 1, reward=1.0, response={"output": "s3cr3t-value-for-the-index"})
        store.close()
    finally:
        redaction.forget_all()
    found = index_module.read_index(paths, store.run_id, ROLLOUTS)
    assert found is not None and found.log.sections["results"].lines == 1
    assert same(read(paths), read_every_row(paths))


def test_a_fresh_run_at_the_same_path_removes_the_index(paths: RunPaths) -> None:
    """A fresh collection over a run replaces its index with its own (a new run id)."""
    store = create(paths)
    every_kind(store)
    store.close()
    again = create(paths)
    assert not paths.outcome_index.exists()
    again.close()


def test_an_index_removed_under_its_writer_is_not_written_without_its_outcomes(paths: RunPaths) -> None:
    """The writer keeps where the indexed outcomes sit in the index file, not the outcomes: with that
    file gone it writes no index (a partial one would lose them), and the next reconcile reads every row."""
    store = create(paths)
    every_kind(store)
    store.close()
    writer = RunStore.open(paths)
    writer.reconcile()
    paths.outcome_index.unlink()
    save(writer, 2, reward=0.5)
    writer.close()
    assert not paths.outcome_index.exists()
    assert [len(read(paths).outcomes(i)) for i in range(ROLLOUTS)] == [2, 2, 2, 1, 1, 2]


def test_each_write_carries_the_outcomes_of_the_index_before_it(paths: RunPaths) -> None:
    """Three writers in turn (each writing at its first save and at close): the last index still
    holds the first writer's outcomes, read back from the file, not from memory."""
    store = create(paths)
    every_kind(store)
    store.close()
    for index in (2, 3):
        writer = RunStore.open(paths)
        writer.reconcile()
        save(writer, index, reward=0.125)
        save(writer, index, reward=0.25)
        writer.close()
    found = index_module.read_index(paths, store.run_id, ROLLOUTS)
    assert found is not None and found.log.sections["results"].lines == 10
    assert same(read(paths), read_every_row(paths))


def test_a_failed_index_write_costs_nothing_but_the_index(
    paths: RunPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk when the index is written: saving goes on, and the index written at close holds."""
    store = create(paths)
    save(store, 0, reward=1.0)  # the first save's write succeeds
    publish = index_module.publish_stream
    calls = [0]

    def full_disk(target: Path, chunks: Any) -> int:
        calls[0] += 1
        if calls[0] == 1:
            raise OSError(28, "No space left on device")
        return publish(target, chunks)

    monkeypatch.setattr(index_module, "publish_stream", full_disk)
    save(store, 2, reward=0.5)
    store.write_outcome_index()  # fails, silently: a cache
    every_kind(store)
    store.close()
    assert calls[0] == 2 and same(read(paths), read_every_row(paths))


def test_outcomes_that_hold_a_secret_learned_since_are_never_copied_into_an_index(paths: RunPaths) -> None:
    """A failure kind saved before its text was known to be a secret stays in the run's files, but
    the writer that learned it writes no index that would copy it to another file."""
    store = create(paths)
    fail(store, 0, kind="kind-with-s3cr3t-token-inside")
    store.close()
    paths.outcome_index.unlink()  # the next writer reads every row (the kind among them)
    redaction.remember(["s3cr3t-token"])
    try:
        writer = RunStore.open(paths)
        writer.reconcile()
        save(writer, 1, reward=1.0)
        writer.close()
    finally:
        redaction.forget_all()
    assert not paths.outcome_index.exists()
