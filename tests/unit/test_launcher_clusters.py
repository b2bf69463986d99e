"""Shards of one run across clusters (``slurm.clusters``, issue 18): placement, ids, one query each.

Why: users have several clusters. A run may place its shards on more than one; every cluster
counts job ids from 1, so a run's ids name their cluster (``b:12_0``), each cluster is asked once
for status, and the aggregation, on a named cluster, is queued from a link on another cluster
with no dependency (Slurm has none across clusters). The Slurm commands here are small scripts on
PATH that answer per ``--clusters=C`` and log each call; the sandbox test is
tests/slurm/test_multinode.py.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gymslurm.errors import ConfigError, SlurmError
from gymslurm.job.aggregation import aggregation_backend
from gymslurm.launcher.run_site import run_backend
from gymslurm.launcher.rundir import ArrayPart, ArrayRecord, RunDir, RunInfo, atomic_write
from gymslurm.launcher.settings import validate
from gymslurm.launcher.views.logs import LogIndex
from gymslurm.site.backend import ClusterSetBackend, SlurmBackend
from gymslurm.site.placement import Block, cluster_parts, place_shards
from gymslurm.site.slurm import SlurmClient, split_job_id
from tests.run_info import run_info

BASE = {"name": "t", "dataset": "d.jsonl", "servers": [{"url": "http://127.0.0.1:1"}]}

# Each fake command logs "<name> <args>" and answers as cluster $C would (both count ids from 12).
FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> {log}
C=default
for arg in "$@"; do case "$arg" in --clusters=*) C="${{arg#--clusters=}}" ;; esac; done
case "$(basename "$0")" in
  squeue) for task in 0 1; do echo "12_$task|gs-r|RUNNING|None|(null)|0:05|5:00|now"; done ;;
  sbatch) echo "12;$C" ;;
  sacct) echo "12_0|gs-r|COMPLETED|0:0|t|t|5|billing=1,cpu=1,node=1" ;;
  scontrol) case "$*" in *partition*) echo "PartitionName=debug State=UP MaxTime=INFINITE"; exit 0 ;; esac
            printf 'SLURM_VERSION = 22.05.8\nClusterName = %s\nMaxArraySize = 1001\n' "$C"
            echo "MaxJobCount = 50000"
            echo "AccountingStorageType = accounting_storage/slurmdbd" ;;
esac
"""


@pytest.fixture
def slurm_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fake squeue/sbatch/sacct/scancel on PATH; returns the file each call is logged to."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in ("squeue", "sbatch", "sacct", "scancel", "scontrol", "sacctmgr"):
        path = bin_dir / name
        path.write_text(FAKE.format(log=log))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("USER", "u")
    return log


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _run_across(tmp_path: Path, shards: int = 2) -> RunDir:
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    info = run_info(
        benchmark="t",
        shards=shards,
        output_stem="o",
        array=True,
        placement=place_shards(shards, {"a": 1, "b": 1}),
        aggregate_cluster="b",
    )
    atomic_write(run.info_path, info.model_dump_json().encode())
    return run


def test_equal_weights_cut_the_shards_into_one_block_per_cluster_in_listed_order() -> None:
    """[a, b] over 5 shards: a runs 0..2, b runs 3..4 (the remainder goes to the cluster listed first)."""
    assert place_shards(5, {"a": 1, "b": 1}) == [
        Block(cluster="a", first=0, count=3),
        Block(cluster="b", first=3, count=2),
    ]


def test_weights_share_the_shards_by_largest_remainder() -> None:
    """{a: 3, b: 1} over 7 shards: 5.25 and 1.75 round to 5 and 2."""
    assert [(b.cluster, b.count) for b in place_shards(7, {"a": 3, "b": 1})] == [("a", 5), ("b", 2)]


def test_a_cluster_whose_share_rounds_to_nothing_gets_no_block() -> None:
    """One shard over [a, b]: only a holds a block."""
    assert place_shards(1, {"a": 1, "b": 1}) == [Block(cluster="a", first=0, count=1)]


def test_array_ranges_are_cut_where_a_clusters_block_begins() -> None:
    """Ranges (0, 4) (4, 4) (8, 2) over blocks a: 0..4, b: 5..9 give a's 0-3, a's task 0 and b's tasks
    1-3 of the range at 4, b's range at 8."""
    blocks = place_shards(10, {"a": 1, "b": 1})
    assert cluster_parts([(0, 4), (4, 4), (8, 2)], blocks) == [
        (0, 0, 4, "a"),
        (4, 0, 1, "a"),
        (4, 1, 3, "b"),
        (8, 0, 2, "b"),
    ]


def test_a_shard_is_found_in_the_array_of_its_cluster_when_two_share_a_range() -> None:
    """array.json with a's tasks 0 and b's task 1 of one range: shard 1 is b's array, task 1."""
    record = ArrayRecord(
        job_id="a:12",
        shards=2,
        max_running=None,
        at="t",
        chunk=1001,
        parts=[ArrayPart(job_id="a:12", base=0, size=1), ArrayPart(job_id="b:12", base=0, size=1, offset=1)],
    )
    assert (record.task(0), record.task(1), record.base(1)) == ("a:12_0", "b:12_1", 0)


def test_clusters_take_a_list_or_weights_and_exclude_a_single_cluster() -> None:
    """slurm.clusters: [a, b] or {a: 3, b: 1}; with slurm.cluster too, or an empty list, it is refused."""
    listed = validate({**BASE, "slurm": {"clusters": ["a", "b"]}}, "t").slurm
    assert (listed.planned_clusters, listed.aggregation_cluster) == (["a", "b"], "a")
    weighted = validate({**BASE, "slurm": {"clusters": {"a": 3, "b": 1}, "aggregate_on": "b"}}, "t").slurm
    assert (weighted.clusters, weighted.aggregation_cluster) == ({"a": 3, "b": 1}, "b")
    named = validate({**BASE, "slurm": {"clusters": {"a": "0-5,9", "b": "6-8"}}}, "t").slurm
    assert (named.clusters, named.planned_clusters) == ({"a": "0-5,9", "b": "6-8"}, ["a", "b"])
    for bad, says in [
        ({"clusters": ["a"], "cluster": "b"}, "not both"),
        ({"clusters": []}, "empty"),
        ({"clusters": ["a", "a"]}, "twice"),
        ({"clusters": ["a"], "aggregate_on": "b"}, "not one of"),
        ({"clusters": ["a --wrap=x"]}, "clusters"),
        ({"clusters": {"a": 3, "b": "4-9"}}, "not both"),
    ]:
        with pytest.raises(ConfigError, match=says):
            validate({**BASE, "slurm": bad}, "t")


def test_status_of_a_run_across_clusters_asks_one_squeue_per_cluster_and_keeps_equal_ids_apart(
    tmp_path: Path, slurm_log: Path
) -> None:
    """Both clusters answer jobs 12_0 and 12_1: the run's backend sees them apart, after one squeue each."""
    backend = run_backend(_run_across(tmp_path))
    assert isinstance(backend, ClusterSetBackend)
    assert sorted(backend.queue()) == ["a:12_0", "a:12_1", "b:12_0", "b:12_1"]
    squeues = [c for c in _calls(slurm_log) if c.startswith("squeue")]
    assert sorted(c.split()[1] for c in squeues) == ["--clusters=a", "--clusters=b"]


def test_accounting_asks_each_cluster_only_for_its_own_jobs(tmp_path: Path, slurm_log: Path) -> None:
    """sacct of a:12_0 and b:12_0: one sacct per cluster, each with Slurm's own id 12_0."""
    backend = run_backend(_run_across(tmp_path))
    assert sorted(backend.accounting(["a:12_0", "b:12_0"]) or {}) == ["a:12_0", "b:12_0"]
    saccts = sorted(c for c in _calls(slurm_log) if c.startswith("sacct"))
    assert [c.split()[1] for c in saccts] == ["--clusters=a", "--clusters=b"]
    assert all(c.endswith("-j 12_0") for c in saccts), saccts


def test_cancel_of_a_run_across_clusters_is_one_scancel_per_cluster(tmp_path: Path, slurm_log: Path) -> None:
    """cancel of a:12, b:12 and b:13: ``scancel --clusters=a 12`` and ``scancel --clusters=b 12 13``."""
    run_backend(_run_across(tmp_path)).cancel(["a:12", "b:12", "b:13"])
    assert sorted(c for c in _calls(slurm_log) if c.startswith("scancel")) == [
        "scancel --clusters=a 12",
        "scancel --clusters=b 12 13",
    ]


def test_a_shards_link_talks_to_the_shards_cluster_with_qualified_ids(
    tmp_path: Path, slurm_log: Path
) -> None:
    """Shard 1 (block b) in its job: sbatch goes to b and the id it hands out is b:12."""
    backend = run_backend(_run_across(tmp_path), 1)
    assert isinstance(backend, SlurmBackend) and backend.client.cluster == "b"
    assert backend.submit(tmp_path / "x.sbatch", after=["b:11_1"]) == "b:12"
    assert _calls(slurm_log)[-1].startswith("sbatch --clusters=b --parsable --dependency=afterany:11_1 ")


def test_a_dependency_on_another_clusters_job_is_refused_before_sbatch(
    tmp_path: Path, slurm_log: Path
) -> None:
    """On cluster b, ``afterany`` a job of a is a SlurmError naming both clusters; nothing is submitted."""
    backend = SlurmBackend(SlurmClient(cluster="b"), qualify=True)
    with pytest.raises(SlurmError, match="cluster a, not b"):
        backend.submit(tmp_path / "x.sbatch", after=["a:12_0"])
    assert _calls(slurm_log) == []


@pytest.mark.parametrize(("me", "after"), [("a:12_0", None), ("b:12_1", "b:12_1"), (None, None)])
def test_the_aggregation_is_queued_on_its_cluster_after_the_trigger_only_on_the_same_one(
    tmp_path: Path, me: str | None, after: str | None
) -> None:
    """aggregate_on b: from a's link no dependency at all, from b's link afterany that link."""
    run = _run_across(tmp_path)
    backend, depends_on = aggregation_backend(run, run_backend(run, 0), me)
    assert isinstance(backend, SlurmBackend) and backend.client.cluster == "b"
    assert depends_on == after


def test_a_job_log_is_found_by_slurms_own_id_and_the_shard_its_name_gives(tmp_path: Path) -> None:
    """a:12_0 of shard 1005 and b:12_0 of shard 3 (past the first array) each find their own file."""
    names = frozenset({"shard-1001+4-12_0.out", "shard-003-12_0.out", "aggregate-13.out"})
    index = LogIndex(tmp_path, names)
    assert index.job_log(1005, "a:12_0") == str(tmp_path / "shard-1001+4-12_0.out")
    assert index.job_log(3, "b:12_0") == str(tmp_path / "shard-003-12_0.out")
    assert index.job_log(None, "b:13") == str(tmp_path / "aggregate-13.out")
    assert split_job_id("b:12_0") == ("b", "12_0") and split_job_id("12_0") == (None, "12_0")


def test_run_json_without_placement_keeps_the_one_cluster_backend(tmp_path: Path) -> None:
    """A run written before slurm.clusters (no placement) reads as before: one backend, plain ids."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    data = {
        "name": "r",
        "benchmark": "t",
        "overrides": [],
        "created_at": "t",
        "backend": "slurm",
        "shards": 1,
        "workdir": "/",
        "output_stem": "o",
        "infra_retry_limit": 3,
        "max_walltime_s": None,
    }
    atomic_write(run.info_path, json.dumps(data).encode())
    backend = run_backend(run, 0)
    assert isinstance(backend, SlurmBackend) and not backend.qualify


def test_submit_places_the_blocks_in_run_json_and_queues_each_clusters_array_there(
    tmp_path: Path, slurm_log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """submit of 3 shards over [a, b]: each cluster's settings are read (scontrol -M), run.json records
    a: 0..1, b: 2 and the aggregation on a; shards 0-1 are tasks 0-1 of an array on a, shard 2 task 2
    of an array on b (the same links script), each array followed by its spares on the same cluster."""
    from gymslurm.commands.submit import submit

    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(6)))
    (tmp_path / "bench.yaml").write_text(
        "name: t\ndataset: d.jsonl\nshards: 3\nservers: [{url: 'http://127.0.0.1:1'}]\n"
        "slurm: {clusters: [a, b], python: /usr/bin/python3}\n"
    )
    assert submit(str(tmp_path / "bench.yaml"), [], "slurm", False) == 0
    (run_json,) = tmp_path.glob("gymslurm_runs/*/run.json")
    info = RunInfo.model_validate_json(run_json.read_bytes())
    assert [(b.cluster, b.first, b.count) for b in info.placement or []] == [("a", 0, 2), ("b", 2, 1)]
    assert info.aggregate_cluster == "a" and info.clusters == ["a", "b"]
    array = RunDir(run_json.parent).read_array()
    assert array is not None and [array.task(s) for s in range(3)] == ["a:12_0", "a:12_1", "b:12_2"]
    calls = _calls(slurm_log)
    assert {c for c in calls if c.startswith("scontrol")} == {
        "scontrol --clusters=a show config",
        "scontrol --clusters=b show config",
    }
    sbatches = [  # each array, then its spares (each sbatch's --comment: its intent, first_links.py)
        [word for word in c.split() if not word.startswith("--comment=")][:5]
        for c in calls
        if c.startswith("sbatch")
    ]
    links = str(run_json.parent / "scripts/links.sbatch")
    assert sbatches == [
        ["sbatch", "--clusters=a", "--parsable", "--array=0-1", links],
        ["sbatch", "--clusters=a", "--parsable", "--array=0-1", "--dependency=afterany:12"],
        ["sbatch", "--clusters=a", "--parsable", "--array=0-1", "--dependency=afterany:12"],
        ["sbatch", "--clusters=b", "--parsable", "--array=2", links],
        ["sbatch", "--clusters=b", "--parsable", "--array=2", "--dependency=afterany:12"],
        ["sbatch", "--clusters=b", "--parsable", "--array=2", "--dependency=afterany:12"],
    ]
    assert "shards 2..2: cluster b" in capsys.readouterr().out


def test_doctor_of_a_benchmark_checks_every_cluster_it_names_with_that_clusters_share(
    tmp_path: Path, slurm_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor --benchmark over {a: 2, b: 1} and 3 shards: scontrol -M a and -M b, a with 2 shards, b 1."""
    from gymslurm.commands.doctor import run_plan_doctor

    settings = validate({**BASE, "shards": 3, "slurm": {"clusters": {"a": 2, "b": 1}}}, "t")
    assert run_plan_doctor(settings, True, None) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(c["cluster"], c["shards"]) for c in report["clusters"]] == [("a", 2), ("b", 1)]
    configs = [c for c in _calls(slurm_log) if c.endswith("show config")]
    assert configs == ["scontrol --clusters=a show config", "scontrol --clusters=b show config"]


def test_doctor_of_a_benchmark_fails_on_a_cluster_that_cannot_be_asked(
    tmp_path: Path, slurm_log: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster whose scontrol fails is an error finding of that cluster, and doctor exits 1."""
    from gymslurm.commands.doctor import run_plan_doctor

    scontrol = slurm_log.parent / "bin" / "scontrol"
    scontrol.write_text(
        '#!/bin/sh\ncase "$1" in --clusters=zz) echo no such cluster >&2; exit 1 ;; esac\n'
        + scontrol.read_text().split("\n", 1)[1]
    )
    settings = validate({**BASE, "shards": 2, "slurm": {"clusters": ["a", "zz"]}}, "t")
    assert run_plan_doctor(settings, True, None) == 1
    report = json.loads(capsys.readouterr().out)
    errors = {
        c["cluster"]: [f["setting"] for f in c["findings"] if f["level"] == "error"]
        for c in report["clusters"]
    }
    assert errors == {"a": [], "zz": ["cluster"]}


def test_the_list_of_runs_reads_a_run_across_clusters_from_its_own_clusters(
    tmp_path: Path, slurm_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gymslurm status`` (no run): shard 0 (a:12_0) and shard 1 (b:12_1) both running, as a's and b's
    squeue say; the default cluster's one squeue (shared by the list) knows neither id."""
    from gymslurm.commands.status import main

    run = _run_across(tmp_path)
    record = ArrayRecord(
        job_id="a:12",
        shards=2,
        max_running=None,
        at="2026-01-01T00:00:00.000+00:00",
        chunk=1001,
        parts=[ArrayPart(job_id="a:12", base=0, size=1), ArrayPart(job_id="b:12", base=0, size=1, offset=1)],
    )
    atomic_write(run.array_path, record.model_dump_json().encode())
    assert main(["--json", "--run-root", str(tmp_path)]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["shards"] == {"HEALTHY": 2}, listed  # the shared default squeue: 2 STALLED
    asked = {c.split()[1] for c in _calls(slurm_log) if c.startswith("squeue")}
    assert asked == {"--clusters=a", "--clusters=b"}


# (name, shards, {cluster: shards it names}, blocks as (cluster, first, count))
NAMED = [
    ("one range each", 10, {"a": "0-6", "b": "7-9"}, [("a", 0, 7), ("b", 7, 3)]),
    ("two runs of one cluster", 10, {"a": "0-5,9", "b": "6-8"}, [("a", 0, 6), ("b", 6, 3), ("a", 9, 1)]),
    ("listed out of order", 4, {"b": "2,3", "a": "1,0"}, [("a", 0, 2), ("b", 2, 2)]),
    ("interleaved", 4, {"a": "0,2", "b": "1,3"}, [("a", 0, 1), ("b", 1, 1), ("a", 2, 1), ("b", 3, 1)]),
]


@pytest.mark.parametrize(("name", "shards", "ranges", "blocks"), NAMED, ids=[r[0] for r in NAMED])
def test_each_cluster_may_name_its_shards(
    name: str, shards: int, ranges: dict[str, str], blocks: list[tuple[str, int, int]]
) -> None:
    """``{a: "0-5,9", b: "6-8"}``: a block per run of consecutive shards of one cluster, in shard order."""
    from gymslurm.site.placement import blocks_for, cluster_of

    found = blocks_for(shards, ranges)  # type: ignore[arg-type]
    assert [(b.cluster, b.first, b.count) for b in found] == blocks
    assert {s: cluster_of(found, s) for s in range(shards)} == {
        s: next(c for c, r in ranges.items() if s in _numbers(r)) for s in range(shards)
    }


def _numbers(text: str) -> set[int]:
    out: set[int] = set()
    for item in text.split(","):
        low, _, high = item.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


@pytest.mark.parametrize(
    ("ranges", "says"),
    [
        ({"a": "0-5", "b": "5-9"}, "shard 5 for both a and b"),
        ({"a": "0-5", "b": "7-9"}, r"shard\(s\) 6 to no cluster"),
        ({"a": "0-12"}, r"the run has shards 0..9"),
        ({"a": "0-4", "b": "five"}, "expected shard numbers"),
    ],
)
def test_named_shards_cover_every_shard_once(ranges: dict[str, str], says: str) -> None:
    """A shard named twice, by none, past the run's shards, or a word instead of numbers: refused."""
    from gymslurm.site.placement import blocks_for

    with pytest.raises(ConfigError, match=says):
        blocks_for(10, ranges)  # type: ignore[arg-type]
