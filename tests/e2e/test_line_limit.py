"""``aggregate`` and ``health`` read with a line limit and say which line is over (issue 20, section 4).

A real collection, then one line appended to its results that is longer than the limit (set low
with ``GYMSLURM_MAX_LINE_BYTES`` so the test stays small; the default is 256 MiB): both commands
refuse with the file and the line number instead of holding the line (a 500 MB line took 1.5 GB).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.helpers import collect, gymslurm, write_tasks

pytestmark = pytest.mark.e2e

LIMIT = 4096


@pytest.mark.parametrize("command", ["aggregate", "health"])
def test_a_line_over_the_limit_is_refused_naming_it(tmp_path: Path, demo_server, command: str) -> None:
    """The over-long line is named (file, line 3) and the command exits 2 without a traceback."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}])
    output = tmp_path / "run" / "o.jsonl"
    assert collect(dataset, output, demo_server.url).returncode == 0
    with output.open("a") as handle:
        handle.write(json.dumps({"pad": "x" * (4 * LIMIT)}) + "\n")
    env = {"GYMSLURM_MAX_LINE_BYTES": str(LIMIT)}
    if command == "aggregate":
        done = gymslurm("aggregate", str(output), f"+output_jsonl_fpath={tmp_path / 'merged.jsonl'}", env=env)
    else:
        done = gymslurm("health", str(output), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{output}, line 3: is over {LIMIT} bytes" in done.stderr and "Traceback" not in done.stderr


def test_a_dataset_line_over_the_limit_is_refused_naming_it(tmp_path: Path, demo_server) -> None:
    """A collect's dataset with a line over the limit: exit 2 naming the dataset and line, never read
    whole (before: a 1 GB single-line dataset was held, 3 GB RSS, no message)."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {"pad": "x" * (4 * LIMIT)}])
    output = tmp_path / "run" / "o.jsonl"
    done = collect(dataset, output, demo_server.url, env={"GYMSLURM_MAX_LINE_BYTES": str(LIMIT)})
    assert done.returncode == 2, done.stderr
    assert f"{dataset}, line 2: is over {LIMIT} bytes" in done.stderr and "Traceback" not in done.stderr
