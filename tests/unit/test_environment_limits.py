"""One environment string is at most 128 KiB (Linux MAX_ARG_STRLEN): checked before anything is written.

The job hands its processes configuration in the environment, never on a command line (issue 20):
the secrets bundle (``GYMSLURM_SECRETS``), the collector's overrides (``GYMSLURM_COLLECT_OVERRIDES``)
and each ``env`` entry are one environment string each, and Linux starts no process with one over
131,072 bytes. ``submit`` refuses such a benchmark with the variable's name and the limit, before
the run directory or the dataset exists; the link checks the overrides again before it starts the
collector.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gymslurm.errors import ConfigError
from gymslurm.job.collector_process import overrides_problem
from gymslurm.launcher.environment import child_environment
from gymslurm.process_env import MAX_ENV_STRING_BYTES
from tests.e2e.helpers import gymslurm


def _submit(tmp_path: Path, collector: dict[str, object]) -> tuple[str, Path]:
    data = tmp_path / "data.jsonl"
    write = [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('{}\\n')", "{dataset}"]
    bench = tmp_path / "bench.yaml"
    command = [sys.executable, "-m", "gymslurm", "collect"]
    bench.write_text(
        json.dumps(
            {
                "name": "b",
                "dataset": str(data),
                "dataset_command": write,
                "run_root": str(tmp_path / "runs"),
                "backend": "local",
                "collector": {"command": command, **collector},
                "aggregation": {"enabled": False},
            }
        )
    )
    done = gymslurm("submit", str(bench))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert not data.exists() and not (tmp_path / "runs").exists(), "nothing is written before the refusal"
    return done.stderr, tmp_path


def test_collector_overrides_over_128_kib_are_refused_at_submit(tmp_path: Path) -> None:
    """A 140 KB override: ``submit`` names GYMSLURM_COLLECT_OVERRIDES and the limit, writes nothing."""
    stderr, _ = _submit(tmp_path, {"overrides": ["+prompt=" + "x" * 140_000]})
    assert "GYMSLURM_COLLECT_OVERRIDES" in stderr and "131,072 bytes (MAX_ARG_STRLEN)" in stderr, stderr
    assert "x" * 100 not in stderr


def test_a_secrets_bundle_over_128_kib_is_refused_at_submit(tmp_path: Path) -> None:
    """Three 50 KiB credentials, each under the limit: their bundle (GYMSLURM_SECRETS) is not."""
    env = {f"KEY{i}_API_KEY": f"sk-{i}" + "y" * 50_000 for i in range(3)}
    stderr, _ = _submit(tmp_path, {"env": env})
    assert "the benchmark's secrets travels" in stderr and "GYMSLURM_SECRETS" in stderr, stderr
    assert "y" * 100 not in stderr


def test_one_env_entry_over_128_kib_is_refused_at_submit_naming_it(tmp_path: Path) -> None:
    """A 140 KiB ``collector.env`` value: the refusal names ``collector.env.BIG``."""
    stderr, _ = _submit(tmp_path, {"env": {"BIG": "z" * 140_000}})
    assert "collector.env.BIG travels" in stderr and "in the environment variable BIG" in stderr, stderr


def test_the_link_refuses_overrides_one_byte_over_the_limit() -> None:
    """``overrides_problem`` (the link's check before it starts the collector) is exact at the limit."""
    room = MAX_ENV_STRING_BYTES - len("GYMSLURM_COLLECT_OVERRIDES=") - 1 - len('[""]')
    assert overrides_problem(["x" * room]) is None
    problem = overrides_problem(["x" * (room + 1)])
    assert problem is not None and f"{MAX_ENV_STRING_BYTES + 1:,} bytes" in problem


def test_a_reference_resolving_over_the_limit_inside_the_job_is_a_clear_error() -> None:
    """``${oc.env:BIG}`` of a 140 KB variable: the process is not started, the error names the entry."""
    with pytest.raises(ConfigError, match=r"servers.judge.env.KEY \(resolved in the job\) travels"):
        child_environment({"BIG": "b" * 140_000}, {"KEY": "${oc.env:BIG}"}, where="servers.judge.env")


@pytest.mark.parametrize("size", [MAX_ENV_STRING_BYTES])
def test_linux_refuses_what_the_check_refuses(size: int) -> None:
    """The limit is the kernel's: an environment string one byte over it cannot start a process."""
    import subprocess

    value = "v" * (size - len("V=") - 1)
    assert subprocess.run(["true"], env={"V": value}, check=False).returncode == 0
    with pytest.raises(OSError, match="Argument list too long"):
        subprocess.run(["true"], env={"V": value + "v"}, check=False)
