"""A run on a named Slurm cluster (``slurm.cluster``, issue 18): every Slurm command goes there.

Why: users have more than one cluster; ``-M b`` (``--clusters=b``) reaches another cluster's
controller through slurmdbd. The run records its cluster in run.json, so status, cancel, resubmit,
logs, report and inject, and the links in their jobs, all talk to the cluster the run was put on.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gymslurm.errors import ConfigError
from gymslurm.launcher.run_site import run_backend
from gymslurm.launcher.rundir import RunDir, atomic_write
from gymslurm.launcher.settings import validate
from gymslurm.site.slurm import on_cluster
from tests.run_info import run_info

BASE = {"name": "t", "dataset": "d.jsonl", "servers": [{"url": "http://127.0.0.1:1"}]}


def test_the_default_cluster_leaves_a_command_as_it_is() -> None:
    """No cluster named: ``sacct -j 5`` runs as written."""
    assert on_cluster(["sacct", "-j", "5"], None) == ["sacct", "-j", "5"]


@pytest.mark.parametrize("command", ["sbatch", "squeue", "sacct", "scancel", "scontrol", "/usr/bin/sinfo"])
def test_a_named_cluster_goes_right_after_every_slurm_command(command: str) -> None:
    """cluster b: ``--clusters=b`` right after the command's name (sacct ignores SLURM_CLUSTERS)."""
    assert on_cluster([command, "-x"], "b") == [command, "--clusters=b", "-x"]


def test_other_programs_get_no_cluster_option() -> None:
    """A command that is not Slurm's (the probe's python) is left alone."""
    assert on_cluster(["python", "-c", "pass"], "b") == ["python", "-c", "pass"]


def test_slurm_cluster_is_a_slurm_name() -> None:
    """slurm.cluster takes a cluster name and refuses one that would be a second option."""
    assert validate({**BASE, "slurm": {"cluster": "b"}}, "t").slurm.cluster == "b"
    with pytest.raises(ConfigError, match="cluster"):
        validate({**BASE, "slurm": {"cluster": "b --wrap=x"}}, "t")


def _fake_squeue(bin_dir: Path, seen: Path) -> None:
    bin_dir.mkdir()
    squeue = bin_dir / "squeue"
    squeue.write_text(f'#!/bin/sh\nprintf "%s" "$*" > {seen}\n')
    squeue.chmod(squeue.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(("cluster", "asked"), [("b", "--clusters=b -h"), (None, "-h")])
def test_a_runs_backend_asks_the_cluster_in_its_run_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: str | None, asked: str
) -> None:
    """status/cancel/resubmit's backend for a run recorded on cluster b queries b (the default else)."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    info = run_info(output_stem="o", cluster=cluster)
    atomic_write(run.info_path, info.model_dump_json().encode())
    seen = tmp_path / "seen"
    _fake_squeue(tmp_path / "bin", seen)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert run_backend(run).queue() == {}
    assert seen.read_text().startswith(asked)
