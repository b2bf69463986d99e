"""A link reads its ledger once per phase: what it appends itself is folded into the state it holds."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from gymslurm.job.chain import account_for_dead_runs
from gymslurm.launcher.decide import Limits
from gymslurm.launcher.ledger import Ledger, Started, Submitted, fold, summarize
from gymslurm.site.local import LocalBackend


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every Ledger.read, by path (the real read still happens)."""
    reads: list[Path] = []
    real = Ledger.read

    def read(self: Ledger) -> list[object]:
        reads.append(self.path)
        return real(self)  # type: ignore[return-value]

    monkeypatch.setattr(Ledger, "read", read)
    return reads


def test_dead_run_accounting_folds_its_own_decisions_instead_of_rereading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs that died undecided get a decision each; the ledger is not read again after each."""
    ledger = Ledger(tmp_path / "ledger.jsonl")
    for job in ("1", "2"):
        ledger.append(Submitted(job_id=job))
        ledger.append(Started(job_id=job, at="2026-12-01T10:00:00.000+00:00"))
    state = summarize(ledger.read())
    reads = _counting_reads(monkeypatch)
    after = account_for_dead_runs(
        state,
        ledger,
        ("3", 0),
        LocalBackend(tmp_path / "local"),
        output=tmp_path / "out.jsonl",
        limits=Limits(),
    )
    assert reads == []
    assert after.open_runs == [] and after.decided == {("1", 0), ("2", 0)}
    assert after == summarize(ledger.read())  # the fold is what a re-read would say


def test_folding_a_record_equals_summarizing_the_ledger_with_it(tmp_path: Path) -> None:
    """fold(state, record) is summarize over the records plus that one (the one rule, two uses)."""
    records = [Submitted(job_id="1"), Started(job_id="1", at="t"), Submitted(job_id="2", after="1")]
    state = summarize(records[:1])
    for record in records[1:]:
        fold(state, record)
    assert state == summarize(records)


def test_a_dead_runs_last_heartbeat_bounds_its_life_only_if_it_is_that_runs() -> None:
    """The shard's heartbeat bounds a dead run's life (last beat + one interval) only when it is that
    very run's (job and restart count): another link's beat says nothing of it."""
    from gymslurm.job.chain import last_beat_s
    from gymslurm.store.live import Heartbeat

    run = Started(job_id="7", restart_count=1, at="2026-12-01T10:00:00+00:00")
    start = datetime.fromisoformat(run.at).timestamp()

    def beat(job: str, restart: int) -> Heartbeat:
        return Heartbeat(
            job_id=job, restart_count=restart, start=run.at, at=run.at, epoch=start + 30, interval_s=15, pid=1
        )

    assert last_beat_s(run, beat("7", 1)) == 45.0
    assert last_beat_s(run, beat("7", 0)) is None and last_beat_s(run, beat("8", 1)) is None
    assert last_beat_s(run, None) is None
