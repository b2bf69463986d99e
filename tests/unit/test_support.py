"""The tests' shared helpers (tests/support.py) do what the tests that lean on them assume."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.errors import SlurmError
from tests.support import wait_until
from tests.unit.scripted_slurm import ScriptedSlurm, reply


def test_wait_until_returns_the_first_true_value() -> None:
    """The value the check gave, as soon as it is true (the tests use it: a row, a list of pids)."""
    answers = iter([None, [], ["found"]])
    assert wait_until(lambda: next(answers), 5, "a value", every_s=0.0) == ["found"]


def test_wait_until_fails_naming_what_it_waited_for() -> None:
    """A deadline passed is a failure saying what was waited for and for how long, with the state the
    test saw last when the message is a function."""
    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for the thing"):
        wait_until(lambda: False, 0.05, "the thing", every_s=0.01)
    seen = [0]
    with pytest.raises(AssertionError, match=r"waiting for three \(last 7\)"):
        wait_until(lambda: seen.append(7), 0.05, lambda: f"three (last {seen[-1]})", every_s=0.01)


def test_the_scripted_client_answers_in_turn_and_records_each_command() -> None:
    """Replies in turn, the last one again; the real client parses them and checks the exit code."""
    client = ScriptedSlurm({"sbatch": ["51\n", reply("52\n")], "scancel": reply(stderr="no", code=1)})
    assert [client.submit(Path("/x.sbatch")) for _ in range(3)] == ["51", "52", "52"]
    assert client.log[0] == ["sbatch", "--parsable", "/x.sbatch"] and client.queries == 3
    with pytest.raises(SlurmError, match="scancel 7 exited 1"):
        client.run(["scancel", "7"])


def test_the_scripted_client_answers_the_rest_from_its_queue_and_refuses_what_it_cannot() -> None:
    """A command with no reply is answered by the in-memory queue (squeue of nothing queued: no row);
    one the queue cannot answer either fails the test, naming it."""
    client = ScriptedSlurm()
    assert client.queue() == []
    with pytest.raises(AssertionError, match="unscripted Slurm command: srun --jobid=1"):
        client.run(["srun", "--jobid=1", "true"])
