"""``submit --wait`` outlives a failing scheduler query and ends with a verdict, never a raw error (issue 32).

Seen on the sandbox: one ``squeue`` failing under load (exit -13) ended ``--wait`` with exit 1 and
``stderr:`` as its last line, on runs that then finished DONE by themselves. The scheduler here is a
scripted Slurm (tests/unit/scripted_slurm.py) whose ``squeue`` fails the first times it is asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.commands import wait as wait_mod
from gymslurm.commands.wait import QUERY_ATTEMPTS, scheduler_outcome, wait_for_run
from gymslurm.errors import SlurmError
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import Submitted
from gymslurm.site.backend import SlurmBackend
from tests.unit.scripted_slurm import ScriptedSlurm
from tests.unit.test_cancel_keeps_final import _decided, _run


class FailingFirst(ScriptedSlurm):
    """``squeue`` exits -13 with a timeout message the first ``failures`` times."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def _squeue(self, argv: list[str]) -> tuple[int, str, str]:
        if self.failures > 0:
            self.failures -= 1
            return -13, "", "slurm_load_jobs error: Socket timed out on send/recv operation\n"
        return super()._squeue(argv)


def _done_run(tmp: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(wait_mod, "next_poll_s", lambda previous, changed: 0.01)
    monkeypatch.setattr("gymslurm.launcher.views.report.refresh_report", lambda *args: None)
    run = _run(tmp)
    for record in _decided("200", Decision.DONE):
        run.ledger(0).append(record)
    run.ledger(1).append(Submitted(job_id="201"))  # shard 1's link is queued: status asks squeue
    return run


def _slurm(failures: int) -> SlurmBackend:
    client = FailingFirst(failures)
    client.states["201"] = "CANCELLED"  # it ended without a link: the chain reads STALLED
    return SlurmBackend(client, accounting=False)


def test_a_transient_squeue_failure_is_asked_again_and_the_wait_ends_with_the_runs_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two failed squeue calls, then answers: --wait ends with the run's own verdict (shard 1 STALLED)."""
    run = _done_run(tmp_path, monkeypatch)
    code = wait_for_run(run, _slurm(2), False, poll_s=0.01)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1 and "stopped: shard 1 STALLED" in last, last


def test_a_scheduler_that_never_answers_ends_the_wait_with_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """squeue failing every time: --wait ends 75 with ``scheduler unreachable:``, not the error's text."""
    run = _done_run(tmp_path, monkeypatch)
    code = wait_for_run(run, _slurm(10**6), False, poll_s=0.01)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 75 and "scheduler unreachable:" in last and not last.startswith("stderr:"), last


def test_the_wait_gives_up_only_after_every_attempt() -> None:
    """None (ask again) before QUERY_ATTEMPTS failures in a row; the verdict names the error's first line."""
    error = SlurmError("squeue exited -13\nstderr: timed out")
    assert scheduler_outcome("r", QUERY_ATTEMPTS - 1, error) is None
    verdict = scheduler_outcome("r", QUERY_ATTEMPTS, error)
    assert verdict is not None and "(last: squeue exited -13)" in verdict[1]
