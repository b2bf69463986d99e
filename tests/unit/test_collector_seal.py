"""The finished-run seal's rules: which command it answers, what its digest covers, what it never seals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymslurm.collector.seal import Invocation, Transcript, config_problem, env_names, invocation
from gymslurm.process_env import MAX_ATTEMPTS_ENV
from gymslurm.store.paths import RunPaths, file_identity
from gymslurm.store.seal import FinishedSeal, read_seal, write_seal


def command(*overrides: str, cwd: str = "/work") -> Invocation:
    return Invocation(tuple(overrides), None, "collect", cwd)


RESUME, OUT = "+resume_from_cache=true", "+output_jsonl_fpath=runs/out.jsonl"


@pytest.mark.parametrize(
    ("overrides", "answered"),
    [
        ((RESUME, OUT), True),
        (("resume_from_cache=true", "++output_jsonl_fpath=runs/out.jsonl"), True),
        ((OUT,), False),  # a fresh collection replaces the run: never answered from a seal
        (("+resume_from_cache=false", OUT), False),
        (("+resume_from_cache=True", OUT), False),  # Hydra's other spellings take the full path
        ((RESUME, OUT, "+resume_from_cache=false"), False),  # the last word counts
        ((RESUME,), False),  # the output comes from a config file: unknown here
        ((RESUME, "+output_jsonl_fpath=${oc.env:OUT}"), False),
        ((RESUME, "+output_jsonl_fpath='runs/a b.jsonl'"), False),
    ],
)
def test_only_a_resume_naming_a_plain_output_is_answered_from_a_seal(
    overrides: tuple[str, ...], answered: bool
) -> None:
    """A seal answers a resume whose overrides name its output as a plain path, nothing else."""
    found = command(*overrides).resumed_run()
    assert (found is not None) is answered
    if answered:
        assert found == RunPaths.for_output("/work/runs/out.jsonl")


def test_the_output_is_found_beside_the_working_directory_or_home() -> None:
    """A relative output is the working directory's; ``~`` is the home folder, as the full path reads them."""
    assert command(RESUME, "+output_jsonl_fpath=~/o.jsonl").resumed_run() == RunPaths.for_output(
        os.path.expanduser("~/o.jsonl")
    )
    assert command(RESUME, "+output_jsonl_fpath=/abs/o.jsonl").resumed_run() == RunPaths.for_output(
        "/abs/o.jsonl"
    )


def test_the_environments_overrides_count_after_the_command_lines() -> None:
    """A chain's link passes all of its collector's overrides in the environment: they are the command."""
    assert invocation([], None, "collect", [RESUME, OUT]).resumed_run() is not None
    assert invocation([RESUME, OUT], None, "collect", ["+resume_from_cache=false"]).resumed_run() is None


def digest(
    overrides: tuple[str, ...] = (RESUME, OUT), env: dict[str, str] | None = None, cwd: str = "/work"
) -> str:
    made = invocation(list(overrides), None, "collect", [])
    made = Invocation(made.overrides, None, "collect", cwd)
    found = made.digest(env or {}, (MAX_ATTEMPTS_ENV, "DATA", "POLICY_API_KEY"))
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("change", "same"),
    [
        ({"overrides": ("+resume_from_cache=false", OUT)}, True),  # the sealing run was often the fresh one
        ({"overrides": (OUT, RESUME)}, True),  # where resume_from_cache stands does not matter
        ({"overrides": (RESUME, OUT, "+limit=1", "+limit=2")}, False),  # the same overrides, in an order
        ({"overrides": (RESUME, OUT, "+require_complete=true")}, False),
        ({"cwd": "/elsewhere"}, False),
        ({"overrides": (RESUME, OUT, "+policy_api_key=sk-1")}, False),  # a credential given or not...
        ({"env": {MAX_ATTEMPTS_ENV: "5"}}, False),
        ({"env": {"DATA": "/other"}}, False),  # a ${oc.env:DATA} the configuration reads
        ({"env": {"UNREAD": "x"}}, True),  # a variable the configuration does not read
        ({"env": {"POLICY_API_KEY": "sk-1"}}, False),  # a credential: whether it is set...
    ],
)
def test_the_digest_covers_what_a_resume_depends_on(change: dict[str, object], same: bool) -> None:
    """The same command in the same place with the same environment has one digest; each part changes it."""
    assert (digest(**change) == digest()) is same  # type: ignore[arg-type]


def test_the_order_of_overrides_is_in_the_digest() -> None:
    """Hydra applies overrides in order: the last of two values wins, so the order is part of the command."""
    assert digest((RESUME, OUT, "+limit=1", "+limit=2")) != digest((RESUME, OUT, "+limit=2", "+limit=1"))


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"env": {"POLICY_API_KEY": "sk-1"}}, {"env": {"POLICY_API_KEY": "sk-2"}}),
        (
            {"overrides": (RESUME, OUT, "+policy_api_key=sk-1")},
            {"overrides": (RESUME, OUT, "+policy_api_key=sk-2")},
        ),
        (
            {"overrides": (RESUME, OUT, "+head_server.auth_token=a1")},
            {"overrides": (RESUME, OUT, "+head_server.auth_token=b2")},
        ),
        (
            {"overrides": (RESUME, OUT, "+environment_server_url=http://u:pw-1@h:1")},
            {"overrides": (RESUME, OUT, "+environment_server_url=http://u:pw-2@h:1")},
        ),
    ],
)
def test_a_credentials_value_is_not_in_the_digest(one: dict[str, object], other: dict[str, object]) -> None:
    """A credential counts by presence only: its value changes no rollout and no digest of it is written."""
    assert digest(**one) == digest(**other)  # type: ignore[arg-type]


def test_the_digest_follows_the_config_files(tmp_path: Path) -> None:
    """A config file in --config-dir changed, added or removed changes the digest."""
    (tmp_path / "bench.yaml").write_text("defaults: [collect, _self_]\n")
    made = Invocation((RESUME, OUT), tmp_path, "bench", "/work")
    before = made.digest({}, ())
    (tmp_path / "bench.yaml").write_text("defaults: [collect, _self_]\nlimit: 3\n")
    assert made.digest({}, ()) != before
    changed = made.digest({}, ())
    (tmp_path / "more.yaml").write_text("x: 1\n")
    assert made.digest({}, ()) != changed


def test_no_credential_is_kept_in_the_command() -> None:
    """A credential-named override keeps its key only; a password inside a URL is cut out."""
    made = invocation([RESUME, OUT], None, "collect", ["+policy_api_key=sk-CANARY1", "+u=http://a:CANARY2@h"])
    assert "CANARY" not in repr(made)
    assert made.last("u") is not None and made.last("policy_api_key") is not None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("plain", None),
        ("${oc.env:DATA}", None),
        ("${oc.env:DATA,/default}", None),
        ("${other.key}", None),  # a reference within the configuration
        ("${oc.decode:${oc.env:N}}", None),
        ("${now:%H}", "resolver 'now'"),  # changes with the clock
        ("${hydra:runtime.cwd}", "resolver 'hydra'"),
        ("${oc.env:${which}}", "named by an expression"),
    ],
)
def test_a_configuration_is_sealed_only_when_its_interpolations_can_be_followed(
    value: str, problem: str | None
) -> None:
    """Only the environment and the configuration itself may feed an interpolation of a sealed run."""
    found = config_problem({"a": {"b": [value]}}, None)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_a_config_folder_that_extends_the_search_path_is_not_sealed(tmp_path: Path) -> None:
    """Files a search path adds are not followed: such a configuration takes the full path every time."""
    (tmp_path / "bench.yaml").write_text("hydra:\n  searchpath: [file:///elsewhere]\n")
    assert "search path" in (config_problem({}, tmp_path) or "")


def test_the_environment_a_configuration_reads_is_named() -> None:
    """The failure budget's variable always, and each ${oc.env:NAME} wherever it is written."""
    raw = {"a": "${oc.env:DATA}", "b": ["x ${oc.env:OTHER,1}"], "c": {"d": 1}}
    assert env_names(raw) == tuple(sorted({MAX_ATTEMPTS_ENV, "DATA", "OTHER"}))


def test_a_transcript_keeps_the_order_of_both_streams() -> None:
    """What a resume prints is replayed in the order written, stream by stream."""
    transcript = Transcript()
    transcript.stderr.write("a\n")
    transcript.stdout.write("table\n")
    transcript.stderr.write("")
    transcript.stderr.write("exit 0\n")
    assert transcript.items == [("stderr", "a\n"), ("stdout", "table\n"), ("stderr", "exit 0\n")]


def sealed(tmp_path: Path) -> tuple[RunPaths, FinishedSeal]:
    paths = RunPaths.for_output(tmp_path / "out.jsonl")
    paths.output.write_text("{}\n")
    files = {str(paths.output): file_identity(paths.output), str(paths.failures): None}
    seal = FinishedSeal("sha256:x", (MAX_ATTEMPTS_ENV,), files, 76, (("stderr", "exit 76\n"),))
    write_seal(paths, seal)
    return paths, seal


def test_a_seal_reads_back_as_written(tmp_path: Path) -> None:
    """Written and read by the store, a seal is the same seal, and holds while its files are untouched."""
    paths, seal = sealed(tmp_path)
    assert read_seal(paths) == seal
    assert seal.still_holds()


@pytest.mark.parametrize(
    "touch",
    [
        lambda p: p.output.open("a").write("\n"),  # a byte appended
        lambda p: os.utime(p.output),  # the same bytes, touched
        lambda p: p.failures.write_text(""),  # a file that was absent now exists
        lambda p: p.output.unlink(),
    ],
)
def test_a_seal_no_longer_holds_once_a_sealed_file_changes(tmp_path: Path, touch: object) -> None:
    """Any write to, creation of or removal of a sealed file breaks the seal."""
    paths, seal = sealed(tmp_path)
    touch(paths)  # type: ignore[operator]
    assert not seal.still_holds()


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        b'{"format_version": 99}',
        b'{"format_version": 1, "invocation": 3}',
        b'{"format_version": 1, "invocation": "x", "env_names": [], "files": {"/a": [1, 2]}, '
        b'"exit_code": 0, "transcript": []}',
    ],
)
def test_a_seal_that_cannot_be_used_is_ignored_not_refused(tmp_path: Path, content: bytes) -> None:
    """A damaged or future seal is no answer and no error: the full resume follows and writes it again."""
    paths = RunPaths.for_output(tmp_path / "out.jsonl")
    paths.finished.write_bytes(content)
    assert read_seal(paths) is None


def test_a_seal_is_never_read_through_a_link(tmp_path: Path) -> None:
    """A link planted at the seal's name is no answer, even to a valid seal elsewhere."""
    paths, _ = sealed(tmp_path)
    elsewhere = tmp_path / "planted.json"
    paths.finished.rename(elsewhere)
    paths.finished.symlink_to(elsewhere)
    assert read_seal(paths) is None
