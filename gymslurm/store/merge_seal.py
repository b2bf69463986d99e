"""``aggregate/merged_seal.json`` of a suite's benchmark: its merge, sealed, so that the suite's next
aggregation does not merge it again (docs/suites.md, "The aggregation").

Written by the suite's aggregation (job/suite_aggregation.py) last, after a merge that exited 0. It
holds the gymslurm version that merged, what the merge said, and the identity (``file_identity``:
device, inode, size, mtime and ctime in ns) of every file of the benchmark's run folder the merge
depends on or wrote (:func:`merge_files`): its settings (``benchmark.yaml``, the aggregation
command and ``on_failed_shard`` included; ``run.json``), each shard chain's ledger (its decisions),
and every file under ``output/``: the shards' outputs and companions, the merged output, its metrics
and rewards. A collector's run lock is left out (every holder rewrites it).

A later aggregation skips the benchmark only when the folder holds exactly the sealed files, each
with its sealed identity (the check of the finished-run seal, store/seal.py: a write, replacement,
truncation or append changes the ctime, which no user call sets back), and this gymslurm's version
merged it. Anything else (a shard run again, a settings file rewritten, a file added or removed, an
unreadable or other-version seal) is merged again and resealed: the seal is a shortcut that skips the
merge, never a check. A merge whose command names a server (``://``) is never sealed: what that
server answered is in no file.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from gymslurm.formats import version_of, version_problem
from gymslurm.store.paths import Identity, file_identity, own_file_bytes
from gymslurm.version import __version__

UNSEALED = ("_run.lock",)  # rewritten by every holder of a collector's run lock


def seal_path(root: Path) -> Path:
    """Where a benchmark run's merge seal is."""
    return root / "aggregate" / "merged_seal.json"


def merge_files(root: Path) -> list[Path]:
    """Every file of the benchmark run at ``root`` its merge depends on or wrote (sorted)."""
    files = [root / "benchmark.yaml", root / "run.json", *sorted((root / "shards").glob("*/ledger.jsonl"))]
    output = root / "output"
    found = (p for p in output.rglob("*") if p.is_file() and not p.name.endswith(UNSEALED))
    return [*files, *sorted(found)]


def _identities(root: Path) -> dict[str, list[int] | None]:
    def shown(identity: Identity) -> list[int] | None:
        return None if identity is None else list(identity)

    return {str(path): shown(file_identity(path)) for path in merge_files(root)}


def seal_merge(root: Path, said: str) -> None:
    """Seal the benchmark's merge now (its last write); ``said``: what the merge said."""
    from gymslurm.store.atomic import publish_json

    seal_path(root).parent.mkdir(parents=True, exist_ok=True)
    body = {
        "format_version": version_of("merge_seal"),
        "gymslurm": __version__,
        "said": said,
        "files": _identities(root),
    }
    publish_json(seal_path(root), body)


def sealed_merge(root: Path) -> str | None:
    """What the sealed merge said when the seal holds (nothing of the folder changed since), else None.

    Only a regular file of this user's is read, never through a link (a seal speaks for the run)."""
    try:
        data = orjson.loads(own_file_bytes(seal_path(root)))
    except (OSError, ValueError):  # none, not this user's regular file, not JSON
        return None
    if type(data) is not dict or version_problem("merge_seal", data.get("format_version")):
        return None
    said = data.get("said")
    if data.get("gymslurm") != __version__ or type(said) is not str:
        return None
    return said if data.get("files") == _identities(root) else None


def asks_a_server(command: list[str]) -> bool:
    """Whether a merge command names a server (its answer is in no file: never sealed)."""
    return any("://" in part for part in command)
