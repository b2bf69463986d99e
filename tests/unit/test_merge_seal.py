"""A suite benchmark's merge seal (store/merge_seal.py): it holds only while nothing the merge
depends on or wrote changed; a collector's run lock aside."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gymslurm.store.merge_seal import asks_a_server, seal_merge, seal_path, sealed_merge


def _benchmark(root: Path) -> Path:
    for name, text in (
        ("benchmark.yaml", "name: a\n"),
        ("run.json", "{}\n"),
        ("shards/000/ledger.jsonl", "{}\n"),
        ("output/shard-000/rollouts.jsonl", "{}\n"),
        ("output/shard-000/rollouts_run.lock", ""),
        ("output/merged/rollouts.jsonl", "{}\n"),
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    seal_merge(root, "aggregate exited 0")
    return root


def test_an_unchanged_benchmark_keeps_its_seal_and_a_lock_taken_again_does_not_break_it(
    tmp_path: Path,
) -> None:
    """Sealed and untouched: the seal answers what the merge said; a run lock rewritten by its
    holder is not the merge's."""
    root = _benchmark(tmp_path)
    (root / "output/shard-000/rollouts_run.lock").write_text("pid 2\n")
    assert sealed_merge(root) == "aggregate exited 0"


@pytest.mark.parametrize(
    "change",
    [
        lambda r: (r / "benchmark.yaml").write_text("name: a\n"),  # the same bytes written again
        lambda r: (r / "shards/000/ledger.jsonl").write_text("{}\n{}\n"),  # a link ran again
        lambda r: (r / "output/shard-000/rollouts.jsonl").unlink(),
        lambda r: (r / "output/shard-001").mkdir() or (r / "output/shard-001/rollouts.jsonl").write_text(""),
        lambda r: os.replace(r / "output/merged/rollouts.jsonl", r / "output/merged/x"),
    ],
)
def test_any_change_to_what_the_merge_read_or_wrote_breaks_the_seal(
    tmp_path: Path, change: Callable[[Path], object]
) -> None:
    """A file rewritten (even with its own bytes), appended to, removed, added or moved: the seal
    does not hold, and the benchmark is merged again."""
    root = _benchmark(tmp_path)
    change(root)
    assert sealed_merge(root) is None


def test_a_seal_of_another_version_or_a_planted_link_is_not_trusted(tmp_path: Path) -> None:
    """Another format version, another gymslurm, or a symlink at the seal's name: ignored."""
    root = _benchmark(tmp_path)
    body = json.loads(seal_path(root).read_text())
    for key, value in (("format_version", 2), ("gymslurm", "0.0.0")):
        seal_path(root).write_text(json.dumps({**body, key: value}))
        assert sealed_merge(root) is None
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps(body))
    seal_path(root).unlink()
    seal_path(root).symlink_to(other)
    assert sealed_merge(root) is None


def test_a_merge_that_asks_a_server_is_never_sealed() -> None:
    """Its answer is in no file: a URL in the command says so."""
    assert asks_a_server(["gymslurm", "aggregate", "+environment_server_url=http://h:1"])
    assert not asks_a_server(["gymslurm", "aggregate", "{inputs_glob}", "+output_jsonl_fpath=/o.jsonl"])
