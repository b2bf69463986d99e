"""The per-shard ledger: versioned append-only records, torn tails, and the fold into chain state."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import orjson
import pytest

from gymslurm.errors import CorruptRecordError
from gymslurm.formats import FORMATS, version_of
from gymslurm.launcher.decide import Budgets, Decision
from gymslurm.launcher.ledger import (
    BudgetsRecord,
    Cancelled,
    DecisionRecord,
    Injected,
    Ledger,
    LedgerVersion,
    Resubmitted,
    Started,
    Submitted,
    summarize,
)


def _decision(job: str, decision: Decision, after: Budgets, restart: int = 0) -> DecisionRecord:
    return DecisionRecord(
        job_id=job,
        restart_count=restart,
        end="t",
        elapsed_s=10.0,
        slurm_state="RUNNING",
        exit_code=75,
        decision=decision,
        reason="r",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord.of(after),
    )


def test_round_trip(tmp_path: Path) -> None:
    """Records read back equal to what was appended."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    records = [
        Submitted(job_id="1"),
        Started(job_id="1"),
        _decision("1", Decision.CONTINUE, Budgets(1, 10, 0)),
    ]
    for record in records:
        ledger.append(record)
    assert ledger.read() == records


def test_missing_ledger_is_empty(tmp_path: Path) -> None:
    """A shard nobody wrote to yet has no records."""
    assert Ledger(tmp_path / "none.jsonl").read() == []


def test_torn_tail_is_ignored_then_cut(tmp_path: Path) -> None:
    """A half-written last line is skipped on read and removed before the next append."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.append(Submitted(job_id="1"))
    with ledger.path.open("ab") as handle:
        handle.write(b'{"v": 1, "kind": "sta')
    assert ledger.read() == [Submitted(job_id="1", at=ledger.read()[0].at)]
    ledger.append(Started(job_id="1"))
    assert [r.kind for r in ledger.read()] == ["submitted", "start"]


def test_unknown_version_is_refused(tmp_path: Path) -> None:
    """A record of a ledger version this gymslurm does not read raises, naming the version."""
    path = tmp_path / "ledger.jsonl"
    path.write_text('{"v": 0, "kind": "start", "job_id": "1"}\n')
    with pytest.raises(CorruptRecordError, match="version 0"):
        Ledger(path).read()


DECISION_V2_BUSY = (
    '{"v": 2, "at": "t", "kind": "decision", "job_id": "1", "end": "t", "elapsed_s": 2.0, '
    '"slurm_state": "RUNNING", "exit_code": 75, "decision": "CONTINUE", "reason": "r", '
    '"budgets_before": {"jobs": 1}, "budgets_after": {"jobs": 1}, "busy_s": 1.5}'
)
SLURM_END = (
    '{"v": 2, "at": "t", "kind": "slurm_end", "job_id": "1", "restart_count": 0, "state": "NODE_FAIL"}'
)

# (a ledger line) -> None: it reads; else what its refusal says
LINES_BY_VERSION = [
    (DECISION_V2_BUSY, None),  # v2 with busy_s, as main wrote it before v3: reads
    (DECISION_V2_BUSY.replace(', "busy_s": 1.5', ""), None),  # v2 as older links wrote it
    (DECISION_V2_BUSY.replace('"v": 2', '"v": 3'), None),  # v3, what this gymslurm writes
    (SLURM_END, None),
    (SLURM_END.replace('"v": 2', '"v": 3'), None),
    (
        DECISION_V2_BUSY.replace('"v": 2', '"v": 4'),
        r"the chain ledger is version 4 \(v 4\); this gymslurm reads versions 1, 2, 3: it was written by a "
        r"newer gymslurm; upgrade gymslurm",
    ),
    (
        SLURM_END.replace('"v": 2', '"v": 9').replace("NODE_FAIL", "X").replace('"state"', '"new_field"'),
        "is version 9 .*written by a newer gymslurm; upgrade gymslurm",  # the version before any field
    ),
]


@pytest.mark.parametrize(("line", "refusal"), LINES_BY_VERSION)
def test_older_ledger_lines_read_and_a_newer_one_is_refused_naming_its_version(
    line: str, refusal: str | None, tmp_path: Path
) -> None:
    """Versions 1 to 3 read (a chain spans upgrades); a newer line says a newer gymslurm wrote it."""
    path = tmp_path / "ledger.jsonl"
    path.write_text(line + "\n")
    if refusal is None:
        (record,) = Ledger(path).read()
        assert record.v == orjson.loads(line)["v"]
    else:
        with pytest.raises(CorruptRecordError, match=refusal):
            Ledger(path).read()


V1_DECISION = (
    '{"v": 1, "at": "t", "kind": "decision", "job_id": "1", "end": "t", "elapsed_s": 2.0, '
    '"slurm_state": "RUNNING", "exit_code": 75, "decision": "CONTINUE", "reason": "r", '
    '"budgets_before": {"jobs": 1}, "budgets_after": {"jobs": 1}, '
    '"coverage": {"expected": 4, "successful": 2, "complete": false}}'
)


def test_a_decision_is_written_as_version_3_without_the_unread_coverage_summary(tmp_path: Path) -> None:
    """New ledger lines are version 3 (formats.py), and a decision has no coverage field any more."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.append(_decision("1", Decision.CONTINUE, Budgets(1, 10, 0)))
    line = orjson.loads(ledger.path.read_bytes())
    assert line["v"] == version_of("ledger") == 3 and "coverage" not in line
    assert get_args(LedgerVersion) == FORMATS["ledger"].read == (1, 2, 3)


def test_a_version_1_decision_with_its_coverage_summary_still_reads(tmp_path: Path) -> None:
    """A chain may span the upgrade: v1 lines (coverage included) read beside v3 ones, coverage dropped."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.path.write_text(V1_DECISION + "\n")
    ledger.append(Started(job_id="2"))
    old, new = ledger.read()
    assert isinstance(old, DecisionRecord) and (old.v, old.decision, new.v) == (1, Decision.CONTINUE, 3)
    assert summarize([old, new]).budgets == Budgets(1)


def test_a_version_2_decision_with_a_coverage_field_is_refused(tmp_path: Path) -> None:
    """Only version 1 had the coverage summary: in a version 2 line it is an unknown field."""
    path = tmp_path / "ledger.jsonl"
    path.write_text(V1_DECISION.replace('"v": 1', '"v": 2') + "\n")
    with pytest.raises(CorruptRecordError, match="coverage"):
        Ledger(path).read()


def test_unknown_field_is_refused(tmp_path: Path) -> None:
    """A record with a field this version does not define raises."""
    path = tmp_path / "ledger.jsonl"
    path.write_text('{"v": 1, "kind": "start", "at": "t", "job_id": "1", "extra": 1}\n')
    with pytest.raises(CorruptRecordError, match="extra"):
        Ledger(path).read()


def test_corrupt_middle_line_is_refused(tmp_path: Path) -> None:
    """A complete line that is not JSON raises with its line number."""
    path = tmp_path / "ledger.jsonl"
    path.write_text('garbage\n{"v": 1, "kind": "start", "at": "t", "job_id": "1"}\n')
    with pytest.raises(CorruptRecordError, match=":1"):
        Ledger(path).read()


def test_summary_tracks_budgets_and_successors() -> None:
    """The fold keeps the latest budgets, the job list and who follows whom."""
    state = summarize(
        [
            Submitted(job_id="1"),
            Started(job_id="1"),
            Submitted(job_id="2", after="1", by="1"),
            _decision("1", Decision.RETRY, Budgets(1, 10, 1)),
        ]
    )
    assert state.budgets == Budgets(1, 10, 1)
    assert state.jobs == ["1", "2"] and state.successor_of == {"1": "2"}
    assert not state.finished and state.open_runs == []


def test_summary_lists_runs_without_a_decision() -> None:
    """A run that started but never wrote its decision stays open for its successor to account for."""
    state = summarize(
        [
            Started(job_id="1"),
            _decision("1", Decision.CONTINUE, Budgets(1, 10, 0)),
            Started(job_id="1", restart_count=1),
        ]
    )
    assert [(r.job_id, r.restart_count) for r in state.open_runs] == [("1", 1)]


@pytest.mark.parametrize(
    ("decision", "finished"),
    [
        (Decision.DONE, True),
        (Decision.STOP_FAILED, True),
        (Decision.STOP_EXHAUSTED, True),
        (Decision.STOP_WALLTIME, True),
        (Decision.STOP_NO_PROGRESS, True),
        (Decision.CONTINUE, False),
        (Decision.RETRY, False),
    ],
)
def test_summary_finished_after_a_stop(decision: Decision, finished: bool) -> None:
    """A chain is finished after DONE or any STOP, not after CONTINUE or RETRY."""
    assert summarize([_decision("1", decision, Budgets(1, 1, 0))]).finished is finished


def test_cancel_finishes_and_resubmit_reopens_with_fresh_budget() -> None:
    """cancel ends a going chain; resubmit reopens it with fresh retries and walltime, history kept
    (a cancel after a final decision changes nothing: tests/unit/test_cancel_keeps_final.py)."""
    records = [_decision("1", Decision.RETRY, Budgets(4, 99, 3)), Cancelled(job_ids=["2"])]
    assert summarize(records).cancelled
    state = summarize([*records, Resubmitted()])
    assert not state.finished and state.budgets == Budgets(jobs=4) and state.total_walltime_s == 10.0


def test_a_job_whose_submission_was_never_recorded_is_known_from_its_start() -> None:
    """If submit died between sbatch and the ledger, the job's own start record makes it part of the chain."""
    state = summarize([Started(job_id="7")])
    assert state.jobs == ["7"] and state.epoch_jobs == ["7"]


def test_server_records_fold_into_restarts_and_the_processes_a_successor_may_reap() -> None:
    """Each ``restarted`` record counts one restart of its server; started and restarted processes
    (pid + create time) are what a later link may reap."""
    from gymslurm.launcher.ledger import ServerRecord

    def server(event: str, pid: int) -> ServerRecord:
        return ServerRecord(job_id="7", name="policy", event=event, pid=pid, create_time=100.0 + pid)  # type: ignore[arg-type]

    state = summarize(
        [
            server("started", 1),
            server("down", 1),
            server("restarted", 2),
            server("down", 2),
            server("restarted", 3),
        ]
    )
    assert state.server_restarts == {"policy": 2}
    assert [(r.pid, r.create_time) for r in state.server_processes] == [(1, 101.0), (2, 102.0), (3, 103.0)]


def test_injected_faults_fold_into_the_chain_state(tmp_path: Path) -> None:
    """An injected record round-trips and is listed by summarize; it changes no budget."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.append(Started(job_id="7", saved_bytes=120))
    ledger.append(Injected(job_id="7", fault="timeout", how="scancel --signal=USR1 --batch 7"))
    state = summarize(ledger.read())
    assert [(r.job_id, r.fault) for r in state.injected] == [("7", "timeout")]
    assert state.open_runs[0].saved_bytes == 120 and state.budgets == Budgets()


def test_records_written_before_issue_12_still_read(tmp_path: Path) -> None:
    """A start without saved_bytes and budgets without links_without_progress are read with defaults."""
    path = tmp_path / "ledger.jsonl"
    budgets = '{"jobs": 1, "walltime_s": 2.0, "infra_retries_used": 0}'
    path.write_text(
        '{"v": 1, "at": "t", "kind": "start", "job_id": "1", "restart_count": 0, "host": "h"}\n'
        '{"v": 1, "at": "t", "kind": "decision", "job_id": "1", "end": "t", "elapsed_s": 2.0, '
        '"slurm_state": "RUNNING", "exit_code": 75, "decision": "CONTINUE", "reason": "r", '
        f'"budgets_before": {budgets}, "budgets_after": {budgets}}}\n'
    )
    state = summarize(Ledger(path).read())
    assert state.budgets == Budgets(1, 2.0, 0, 0)
