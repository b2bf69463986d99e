"""The watch's pure rules: when a checkpoint is ready, its identity, what each checkpoint needs next."""

from __future__ import annotations

from typing import Any

import pytest

from gymslurm.errors import ConfigError
from gymslurm.watch_rules import (
    TICKS_ASKED,
    Candidate,
    CheckpointState,
    FileEntry,
    FinderSettings,
    TickPlan,
    digest,
    fold,
    new_checkpoints,
    next_step,
    parse_interval,
    ready,
    recent_ticks,
    references,
    ticks_to_queue,
    uses_checkpoint,
    with_checkpoint,
)

NOW = 1_000_000.0


def _candidate(name: str, *files: tuple[str, int, float]) -> Candidate:
    return Candidate(f"/ck/{name}", name, tuple(FileEntry(*f) for f in files))


@pytest.mark.parametrize(
    ("finder", "candidate", "expected"),
    [
        # marker: ready only once the marker file is inside
        (FinderSettings("marker"), _candidate("step_1", ("model.bin", 9, NOW)), False),
        (FinderSettings("marker"), _candidate("step_1", ("model.bin", 9, NOW), ("READY", 0, NOW)), True),
        (FinderSettings("marker", marker=".done"), _candidate("s", ("READY", 0, NOW)), False),
        # pattern: the name alone says it is complete; a temporary name is not
        (FinderSettings("pattern", pattern="step_*"), _candidate("step_2", ("m", 1, NOW)), True),
        (FinderSettings("pattern", pattern="step_*"), _candidate("tmp_step_2", ("m", 1, NOW)), False),
        (FinderSettings("pattern", pattern="step_[0-9]*"), _candidate("step_2.tmp", ("m", 1, NOW)), True),
        # settle: nothing changed for settle_s seconds (the newest file counts)
        (FinderSettings("settle", settle_s=60), _candidate("a", ("m", 1, NOW - 61)), True),
        (FinderSettings("settle", settle_s=60), _candidate("a", ("m", 1, NOW - 59)), False),
        (
            FinderSettings("settle", settle_s=60),
            _candidate("a", ("m", 1, NOW - 600), ("n", 1, NOW - 5)),
            False,
        ),
        (FinderSettings("settle", settle_s=60), _candidate("a", ("m", 1, NOW - 60)), True),
        # every rule: an empty folder is never a checkpoint, and the pattern filters names
        (FinderSettings("settle", settle_s=0), _candidate("empty"), False),
        (FinderSettings("pattern"), _candidate("empty"), False),
        (FinderSettings("marker", pattern="step_*"), _candidate("other", ("READY", 0, NOW)), False),
    ],
)
def test_ready_by_rule(finder: FinderSettings, candidate: Candidate, expected: bool) -> None:
    """A candidate is a finished checkpoint by the marker, pattern or settle rule (table)."""
    assert ready(candidate, finder, NOW) is expected


def test_digest_is_the_path_alone() -> None:
    """A checkpoint's identity is its path: files added later do not make it a new checkpoint."""
    assert digest("/ck/step_1") == digest("/ck/step_1")
    assert digest("/ck/step_1") != digest("/ck/step_2")
    assert len(digest("/ck/step_1")) == 16


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("5m", 300), ("1h", 3600), ("90", 90), ("10", 10)]
)
def test_parse_interval(text: str, seconds: int) -> None:
    """--every takes seconds, minutes or hours."""
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["5", "0m", "soon", "5d", "-1m", ""])
def test_parse_interval_refuses(text: str) -> None:
    """An interval under 10 s or not a duration is a clear error."""
    with pytest.raises(ConfigError, match="--every"):
        parse_interval(text)


def _records(*entries: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"kind": kind, **fields} for kind, fields in entries]


def test_fold_keeps_the_first_claim_and_the_first_run() -> None:
    """A duplicate claim or a second 'submitted' of one checkpoint changes nothing: one run each."""
    state = fold(
        _records(
            ("claimed", {"digest": "a", "checkpoint": "/ck/1"}),
            ("claimed", {"digest": "a", "checkpoint": "/ck/1"}),
            ("submitted", {"digest": "a", "run": "/runs/r1"}),
            ("submitted", {"digest": "a", "run": "/runs/r2"}),
            ("submitted", {"digest": "zz", "run": "/runs/stray"}),
            ("tick", {"job": "7"}),
            ("scheduled", {"job": "8"}),
        )
    )
    assert list(state.checkpoints) == ["a"]
    assert state.checkpoints["a"].run == "/runs/r1"
    assert state.ticks == ["7", "8"]
    assert not state.cancelled


def test_fold_cancelled() -> None:
    """A 'cancelled' record makes the watch cancelled."""
    assert fold(_records(("cancelled", {}))).cancelled


def _state(**fields: Any) -> CheckpointState:
    return CheckpointState("d", "/ck/1", 0, **fields)


@pytest.mark.parametrize(
    ("checkpoint", "converts", "ended", "step"),
    [
        (_state(), False, False, "submit"),
        (_state(), True, False, "convert"),
        (_state(convert_job="5"), True, False, "check_convert"),
        (_state(convert_job="5", run="/r"), True, True, "check_convert"),  # afterok: not compared yet
        (_state(convert_job="5", run="/r", converted="/out"), True, False, "await_run"),
        (_state(convert_job="5", run="/r", converted="/out"), True, True, "compare"),
        (_state(convert_job="5", converted="/out"), True, False, "submit"),
        (_state(convert_job="5", convert_failed="died"), True, False, "failed"),
        (_state(run="/r"), False, False, "await_run"),
        (_state(run="/r"), False, True, "compare"),
        (_state(run="/r", compared={"score": 0.5}), False, True, "done"),
    ],
)
def test_next_step(checkpoint: CheckpointState, converts: bool, ended: bool, step: str) -> None:
    """Each checkpoint goes convert -> (its conversion checked) -> submit -> await its run -> compare
    -> done; on Slurm its run is submitted with the conversion job, which is checked first (table)."""
    assert next_step(checkpoint, converts, ended) == step


def test_new_checkpoints_skips_claimed_and_duplicates() -> None:
    """Only paths not claimed yet, each once, sorted."""
    state = fold(_records(("claimed", {"digest": digest("/ck/2"), "checkpoint": "/ck/2"})))
    assert new_checkpoints(state, ["/ck/3", "/ck/2", "/ck/1", "/ck/3"]) == ["/ck/1", "/ck/3"]


@pytest.mark.parametrize(
    ("ticks", "pending", "me", "after", "begins"),
    [
        (["1"], [], "1", None, (10, 20)),  # only me: the next and its spare behind it
        (["1", "2", "3"], ["2", "3"], "1", None, ()),  # two queued: none more
        (["1", "2", "3"], ["3"], "1", "3", (20,)),  # the next killed: its spare waits; one more after it
        (["1", "2", "3"], ["2"], "1", "2", (20,)),  # the spare killed: one more after the next
        (["2", "3", "4"], ["3", "4"], "2", None, ()),  # the next runs: the spare is queued, and one more
        (["1", "2"], ["2", "9"], "1", "2", (20,)),  # a job the watch never recorded is no spare
        (["1", "2", "2"], ["2"], "1", "2", (20,)),  # a job recorded twice counts once
        ([], [], "h", None, (10, 20)),  # a tick submitted by hand on an empty ledger
    ],
)
def test_ticks_to_queue(
    ticks: list[str], pending: list[str], me: str, after: str | None, begins: tuple[int, ...]
) -> None:
    """Two ticks queued behind the running one, the first new one afterany the last queued, each one
    interval later: any single tick job lost leaves one that runs (table)."""
    assert ticks_to_queue(ticks, pending, me, 10) == TickPlan(after, begins)


def test_a_running_tick_is_no_spare() -> None:
    """A tick running beside me (it may be the one killed next) does not count as queued: two more."""
    assert ticks_to_queue(["1", "2"], [], "1", 10) == TickPlan(None, (10, 20))


def test_recent_ticks_are_bounded() -> None:
    """However old the watch, the scheduler is asked about its newest tick jobs only, each once."""
    ticks = [str(n) for n in range(1000)] + ["999"]
    assert recent_ticks(ticks) == [str(n) for n in range(999, 999 - TICKS_ASKED, -1)]


def test_references_previous_and_best() -> None:
    """The previous compared checkpoint's run, and the run of the highest score."""
    state = fold(
        _records(
            *(("claimed", {"digest": d, "checkpoint": f"/ck/{d}"}) for d in "abc"),
            *(("submitted", {"digest": d, "run": f"/r/{d}"}) for d in "abc"),
            ("compared", {"digest": "a", "result": {"score": 0.4}}),
            ("compared", {"digest": "b", "result": {"score": 0.9}}),
            ("compared", {"digest": "c", "result": {"score": 0.6}}),
        )
    )
    assert references(state) == ("/r/c", "/r/b")
    assert references(fold([])) == (None, None)


def test_checkpoint_placeholder() -> None:
    """{checkpoint} is replaced wherever it appears in a suite's data, and its absence is seen."""
    stack = [{"command": ["serve", "--model", "{checkpoint}"], "env": {"CKPT": "{checkpoint}/hf"}}]
    assert with_checkpoint(stack, "/ck/1") == [
        {"command": ["serve", "--model", "/ck/1"], "env": {"CKPT": "/ck/1/hf"}}
    ]
    assert uses_checkpoint(stack)
    assert not uses_checkpoint([{"command": ["serve"]}])


@pytest.mark.parametrize(
    ("scron", "says"),
    [
        ("(null)", "scrontab is not enabled"),
        ("enable", "scrontab is enabled too"),
        ("enable,explicit_scancel", "scrontab is enabled too"),
        ("explicit_scancel", "scrontab is not enabled"),
    ],
)
def test_doctor_says_how_a_watch_is_kept_alive(scron: str, says: str) -> None:
    """doctor: a watch is a self-queuing tick job on every site, and whether scrontab is enabled too."""
    from gymslurm.site.watch_site import watch_rules

    (finding,) = watch_rules({"ScronParameters": scron})
    assert finding.setting == "watch" and "sbatch --begin" in finding.value and says in finding.value


def test_a_checkpoint_is_compared_only_after_every_earlier_one() -> None:
    """A later checkpoint whose run ended first waits for the earlier ones' comparisons (or failures),
    so its "previous" is the checkpoint before it in claim order."""
    from gymslurm.watch_rules import earlier_compared

    records = [
        {"kind": "claimed", "digest": "a", "checkpoint": "/c/step_001"},
        {"kind": "claimed", "digest": "b", "checkpoint": "/c/step_002"},
        {"kind": "claimed", "digest": "c", "checkpoint": "/c/step_003"},
        {"kind": "convert_failed", "digest": "b", "reason": "bad"},
    ]
    state = fold(records)
    first, _, third = state.ordered()
    assert earlier_compared(state, first)
    assert not earlier_compared(state, third)
    state = fold([*records, {"kind": "compared", "digest": "a", "result": {"score": 0.5}}])
    assert earlier_compared(state, state.ordered()[2])
