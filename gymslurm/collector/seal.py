"""The resume of a finished run, answered from its seal: when it may be, and what the seal records.

Resuming a finished run used to cost a whole start: the configuration composed, the servers asked,
every saved row parsed and selected again, to learn that nothing is left (4x a raw parse-and-diff
at 100k rollouts, 9 s at 1M). A chain re-runs finished shards, and people re-run finished commands.

So a collection that ends with nothing left to dispatch, whose reports all settled, seals the run
(``store/seal.py``): the digest of its command, the identity of every file a resume reads, and what
a resume of it would print and exit with, computed by the collector's own functions. The same
command on unchanged files gets that answer (:func:`replay`), under the run lock, without reading
the run; anything else takes the full path, which seals again when it ends finished.

The command's digest (:meth:`Invocation.digest`) covers all a resume's answer depends on besides
the run's files: the overrides (NeMo Gym's flags translated; ``resume_from_cache`` left out, since
the collection that seals is often the fresh one), those given in ``GYMSLURM_COLLECT_OVERRIDES``
after them (a chain's link passes all of its collector's there), ``--config-dir``/``--config-name``,
the working directory, the environment variables the configuration reads
(``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS`` and each ``${oc.env:NAME}``), and the identity of every config
file Hydra may read and of gymslurm's own code. A credential enters by presence only (a
credential-named override or variable; a password or token inside a value is cut out by its
shape): it cannot change which rollouts are done, and no digest of a secret is written.

The servers' side of the identity is not in any file: what ``GET /global_config_dict_yaml``
answers (the served model, its sampling, the judge, the Environment Server's configuration). So the
seal keeps, for each server the full path asked, the digest of its answer as the identity reads it
(credentials redacted, :func:`server_digest`), and a replay asks each of them again (one small
request each; no compose, no reconcile): a changed answer, a server that does not answer, or a URL
it cannot name again (a password in a config file) takes the full path, which says what changed.
A shortcut may skip work, never a check.

Not sealed (the full path runs each time): a configuration whose interpolations read anything but
the environment and itself, a config folder that extends Hydra's search path, ``resubmit``, a run
whose identity was not verified or that this invocation changed with a warning (drift, an
overridden identity), and metrics that a server did not answer (the next resume asks again).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from gymslurm.errors import ConfigError, EnvironmentUnreachableError, GymslurmError
from gymslurm.identity import build_identity, identity_digest
from gymslurm.process_env import MAX_ATTEMPTS_ENV
from gymslurm.redaction import REDACTED, is_credential_name, redact_shapes
from gymslurm.resources import configs_dir
from gymslurm.store.lock import RunLock
from gymslurm.store.paths import RunPaths, others_writable_warning
from gymslurm.store.seal import FinishedSeal, ServerAnswer, identities, read_seal, sealed_files

RESUME_KEY, OUTPUT_KEY = "resume_from_cache", "output_jsonl_fpath"
# The one line a replay adds to what the full path says: where the answer came from.
SAID_FROM_SEAL = "gymslurm collect: the run is finished and unchanged since: answered from its seal"
MAX_CONFIG_FILES = 500  # a --config-dir holding more than this is not walked for a seal
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./~@%+-]+")  # an override value Hydra reads as the string itself
_RESOLVER = re.compile(r"\$\{\s*([A-Za-z_][\w.]*)\s*:")  # ${resolver:...}
_ENV_NAME = re.compile(r"\$\{\s*oc\.env\s*:\s*([^,}\s]*)")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s,}\]'\"]+")
PURE_RESOLVERS = frozenset(
    {"oc.env", "oc.decode", "oc.select", "oc.create", "oc.dict.keys", "oc.dict.values"}
)


def override_key(item: str) -> tuple[str, str] | None:
    """``(key, value)`` of a ``key=value`` override in any of Hydra's spellings (a deletion: None)."""
    name, has_value, value = item.partition("=")
    if not has_value or name.startswith("~"):
        return None
    return name.lstrip("+"), value


@dataclass(frozen=True)
class Invocation:
    """A ``gymslurm collect`` command as a resume repeats it (the parts of its digest that are not files)."""

    overrides: tuple[str, ...]
    config_dir: Path | None
    config_name: str
    cwd: str

    def last(self, key: str) -> str | None:
        """The value of the last override of ``key``, as written."""
        found = None
        for item in self.overrides:
            pair = override_key(item)
            if pair is not None and pair[0] == key:
                found = pair[1]
        return found

    def resumed_run(self) -> RunPaths | None:
        """The run a resuming command names in its overrides as a plain path; else None."""
        value = self.last(OUTPUT_KEY)
        if self.last(RESUME_KEY) != "true" or not value or not _PLAIN_VALUE.fullmatch(value):
            return None
        return RunPaths.for_output(os.path.join(self.cwd, os.path.expanduser(value)))

    def digest(self, environ: Mapping[str, str], env_names: Iterable[str]) -> str | None:
        """The digest a seal is keyed on; None when the config folder is too large to be walked."""
        files = config_files(self.config_dir)
        if files is None:
            return None
        parts = [
            [item for item in self.overrides if (override_key(item) or ("",))[0] != RESUME_KEY],
            str(self.config_dir.expanduser().absolute()) if self.config_dir else None,
            self.config_name,
            self.cwd,
            [[name, environment_value(name, environ)] for name in sorted(set(env_names))],
            sorted(identities(files).items()),
        ]
        return "sha256:" + hashlib.sha256(orjson.dumps(parts)).hexdigest()


def invocation(
    overrides: list[str], config_dir: Path | None, config_name: str, environment_overrides: list[str]
) -> Invocation:
    """The command being run: its overrides, then the environment's, each with its credentials masked."""
    given = (*overrides, *environment_overrides)
    return Invocation(tuple(map(masked, given)), config_dir, config_name, os.getcwd())


def masked(item: str) -> str:
    """An override as a seal keeps it: a credential-named key's value by presence, any other value
    with credential shapes (a URL's password, a bearer token) cut out. Pure: learns nothing, so the
    collection that seals and the resume that reads it mask alike."""
    pair = override_key(item)
    if pair is not None and is_credential_name(pair[0].rsplit(".", 1)[-1]):
        return f"{pair[0]}={REDACTED}"
    return redact_shapes(item)


def environment_value(name: str, environ: Mapping[str, str]) -> str | bool | None:
    """What the digest takes of an environment variable: its value, or for a credential whether it is set."""
    value = environ.get(name)
    if is_credential_name(name):
        return value is not None
    return value


def config_files(config_dir: Path | None) -> list[Path] | None:
    """Every file Hydra may compose from (the shipped configs, ``config_dir``) and gymslurm's own code."""
    found = _files_under(Path(__file__).resolve().parent, (".py",), None) or []
    for folder in (configs_dir(), config_dir):
        if folder is not None:
            more = _files_under(folder.expanduser().absolute(), (".yaml", ".yml"), MAX_CONFIG_FILES)
            if more is None:
                return None
            found.extend(more)
    return found


def _files_under(folder: Path, suffixes: tuple[str, ...], cap: int | None) -> list[Path] | None:
    found: list[Path] = []
    for root, _, names in os.walk(folder):
        found.extend(Path(root, name) for name in names if name.endswith(suffixes))
        if cap is not None and len(found) > cap:
            return None
    return sorted(found)


# --- when a collection may seal, and what it seals ---------------------------------------------------


def config_problem(raw: Mapping[str, Any], config_dir: Path | None) -> str | None:
    """Why a resume of this configuration cannot be answered from a seal, or None. ``raw``: unresolved."""
    for text in _strings(raw):
        for resolver in _RESOLVER.findall(text):
            if resolver not in PURE_RESOLVERS:
                return f"the configuration uses the resolver {resolver!r}, which a seal cannot follow"
        for name in _ENV_NAME.findall(text):
            if not _IDENTIFIER.fullmatch(name):
                return f"the configuration reads an environment variable named by an expression ({name!r})"
    if config_dir is not None:
        folder = config_dir.expanduser().absolute()
        for path in _files_under(folder, (".yaml", ".yml"), MAX_CONFIG_FILES) or ():
            if "searchpath" in path.read_text(errors="replace"):
                return f"{path} extends Hydra's search path"
    return None


def env_names(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """The environment variables a configuration reads: the failure budget's and each ``${oc.env:NAME}``."""
    names = {MAX_ATTEMPTS_ENV}
    for text in _strings(raw):
        names.update(_ENV_NAME.findall(text))
    return tuple(sorted(names))


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


class Transcript:
    """Two recording streams: what a resume would print on stdout and stderr, in the order written."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.stdout, self.stderr = _Recorder(self.items, "stdout"), _Recorder(self.items, "stderr")


class _Recorder(io.StringIO):
    def __init__(self, items: list[tuple[str, str]], name: str) -> None:
        super().__init__()
        self.items, self.name = items, name

    def write(self, text: str) -> int:
        if text:
            self.items.append((self.name, text))
        return len(text)


class Tee(io.StringIO):
    """Passes everything written to ``stream`` and keeps a copy: what a report said, for the seal."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self.stream, self.said = stream, list[str]()

    def write(self, text: str) -> int:
        self.said.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def seal(
    command: Invocation,
    raw: Mapping[str, Any],
    paths: RunPaths,
    dataset: Path,
    answer: Callable[[Transcript], int],
    *,
    servers: Mapping[str, str | None],
) -> FinishedSeal | None:
    """The seal of a finished run for ``command``: ``answer`` prints and returns what a resume would.

    ``servers``: each URL the full path asked for its configuration, in order, with the
    :func:`server_digest` of its answer (None: it answered without a configuration).
    """
    if config_problem(raw, command.config_dir) is not None:
        return None
    names = env_names(raw)
    digest = command.digest(os.environ, names)
    if digest is None:
        return None
    transcript = Transcript()
    code = answer(transcript)
    files = identities(sealed_files(paths, dataset))
    asked = tuple(ServerAnswer(redact_url(url), found) for url, found in servers.items())
    return FinishedSeal(digest, names, files, code, tuple(transcript.items), asked)


# --- the servers' side of the identity ----------------------------------------------------------------


class ServerConfigs:
    """The servers' configurations a collection reads, each asked once (routing and identity read them
    both), with what the seal keeps of them: :attr:`asked`, each URL in order with its answer's
    :func:`server_digest` (None: it answered without a configuration, and the next source was asked)."""

    def __init__(self, fetch: Callable[[str], dict[str, Any]]) -> None:
        self.fetch = fetch
        self.fetched: dict[str, dict[str, Any]] = {}
        self.asked: dict[str, str | None] = {}

    def __call__(self, url: str) -> dict[str, Any]:
        if url not in self.fetched:
            try:
                self.fetched[url] = self.fetch(url)
            except EnvironmentUnreachableError:
                raise  # no answer: a run that cannot start is not sealed
            except ConfigError:
                self.asked.setdefault(url, None)
                raise
            self.asked[url] = server_digest(self.fetched[url])
        return self.fetched[url]


def server_digest(answer: Mapping[str, Any]) -> str:
    """The digest of a server's configuration as the run's identity reads it: credentials redacted
    (a new key changes nothing the full path would refuse or warn about), every other value kept."""
    return identity_digest(build_identity({"environment_config": dict(answer)}))


def redact_url(url: str) -> str:
    """A URL as a seal keeps it: a password or token in it cut out (a seal holds no secret)."""
    return redact_shapes(url)


def spelled_urls(
    given: Iterable[str], environ: Mapping[str, str], env_names: Iterable[str]
) -> dict[str, str]:
    """The URLs the command names (its overrides and the variables its configuration reads), by
    their sealed spelling: how a replay finds again a URL whose password the seal cut out."""
    texts = [*given, *(environ.get(name, "") for name in env_names)]
    return {redact_url(url): url for text in texts for url in _URL.findall(text)}


def servers_unchanged(
    asked: Iterable[ServerAnswer], urls: Mapping[str, str], fetch: Callable[[str], Mapping[str, Any]]
) -> bool:
    """Whether each server the full path asked answers as it did when sealed (asked again, in order).

    Anything not proven is false: a URL the command no longer spells, a server that does not answer,
    an answer that cannot be read or digested. The full path then asks and reports in its own words.
    """
    for server in asked:
        url = urls.get(server.url, server.url)
        if REDACTED in url:
            return False  # a URL kept without its password that the command no longer spells
        try:
            found: str | None = server_digest(fetch(url))
        except EnvironmentUnreachableError:
            return False
        except ConfigError:
            found = None  # answered without a configuration, as the full path may have seen it
        except Exception:  # anything unexpected is simply not proven
            return False
        if found != server.digest:
            return False
    return True


def _fetch_config(url: str) -> Mapping[str, Any]:
    from gymslurm.dispatch.calls import fetch_environment_config  # the HTTP client: only to ask a server

    return fetch_environment_config(url)


# --- the answer ---------------------------------------------------------------------------------------


def replay(
    command: Invocation,
    stdout: IO[str],
    stderr: IO[str],
    given: Iterable[str] = (),
    fetch: Callable[[str], Mapping[str, Any]] | None = None,
) -> int | None:
    """Answer a resume from the run's seal when it still holds (printing what it recorded); else None.

    ``given``: the command's overrides as written (unmasked), where a URL the seal keeps without its
    password is found again; ``fetch`` reads a server's configuration (default: over HTTP).

    Decided under the run lock, as the full resume would be: a lock held elsewhere, or any error,
    leaves the answer to the full path, which reports it in its own words. Printed once decided (a
    stream that fails then fails as the full path's would, never making it run too), with one line
    more than the full path says: that the answer is the seal's (a job log shows why no server was
    asked).
    """
    paths = command.resumed_run()
    if paths is None or not paths.finished.exists():
        return None
    try:
        with RunLock(paths.lock):
            found = read_seal(paths)
            if found is None or found.invocation != command.digest(os.environ, found.env_names):
                return None
            if not found.still_holds():
                return None
            urls = spelled_urls(given, os.environ, found.env_names)
            if not servers_unchanged(found.servers, urls, fetch or _fetch_config):
                return None
        warning = others_writable_warning(paths.folder, paths.folder.stat().st_mode)
    except (GymslurmError, OSError):
        return None
    if warning:  # the full path's first line, said the same way (the folder's mode is not sealed)
        from gymslurm.progress import say  # only then: a replay that warns of nothing never loads it

        say(stderr, f"warning: {warning}")
    print(f"{SAID_FROM_SEAL} {paths.finished} (no server was asked)", file=stderr)
    for stream, text in found.transcript:
        (stdout if stream == "stdout" else stderr).write(text)
    stdout.flush()
    stderr.flush()
    return found.exit_code
