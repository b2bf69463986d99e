"""The chain step's command lines and coverage reading (the parts of ``job/`` without processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymslurm.job.aggregation import aggregate_argv
from gymslurm.job.collector_files import ledger_resubmit_offset, read_progress
from gymslurm.job.collector_process import collector_argv
from gymslurm.launcher.decide import made_progress
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.store.files import read_resubmit_offset, write_coverage
from gymslurm.store.paths import RunPaths
from tests.slurm.launcher_standin_collector import standin_coverage


def _settings(**extra: object) -> BenchmarkSettings:
    return BenchmarkSettings.model_validate(
        {
            "name": "b",
            "dataset": "d.jsonl",
            "servers": [{"name": "env", "command": ["srv"]}],
            "collector": {"command": ["stand-in"], "overrides": ["+limit=3"]},
            **extra,
        }
    )


def test_collector_argv_resumes_requires_completion_and_names_the_shard_files() -> None:
    """Each link runs the configured collector with resume, require_complete, its shard files and servers."""
    run = RunDir(Path("/runs/r"))
    argv = collector_argv(_settings(), run, 2, {"env": "http://127.0.0.1:9"}, resubmit=False)
    assert argv == [
        "stand-in",
        "+input_jsonl_fpath=/runs/r/inputs/shard-002.jsonl",
        "+output_jsonl_fpath=/runs/r/output/shard-002/rollouts.jsonl",
        "+resume_from_cache=true",
        "+require_complete=true",
        "+environment_server_url=http://127.0.0.1:9",
        "+limit=3",
    ]


def test_first_link_after_resubmit_resets_the_collector_budget() -> None:
    """The resubmit override is added only when the ledger says a resubmit is pending."""
    argv = collector_argv(_settings(), RunDir(Path("/r")), 0, {"env": "u"}, resubmit=True)
    assert argv[-1] == "+resubmit=true"


def test_aggregate_argv_expands_inputs_and_output() -> None:
    """{inputs} becomes one argument per shard output and {output} the merged path."""
    settings = _settings(aggregation={"command": ["agg", "{inputs}", "+out={output}"]})
    assert aggregate_argv(settings, [Path("/a.jsonl"), Path("/b.jsonl")], Path("/m.jsonl")) == [
        "agg",
        "/a.jsonl",
        "/b.jsonl",
        "+out=/m.jsonl",
    ]


def test_aggregate_argv_passes_one_glob_not_one_argument_per_shard() -> None:
    """{inputs_glob} (the default command's) is one argument matching every shard output, however many."""
    from gymslurm.job.aggregation import shard_outputs_glob

    settings = _settings()
    pattern = shard_outputs_glob(RunDir(Path("/runs/r[1]")), "rollouts")
    argv = aggregate_argv(settings, [Path(f"/o{i}.jsonl") for i in range(1000)], Path("/m.jsonl"), pattern)
    assert argv[-2:] == ["/runs/r[[]1]/output/shard-*/rollouts.jsonl", "+output_jsonl_fpath=/m.jsonl"]
    assert len(argv) == 6


def test_read_progress_from_coverage(tmp_path: Path) -> None:
    """The coverage file's counts and progress flag become a Progress; no file gives None."""
    output = tmp_path / "rollouts.jsonl"
    assert read_progress(output) is None
    coverage = standin_coverage(4, failed=1, omitted=2, progress=3, complete=False)
    write_coverage(RunPaths.for_output(output), coverage)  # the collector's own writer and format
    progress = read_progress(output)
    assert progress is not None and (progress.outcomes, progress.progress_outcomes_recorded) == (7, 3)


def test_a_coverage_rewritten_within_the_same_second_is_a_new_snapshot(tmp_path: Path) -> None:
    """Two links a moment apart: the second's coverage (same ``written_at`` second) is still its own.

    Found as a flake of the local chain test under load: progress was judged by ``written_at``, to the
    second, so a link whose collector wrote its coverage in the second of the one before spent a retry.
    """
    output = tmp_path / "rollouts.jsonl"
    coverage = standin_coverage(4, progress=3, complete=False)
    write_coverage(RunPaths.for_output(output), coverage)
    before = read_progress(output)
    write_coverage(RunPaths.for_output(output), coverage)  # the same written_at, a new file
    after = read_progress(output)
    assert made_progress(before, after)
    assert not made_progress(after, read_progress(output))  # not rewritten since: nothing new


def test_coverage_of_another_version_is_no_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A coverage file the store does not read (format_version 2) is no evidence of progress, and is said."""
    output = tmp_path / "rollouts.jsonl"
    data = standin_coverage(4, progress=3, complete=False).model_dump(mode="json") | {"format_version": 2}
    RunPaths.for_output(output).coverage.write_text(json.dumps(data))
    assert read_progress(output) is None
    assert "format_version 2" in capsys.readouterr().err


def test_hand_made_partial_coverage_is_no_progress(tmp_path: Path) -> None:
    """A coverage file missing the collector's fields is not read with made-up zeros: no progress."""
    output = tmp_path / "rollouts.jsonl"
    partial = {"format_version": 1, "successful": 4, "progress_outcomes_recorded": 3, "written_at": "t"}
    RunPaths.for_output(output).coverage.write_text(json.dumps(partial))
    assert read_progress(output) is None


@pytest.mark.parametrize(("text", "recorded"), [("5\n2\n", "5"), ("7\n", "7"), ("x y\n", None), (None, None)])
def test_resubmit_offset_is_read_by_the_store(tmp_path: Path, text: str | None, recorded: str | None) -> None:
    """The ledger keeps the failure-line count the store's one reader parses; a malformed file is None."""
    output = tmp_path / "rollouts.jsonl"
    paths = RunPaths.for_output(output)
    if text is not None:
        paths.resubmit_offset.write_text(text)
    assert ledger_resubmit_offset(output) == recorded
    if recorded is not None:
        assert str(read_resubmit_offset(paths)[0]) == recorded
