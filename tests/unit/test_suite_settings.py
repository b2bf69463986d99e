"""A suite file: validated before anything is written, every mistake naming the file and its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.commands.new_suite import submit_suite
from gymslurm.errors import ConfigError
from gymslurm.launcher.suite_settings import (
    across_clusters_problem,
    chain_settings,
    key_line,
    load_suite,
    own_cluster_problem,
    parse_suite,
)

GOOD = """\
stack:
  - name: policy
    command: ["{python}", -m, gymslurm, demo-model-server, --host, "{host}", --port, "{port}"]
    probe: chat_completions
    collector_override: null
benchmarks:
  - name: a
    benchmark: demo
  - name: b
    benchmark: demo
    shards: 3
    repeats: 2
"""


def _suite(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my-suite.yaml"
    path.write_text(text)
    return path


def test_the_demo_suite_composes_three_benchmarks_sharing_one_model_server() -> None:
    """configs/suites/demo-suite.yaml: every policy server is the stack's; env servers stay."""
    suite = load_suite("demo-suite", [])
    assert [m.name for m in suite.members] == ["arith", "arith-repeats", "arith-one-shard"]
    assert all([s.name for s in m.settings.servers] == ["policy", "demo"] for m in suite.members)
    assert [m.settings.shards for m in suite.members] == [2, 2, 1]
    links, _ = chain_settings(suite)
    assert ([s.name for s in links.servers], links.shards, links.name) == (["policy"], 2, "demo-suite")


def test_per_benchmark_overrides_reach_only_that_benchmark(tmp_path: Path) -> None:
    """b's shards and repeats are its own; a's are the benchmark file's."""
    suite = load_suite(str(_suite(tmp_path, GOOD)), [])
    a, b = suite.members
    assert (a.settings.shards, b.settings.shards) == (2, 3)
    assert "+num_repeats=2" in b.settings.collector.overrides
    assert "+num_repeats=2" not in a.settings.collector.overrides
    assert suite.chains == 3


def test_a_misspelt_key_names_the_file_and_its_line(tmp_path: Path) -> None:
    """`repeat:` (not `repeats:`) on line 9 is refused there."""
    path = _suite(
        tmp_path,
        GOOD.replace("    benchmark: demo\n  - name: b", "    benchmark: demo\n    repeat: 2\n  - name: b"),
    )
    with pytest.raises(ConfigError, match=rf"suite {path}:9: benchmarks.0.repeat: Extra inputs"):
        load_suite(str(path), [])


def test_a_bad_benchmark_override_names_the_suite_line_of_that_benchmark(tmp_path: Path) -> None:
    """An override the benchmark refuses is reported at the suite's entry, in the benchmark's words."""
    path = _suite(tmp_path, GOOD.replace("    shards: 3\n", "    shards: 3\n    overrides: [slurm.tme=5]\n"))
    with pytest.raises(ConfigError, match=rf"suite {path}:9: benchmarks.1: .*slurm.tme"):
        load_suite(str(path), [])


def test_an_unknown_benchmark_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    """A benchmark name that is no file says which exist."""
    path = _suite(tmp_path, GOOD.replace("benchmark: demo\n  - name: b", "benchmark: nope\n  - name: b"))
    with pytest.raises(
        ConfigError, match=rf"{path}:7: benchmarks.0: unknown benchmark 'nope'.*Known benchmarks: demo"
    ):
        load_suite(str(path), [])


def test_two_benchmarks_of_one_name_are_refused() -> None:
    """Each benchmark is a folder of the run: names are unique."""
    text = "benchmarks:\n  - benchmark: demo\n  - benchmark: demo\n"
    with pytest.raises(ConfigError, match=r"two benchmarks are named 'demo'; give one a `name:`"):
        parse_suite(text, "s.yaml", "s")


def test_an_empty_suite_is_refused_at_its_benchmarks_line() -> None:
    """A suite needs at least one benchmark."""
    with pytest.raises(ConfigError, match=r"suite s.yaml:2: benchmarks: List should have at least 1 item"):
        parse_suite("order: sequential\nbenchmarks: []\n", "s.yaml", "s")


def test_a_benchmarks_server_not_in_the_stack_stays_its_own(tmp_path: Path) -> None:
    """A stack named otherwise leaves each benchmark its own policy server (a judge model, say)."""
    suite = load_suite(str(_suite(tmp_path, GOOD.replace("name: policy", "name: model"))), [])
    assert [s.name for s in suite.members[0].settings.servers] == ["model", "policy", "demo"]


def test_key_line_finds_nested_keys_and_list_items() -> None:
    """The line of benchmarks[1].shards, and of its parent when the key is absent."""
    assert key_line(GOOD, ("benchmarks", 1, "shards")) == 11
    assert key_line(GOOD, ("benchmarks", 1, "nope")) == 9


def test_a_top_level_override_reaches_the_suite_links_own_settings_too() -> None:
    """``slurm.time=...`` and ``budget.gpu_hours=...`` on the command line set the links' own
    settings (their time limit, the suite's budget), not only every benchmark's."""
    suite = load_suite("demo-suite", ["slurm.time=00:20:00", "budget.gpu_hours=3"])
    settings, _ = chain_settings(suite)
    assert settings.slurm.time == "00:20:00" and settings.budget.gpu_hours == 3
    assert chain_settings(load_suite("demo-suite", []))[0].slurm.time == "00:10:00"


def test_a_suite_across_clusters_is_refused_at_its_slurm_clusters_line(tmp_path: Path) -> None:
    """``slurm: {clusters: [a, b]}`` in the suite file: the refusal names the file, the line and
    what to do (one cluster, or one suite run per cluster)."""
    path = _suite(tmp_path, GOOD + "slurm:\n  time: '00:10:00'\n  clusters: [a, b]\n")
    problem = across_clusters_problem(load_suite(str(path), []))
    assert problem is not None and problem.startswith(f"suite {path}:15: slurm.clusters: ")
    assert "slurm.cluster: NAME" in problem and "one suite run per cluster" in problem


def test_a_suite_across_clusters_from_the_command_line_is_refused_naming_it() -> None:
    """``slurm.clusters=[a,b]`` typed on the command line is named as such; without it, no refusal."""
    problem = across_clusters_problem(load_suite("demo-suite", ["slurm.clusters=[a,b]"]))
    assert problem is not None and problem.startswith("slurm.clusters on the command line")
    assert across_clusters_problem(load_suite("demo-suite", [])) is None


def test_a_benchmark_file_across_clusters_is_refused_naming_its_line_and_the_suites(tmp_path: Path) -> None:
    """A benchmark whose own file sets ``slurm.clusters`` (which a suite's links would ignore) is
    refused naming the suite's line of that benchmark and the line of its own file."""
    bench = tmp_path / "mine.yaml"
    bench.write_text("dataset: data.jsonl\nslurm:\n  clusters: [a, b]\n")
    path = _suite(tmp_path, GOOD + f"  - name: c\n    benchmark: {bench}\n")
    problem = across_clusters_problem(load_suite(str(path), []))
    assert problem is not None and problem.startswith(f"suite {path}:13: benchmark 'c' sets slurm.clusters")
    assert f"in {bench}:3:" in problem and "remove it from the benchmark's file" in problem


def test_submit_refuses_a_suite_across_clusters_on_slurm_before_writing_anything(tmp_path: Path) -> None:
    """The refusal comes before the run folder: nothing is written under the run root."""
    path = _suite(tmp_path, GOOD + f"run_root: {tmp_path / 'runs'}\nslurm:\n  clusters: [a, b]\n")
    with pytest.raises(ConfigError, match="shards across clusters are not for suites"):
        submit_suite(load_suite(str(path), []), [], "slurm", dry_run=False, wait=False)
    assert not (tmp_path / "runs").exists()


def test_a_benchmark_files_own_cluster_is_refused_naming_its_line_and_what_to_do(tmp_path: Path) -> None:
    """A benchmark whose own file sets ``slurm.cluster`` (a suite's links run on the suite's
    cluster, so it was ignored silently) is refused naming the suite's line of that benchmark, the
    line of its own file, and the ways out; set in the suite's ``slurm:`` too, it is what runs."""
    bench = tmp_path / "mine.yaml"
    bench.write_text("dataset: data.jsonl\nslurm:\n  cluster: b\n")
    path = _suite(tmp_path, GOOD + f"  - name: c\n    benchmark: {bench}\n")
    suite = load_suite(str(path), [])
    problem = own_cluster_problem(suite, chain_settings(suite)[0].slurm.cluster)
    assert problem is not None and problem.startswith(f"suite {path}:13: benchmark 'c' sets slurm.cluster: b")
    assert f"in {bench}:3," in problem and "the default cluster" in problem
    assert "`slurm.cluster: b` in the suite's `slurm:`" in problem and "remove it" in problem
    there = load_suite(str(path), ["slurm.cluster=b"])
    assert own_cluster_problem(there, chain_settings(there)[0].slurm.cluster) is None
    assert own_cluster_problem(load_suite("demo-suite", []), None) is None


def test_submit_refuses_a_benchmarks_own_cluster_on_slurm_before_writing_anything(tmp_path: Path) -> None:
    """The refusal comes before the run folder: nothing is written under the run root."""
    bench = tmp_path / "mine.yaml"
    bench.write_text("dataset: data.jsonl\nslurm:\n  cluster: b\n")
    path = _suite(tmp_path, GOOD + f"  - name: c\n    benchmark: {bench}\nrun_root: {tmp_path / 'runs'}\n")
    with pytest.raises(ConfigError, match=r"benchmark 'c' sets slurm\.cluster: b"):
        submit_suite(load_suite(str(path), []), [], "slurm", dry_run=False, wait=False)
    assert not (tmp_path / "runs").exists()
