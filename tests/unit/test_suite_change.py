"""An edited suite file against a suite run (commands/suite_change.py): what is kept, added, dropped,
and what is refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.commands import new_run
from gymslurm.commands.doctor import Site
from gymslurm.commands.new_suite import submit_suite
from gymslurm.commands.resubmit import resubmit
from gymslurm.commands.suite_change import plan_change
from gymslurm.errors import ConfigError
from gymslurm.launcher.suite_run import SuiteEntry, SuiteRecord
from gymslurm.launcher.suite_settings import load_suite
from gymslurm.site import backend as backend_mod
from tests.unit.scripted_slurm import ScriptedSlurm

RECORD = SuiteRecord(suite="s", benchmarks=[SuiteEntry(name="a", shards=2), SuiteEntry(name="b", shards=1)])


def test_a_new_benchmark_is_added_and_reopens_the_chains_of_its_shards() -> None:
    """``c`` of one shard is added: chain 0 runs again; ``a`` and ``b`` are kept, nothing dropped."""
    change = plan_change(RECORD, {"a": 2, "b": 1, "c": 1}, {"a", "b"}, chains=2)
    assert (change.added, change.kept, change.dropped, change.reopened) == (["c"], ["a", "b"], [], [0])


def test_a_benchmark_left_out_is_dropped_and_reopens_nothing() -> None:
    """``b`` left out of the file is dropped (its files stay): no chain runs again."""
    change = plan_change(RECORD, {"a": 2}, {"a", "b"}, chains=2)
    assert (change.added, change.dropped, change.reopened) == ([], ["b"], [])


def test_a_dropped_benchmark_listed_again_is_kept_as_it_was() -> None:
    """A benchmark whose folder the run has (dropped earlier) is kept, not added again."""
    record = RECORD.model_copy(update={"benchmarks": RECORD.benchmarks[:1], "dropped": ["b"]})
    change = plan_change(record, {"a": 2, "b": 1}, {"a", "b"}, chains=2)
    assert (change.added, change.kept, change.reopened) == ([], ["a", "b"], [])


def test_an_added_benchmark_with_more_shards_than_the_run_has_chains_is_refused() -> None:
    """The run's chains are fixed: 3 shards in a run of 2 chains is an error naming it."""
    with pytest.raises(ConfigError, match=r"c \(3 shards\).*2 chain"):
        plan_change(RECORD, {"a": 2, "c": 3}, {"a", "b"}, chains=2)


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and mtime (nothing written shows as equal)."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture
def slurm_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, ScriptedSlurm]:
    """A suite run submitted to Slurm (the scripted one: the real client and backend, its queue in
    memory): ``first`` from a benchmark file of the user's, ``second`` the demo. The suite file, the
    run, the client."""
    client = ScriptedSlurm()
    monkeypatch.chdir(tmp_path)  # the demo's dataset is written under the working directory
    monkeypatch.setattr(backend_mod, "SlurmClient", lambda *_a, **_k: client)
    monkeypatch.setattr(new_run, "read_sites", lambda _settings: Site(None, None, {}))
    (tmp_path / "data.jsonl").write_text('{"q": 1}\n{"q": 2}\n')
    (tmp_path / "ok.yaml").write_text(f"dataset: {tmp_path / 'data.jsonl'}\n")
    suite = tmp_path / "s.yaml"
    suite.write_text(
        f"run_root: {tmp_path / 'runs'}\nshards: 1\nbenchmarks:\n"
        f"  - {{name: first, benchmark: {tmp_path / 'ok.yaml'}}}\n  - {{name: second, benchmark: demo}}\n"
    )
    submit_suite(load_suite(str(suite), []), [], "slurm", dry_run=False, wait=False)
    (run,) = (tmp_path / "runs").iterdir()
    return suite, run, client


@pytest.mark.parametrize(
    ("listed", "selection", "line"),
    [
        ("  - {name: first, benchmark: OK}\n  - {name: second, benchmark: demo}\n", None, 4),
        ("  - {name: second, benchmark: demo}\n  - {name: third, benchmark: OK}\n", None, 5),
        ("  - {name: first, benchmark: OK}\n  - {name: second, benchmark: demo}\n", "0", 4),
    ],
    ids=["a kept benchmark", "an added benchmark", "a resubmit of chosen shards"],
)
def test_a_resubmit_refuses_a_benchmark_file_edited_to_set_its_own_cluster_before_anything(
    slurm_suite: tuple[Path, Path, ScriptedSlurm], listed: str, selection: str | None, line: int
) -> None:
    """A benchmark's file given ``slurm.cluster: b`` after the submit (a suite's links run every
    benchmark on the run's cluster): the resubmit is refused naming the suite's line of it, its
    file's line and what to do, before any Slurm command and with nothing written."""
    suite, run, client = slurm_suite
    ok = suite.parent / "ok.yaml"
    ok.write_text(ok.read_text() + "slurm:\n  cluster: b\n")
    head = suite.read_text().split("benchmarks:\n")[0]
    suite.write_text(head + "benchmarks:\n" + listed.replace("OK", str(ok)))
    before, asked = _files(run), len(client.log)
    with pytest.raises(
        ConfigError, match=rf"^suite {suite}:{line}: benchmark '\w+' sets slurm\.cluster: b in {ok}:3"
    ):
        resubmit(str(run), str(suite), [], None, selection)
    assert client.log[asked:] == []
    assert _files(run) == before


@pytest.mark.parametrize(
    ("listed", "refusal"),
    [
        (
            "  - {name: first, benchmark: OK}\n  - {name: second, benchmark: demo}\n"
            "  - {name: third, benchmark: demo}\n",
            r"adds third since run .* --shards reruns the chosen shards as they were",
        ),
        ("  - {name: second, benchmark: demo}\n", r"drops first since run .* resubmit without --shards"),
        (
            "  - {name: first, benchmark: OK, overrides: ['slurm.time=00:07:00']}\n"
            "  - {name: second, benchmark: demo}\n",
            r"benchmark 'first' is not the one run",
        ),
    ],
    ids=["an added benchmark", "a dropped benchmark", "a changed benchmark"],
)
def test_a_resubmit_of_chosen_shards_refuses_an_edited_suite_file_before_anything(
    slurm_suite: tuple[Path, Path, ScriptedSlurm], listed: str, refusal: str
) -> None:
    """``resubmit RUN SUITE --shards 0`` with a suite file that adds, drops or changes a benchmark
    since the submit: refused naming what changed and what to do (the chosen shards would run as
    saved, the edit ignored), before any Slurm command and with nothing written."""
    suite, run, client = slurm_suite
    ok = suite.parent / "ok.yaml"
    head = suite.read_text().split("benchmarks:\n")[0]
    suite.write_text(head + "benchmarks:\n" + listed.replace("OK", str(ok)))
    before, asked = _files(run), len(client.log)
    with pytest.raises(ConfigError, match=refusal):
        resubmit(str(run), str(suite), [], None, "0")
    assert client.log[asked:] == []
    assert _files(run) == before
