"""``<stem>_finished.json``: the seal a finished collection leaves for the resume that would change nothing.

Written last, under the run lock, by a collection that ends with nothing left to dispatch
(``collector/seal.py`` decides when and what it holds); read by ``gymslurm collect`` before it
composes a configuration, asks a server or reconciles a run. It holds:

- ``invocation``: the digest of the command that a resume must repeat (``collector_seal.Invocation``);
- ``files``: the identity (device, inode, size, mtime, ctime in ns; ``null`` for an absent file) of
  every file the resume would read: the run's files (not its lock, not this seal) and the dataset;
- ``transcript``: what that resume prints, stream by stream, and ``exit_code``: what it exits with;
- ``servers``: each server the full path asked for its configuration (its URL, a password cut out)
  with the digest of its answer as the identity reads it (``null``: it answered without one). The
  servers' side of the identity is in no file: a replay asks them again (version 2; a version 1
  seal, which kept none, is ignored).

Why identity and not content: a file cannot be written, replaced, truncated or appended to without
changing its ctime, which no user call can set back (a copy gets a new inode). Reading the run again
to check it would cost what the seal saves. A seal that does not match is ignored, never trusted in
part; a damaged one (not JSON, another version) is ignored too: the full resume that follows
replaces it. Imports nothing heavy on purpose: the resume of a finished run reads only this.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gymslurm.formats import version_of, version_problem
from gymslurm.store.paths import Identity, RunPaths, file_identity, own_file_bytes

NOT_SEALED = frozenset({"lock", "finished"})  # the lock is rewritten by every holder; the seal is itself
STREAMS = ("stdout", "stderr")


def identities(paths: Iterable[Path]) -> dict[str, Identity]:
    """The identity of each of ``paths``, by its absolute path."""
    return {str(path): file_identity(path) for path in paths}


def sealed_files(paths: RunPaths, dataset: Path) -> list[Path]:
    """Every file a resume of this run reads: its own (bar the lock and the seal) and the dataset."""
    own = [path for role, path in paths.companions().items() if role not in NOT_SEALED]
    return [*own, dataset.expanduser().absolute()]


@dataclass(frozen=True)
class ServerAnswer:
    """One server a finished run's identity read: where, and the digest of what it answered."""

    url: str  # as the seal keeps it: any password or token cut out
    digest: str | None  # None: the server answered without a configuration


@dataclass(frozen=True)
class FinishedSeal:
    """A finished run's answer to one repeated command (see the module docstring)."""

    invocation: str
    env_names: tuple[str, ...]  # the environment variables the invocation digest read
    files: dict[str, Identity]
    exit_code: int
    transcript: tuple[tuple[str, str], ...]  # (stream, text) in the order written
    servers: tuple[ServerAnswer, ...] = ()  # asked again before the seal answers

    def still_holds(self) -> bool:
        """Whether every sealed file is exactly as it was sealed."""
        return all(file_identity(path) == identity for path, identity in self.files.items())

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": version_of("finished_seal"),
            "invocation": self.invocation,
            "env_names": list(self.env_names),
            "files": {path: list(identity) if identity else None for path, identity in self.files.items()},
            "exit_code": self.exit_code,
            "transcript": [list(item) for item in self.transcript],
            "servers": [{"url": server.url, "digest": server.digest} for server in self.servers],
        }


def read_seal(paths: RunPaths) -> FinishedSeal | None:
    """The run's seal, or None when there is none or it cannot be used as written (never an error).

    Only a regular file of this user's is read, never through a link: whoever else can write the
    run's folder must not be able to plant an answer (a seal is trusted to speak for the run).
    """
    try:
        data = orjson.loads(own_file_bytes(paths.finished))
        if type(data) is not dict or version_problem("finished_seal", data.get("format_version")):
            return None
        return _parsed(data)
    except (OSError, orjson.JSONDecodeError, TypeError, ValueError):
        return None


def _parsed(data: dict[str, Any]) -> FinishedSeal | None:
    invocation, names, files = data.get("invocation"), data.get("env_names"), data.get("files")
    code, transcript = data.get("exit_code"), data.get("transcript")
    servers = _servers(data.get("servers"))
    if (
        type(invocation) is not str
        or type(names) is not list
        or not all(type(name) is str for name in names)
        or type(files) is not dict
        or type(code) is not int
        or type(transcript) is not list
        or servers is None
    ):
        return None
    sealed: dict[str, Identity] = {}
    for path, identity in files.items():
        if identity is not None and (
            type(identity) is not list or len(identity) != 5 or not all(type(n) is int for n in identity)
        ):
            return None
        sealed[path] = tuple(identity) if identity is not None else None
    lines = []
    for item in transcript:
        if type(item) is not list or len(item) != 2 or item[0] not in STREAMS or type(item[1]) is not str:
            return None
        lines.append((item[0], item[1]))
    return FinishedSeal(invocation, tuple(names), sealed, code, tuple(lines), servers)


def _servers(found: Any) -> tuple[ServerAnswer, ...] | None:
    """The seal's ``servers`` as written, or None when it is not a list of ``{url, digest}``."""
    if type(found) is not list:
        return None
    servers = []
    for item in found:
        if type(item) is not dict or set(item) != {"url", "digest"} or type(item["url"]) is not str:
            return None
        if item["digest"] is not None and type(item["digest"]) is not str:
            return None
        servers.append(ServerAnswer(item["url"], item["digest"]))
    return tuple(servers)


def write_seal(paths: RunPaths, seal: FinishedSeal) -> None:
    """Publish the seal (atomically; a link planted at its name is replaced, never followed)."""
    from gymslurm.store.atomic import publish_json

    publish_json(paths.finished, seal.to_json())
