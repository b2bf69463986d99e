"""``submit`` refuses bad input at the door (issue 33): a malformed, empty or non-UTF-8 dataset, a row
that is not an object, and more shards than rows are refused before any run exists, naming the
user's own file and line (before: accepted, then failing in a job naming inputs/shard-000.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import gymslurm

pytestmark = pytest.mark.e2e


def _bench(tmp: Path, dataset: bytes) -> Path:
    (tmp / "data.jsonl").write_bytes(dataset)
    path = tmp / "bench.yaml"
    path.write_text(
        f"dataset: {tmp / 'data.jsonl'}\nrun_root: {tmp / 'runs'}\n"
        f"collector:\n  command: {json.dumps(['/bin/true'])}\n"
    )
    return path


@pytest.mark.parametrize(
    ("dataset", "shards", "said"),
    [
        (b'{"q": 1}\n{"q": 2\n', 1, "line 2: is not valid JSON"),
        (b"\n\n", 1, "has no rows"),
        (b'{"q": 1}\n{"q": "\xff\xfe"}\n', 1, "line 2: is not UTF-8"),
        (b'{"q": 1}\n[1, 2]\n', 1, "line 2: is a JSON list, not an object"),
        (b'{"q": 1}\n{"q": 2}\n', 3, "shards=3 is more than the 2 row(s)"),
    ],
    ids=["malformed", "empty", "not UTF-8", "not an object", "more shards than rows"],
)
def test_submit_refuses_a_bad_dataset_before_creating_a_run(
    tmp_path: Path, dataset: bytes, shards: int, said: str
) -> None:
    """Exit 2, one message naming the user's dataset (and line), no run folder created."""
    bench = _bench(tmp_path, dataset)
    done = gymslurm("submit", str(bench), "--backend", "local", f"shards={shards}", check=False)
    assert done.returncode == 2, done.stderr
    assert str(tmp_path / "data.jsonl") in done.stderr and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
