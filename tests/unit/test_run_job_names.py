"""A run's rows of the queue, by job name (issue 32: ``status`` costs what the run's own jobs cost).

``status`` asks squeue for the run's job names only (``--name=gs-R,gs-R-agg``), so a user's other
runs, however many rows they hold, are neither sent nor typed; with too many names to list, and in
the list of runs (one query shared by every run), the user's lines are kept by name before any is
typed. The names are the ones submit gives (site/job_names.py), exactly: run ``R-2`` is not ``R``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.commands.status import _SharedSlurm
from gymslurm.errors import SlurmError
from gymslurm.launcher.run_site import run_jobs
from gymslurm.launcher.views.status import run_status
from gymslurm.site.backend import SlurmBackend
from gymslurm.site.job_names import (
    NAMES_ASKED_MAX,
    RunJobs,
    aggregation_job_name,
    lines_by_name,
    links_job_name,
    run_lines,
    shard_job_name,
    squeue_name,
)
from tests.unit.scripted_slurm import ScriptedSlurm, array_run


def _line(job: str, name: str, state: str = "PENDING") -> str:
    return f"{job}|{name}|{state}|None|(null)|0:00|5:00|N/A"


RUN = "demo-20261207T140000Z-ab12"
FOREIGN = "\n".join(_line(f"900_{task}", "other-array") for task in range(50))
QUEUE = "\n".join(
    [
        _line("100_0", f"gs-{RUN}", "RUNNING"),
        _line("101_3", f"gs-{RUN}"),
        _line("102", f"gs-{RUN}-agg"),
        _line("103", f"gs-{RUN}-2"),  # another run, whose name starts with this one's
        _line("104", f"gs-{RUN}-2-agg"),
        _line("105", f"gs-{RUN}-s007"),  # a run without arrays: a shard's link
        FOREIGN,
    ]
)


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        (f"gs-{RUN}", True),
        (f"gs-{RUN}-agg", True),
        (f"gs-{RUN}-s000", True),
        (f"gs-{RUN}-s10000", True),
        (f"gs-{RUN}-2", False),
        (f"gs-{RUN}-2-agg", False),
        (f"gs-{RUN}-2-s001", False),
        (f"gs-{RUN}-s07", False),
        (f"gs-{RUN}-sabc", False),
        (f"gs-{RUN}-aggx", False),
        (f"x-gs-{RUN}", False),
        (RUN, False),
        ("gsw-watch-convert", False),
        ("", False),
    ],
)
def test_a_run_keeps_exactly_its_own_job_names(name: str, kept: bool) -> None:
    """``gs-R``, ``gs-R-agg`` and ``gs-R-sNNN`` are run R's; a run whose name extends R's is not R."""
    assert RunJobs(RUN).keeps(name) is kept


def test_the_names_are_the_ones_submit_gives() -> None:
    """The names kept are the very names the scripts carry (one rule: site/job_names.py)."""
    jobs = RunJobs(RUN, shards_named=2)
    given = [links_job_name(RUN), aggregation_job_name(RUN), shard_job_name(RUN, 0), shard_job_name(RUN, 1)]
    assert given == [f"gs-{RUN}", f"gs-{RUN}-agg", f"gs-{RUN}-s000", f"gs-{RUN}-s001"]
    assert jobs.squeue_names() == given and all(jobs.keeps(name) for name in given)


@pytest.mark.parametrize(
    ("shards_named", "asked"),
    [(0, 2), (1, 3), (NAMES_ASKED_MAX - 2, NAMES_ASKED_MAX), (NAMES_ASKED_MAX - 1, None), (10_000, None)],
)
def test_squeue_is_asked_by_name_while_the_list_is_short(shards_named: int, asked: int | None) -> None:
    """An array run asks two names; a run naming each shard asks them all up to a bound, then none."""
    names = RunJobs(RUN, shards_named).squeue_names()
    assert (None if names is None else len(names)) == asked


@pytest.mark.parametrize(
    ("line", "name"),
    [
        (_line("1_2", "gs-r"), "gs-r"),
        ("7|gs-r|RUNNING", "gs-r"),
        ("7| gs-r |RUNNING", "gs-r"),
        ("squeue: error: slurm_receive_msg: Socket timed out", None),
        ("7|gs-r", None),
        ("", None),
    ],
)
def test_a_lines_name_is_read_without_typing_the_row(line: str, name: str | None) -> None:
    """The name is squeue's second field; a line that is no row has none (and is kept for the parser)."""
    assert squeue_name(line) == name


def test_status_asks_squeue_for_the_runs_names_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """An array run's query: the user's jobs named ``gs-R`` or ``gs-R-agg`` (squeue filters before it
    expands any other array into its tasks); its rows are typed as they come."""
    monkeypatch.setenv("USER", "alice")
    client = ScriptedSlurm({"squeue": "\n".join(QUEUE.splitlines()[:3])})
    rows = SlurmBackend(client).queue(RunJobs(RUN))
    (argv,) = client.log
    assert argv[argv.index("-u") + 1] == "alice" and f"--name=gs-{RUN},gs-{RUN}-agg" in argv
    assert sorted(rows) == ["100_0", "101_3", "102"] and client.rows == 3


def test_too_many_names_keeps_the_runs_lines_before_typing_any() -> None:
    """Without ``--name`` (a run naming 10,000 shards), the user's queue is read and only the run's
    lines become rows: the other runs' are not typed (rows read counts the run's own)."""
    client = ScriptedSlurm({"squeue": QUEUE})
    rows = SlurmBackend(client).queue(RunJobs(RUN, shards_named=10_000))
    (argv,) = client.log
    assert not any(arg.startswith("--name") for arg in argv)
    assert sorted(rows) == ["100_0", "101_3", "102", "105"] and client.rows == 4


def test_a_line_that_is_no_squeue_row_is_refused_even_when_filtering() -> None:
    """Filtering by name never hides squeue printing something else: the parser quotes it."""
    client = ScriptedSlurm({"squeue": QUEUE + "\nsqueue: error: something new"})
    with pytest.raises(SlurmError, match="something new"):
        SlurmBackend(client).queue(RunJobs(RUN, shards_named=10_000))


def test_the_list_of_runs_shares_one_query_and_each_run_takes_its_own_rows() -> None:
    """``gymslurm status`` with no run: one squeue of the user's queue for every Slurm run listed; each
    run's rows are its own names' lines (grouped once), the others untyped."""
    client = ScriptedSlurm({"squeue": QUEUE})
    cache = {"backend": SlurmBackend(client)}
    first = _SharedSlurm(cache).queue(RunJobs(RUN))
    second = _SharedSlurm(cache).queue(RunJobs(f"{RUN}-2"))
    assert len(client.log) == 1 and not any(arg.startswith("--name") for arg in client.log[0])
    assert sorted(first) == ["100_0", "101_3", "102", "105"] and sorted(second) == ["103", "104"]


def test_lines_are_grouped_by_name_in_one_pass() -> None:
    """The shared answer's lines by name; a run takes its names' groups, and any line that is no row."""
    groups = lines_by_name(QUEUE + "\nnot a row\n\n")
    assert len(groups["other-array"]) == 50 and groups[None] == ["not a row"]
    assert list(run_lines(groups, RunJobs(f"{RUN}-2"))) == [
        _line("103", f"gs-{RUN}-2"),
        _line("104", f"gs-{RUN}-2-agg"),
        "not a row",
    ]


def test_run_status_asks_for_its_runs_names(tmp_path: Path) -> None:
    """``status`` of an array run (array.json): its one squeue names ``gs-r`` and ``gs-r-agg`` only;
    a run without array.json names each shard's links too."""
    client = ScriptedSlurm()
    run = array_run(tmp_path, 3, client, [])
    run_status(run, SlurmBackend(client, accounting=True))
    (asked,) = [argv for argv in client.log if argv[0] == "squeue"]
    assert "--name=gs-r,gs-r-agg" in asked
    assert run_jobs(run, 3) == RunJobs("r")
    run.array_path.unlink()
    assert run_jobs(run, 3) == RunJobs("r", shards_named=3)
