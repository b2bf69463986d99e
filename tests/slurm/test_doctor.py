"""`gymslurm doctor` against the sandbox as it is (issue 12 §4): the settings and the probe job."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .helpers import SlurmUser

pytestmark = pytest.mark.slurm


def test_doctor_reports_the_sandbox_and_probes_a_compute_node(
    slurm_user: SlurmUser, slurm_python: Path
) -> None:
    """On the sandbox: nothing blocks, linuxproc is warned about, and the probe job reports flock refused."""
    root = slurm_user.workdir / "runs"
    argv = [
        str(slurm_python),
        "-m",
        "gymslurm",
        "doctor",
        "--json",
        "--partition",
        "low",
        "--shards",
        "3",
        "--probe",
        str(root),
        "--python",
        str(slurm_python),
    ]
    done = subprocess.run(
        slurm_user.command(argv),
        cwd=slurm_user.workdir,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    findings = {f["setting"]: f for f in report["findings"]}
    assert report["slurm_version"].startswith("22.05")
    assert [f for f in report["findings"] if f["level"] == "error"] == []
    assert findings["ProctrackType"]["level"] == "warning"
    assert findings["PreemptMode[low]"]["level"] == "ok" and "PreemptMode[debug]" not in findings
    assert findings["MaxJobCount"]["level"] == "ok"
    assert (findings["flock on the run root"]["level"], findings["flock on the run root"]["value"]) == (
        "ok",
        "refused",
    )
    assert findings["gymslurm on the compute node"]["level"] == "ok"
    assert findings["clock of the compute node"]["level"] == "ok"
    assert not list((root / ".gymslurm-doctor").glob("probe-*"))  # the probe cleaned up after itself


def test_doctor_checks_the_cluster_it_is_given(slurm_user: SlurmUser, slurm_python: Path) -> None:
    """``doctor --cluster b`` reads cluster b's settings (its name, its one partition), not the default's."""
    argv = [str(slurm_python), "-m", "gymslurm", "doctor", "--json", "--cluster", "b"]
    done = subprocess.run(
        slurm_user.command(argv),
        cwd=slurm_user.workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["cluster"] == "b"
    assert not [f for f in report["findings"] if f["setting"] == "PreemptMode[low]"]  # b has no low


def test_doctor_of_a_benchmark_checks_each_cluster_of_its_plan(
    slurm_user: SlurmUser, slurm_python: Path
) -> None:
    """``doctor --benchmark B`` with slurm.clusters [a, b] and 3 shards: cluster a's findings (its
    low/high partitions) for 2 shards and cluster b's for 1, nothing blocking, in one report."""
    bench = slurm_user.write(
        "plan.yaml",
        "name: plan\ndataset: d.jsonl\nshards: 3\nservers: [{url: 'http://127.0.0.1:1'}]\n"
        "slurm: {clusters: [a, b]}\n",
        mode=0o644,
    )
    argv = [str(slurm_python), "-m", "gymslurm", "doctor", "--json", "--benchmark", str(bench)]
    done = subprocess.run(
        slurm_user.command(argv),
        cwd=slurm_user.workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    clusters = json.loads(done.stdout)["clusters"]
    assert [(c["cluster"], c["shards"]) for c in clusters] == [("a", 2), ("b", 1)]
    settings = [{f["setting"] for f in c["findings"]} for c in clusters]
    assert "PreemptMode[low]" in settings[0] and "PreemptMode[low]" not in settings[1]
    assert not [f for c in clusters for f in c["findings"] if f["level"] == "error"]
