"""Job scripts cannot be injected: every value that reaches a rendered script is checked first.

Issue 10, section 1: a newline, NUL or shell/sbatch metacharacter in any key that lands in a script
is refused at the settings boundary, naming the key and the character; a run name is a slug, so the
run directory is always inside ``run_root``; and a refused value never reaches a script, not even
the ``--dry-run`` output. ``env_setup`` lines run as written (one line each).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gymslurm.commands.new_run import new_run_dir
from gymslurm.commands.submit import submit
from gymslurm.errors import ConfigError
from gymslurm.launcher.settings import BenchmarkSettings, validate
from gymslurm.site.render import LINK_TEMPLATE, ScriptValues, load_template, render

PAYLOAD = "touch PWNED"


def _benchmark(**changes: Any) -> dict[str, Any]:
    """A minimal valid benchmark with ``changes`` set at dotted keys (``slurm.partition``...)."""
    data: dict[str, Any] = {
        "name": "bench",
        "dataset": "data.jsonl",
        "servers": [{"name": "env", "url": "http://h"}],
    }
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[last] = value
    return data


# Every key whose value lands in a rendered script (or names a path of the run), as a dotted key
# with "__" for ".", and how to wrap a bad string into a valid type for it.
RENDERED_KEYS: list[tuple[str, Any]] = [
    ("name", lambda s: s),
    ("output_stem", lambda s: s),
    ("run_root", lambda s: s),
    ("slurm__partition", lambda s: s),
    ("slurm__account", lambda s: s),
    ("slurm__qos", lambda s: s),
    ("slurm__time", lambda s: "01:00:00" + s),
    ("slurm__max_walltime", lambda s: "04:00:00" + s),
    ("slurm__extra_directives", lambda s: ["--mem=4G", "--gres=gpu:1" + s]),
    ("slurm__env_setup", lambda s: ["module load x", "echo hi" + s]),
    ("slurm__python", lambda s: "python" + s),
    ("aggregation__time", lambda s: "00:30:00" + s),
    ("servers__0__name", lambda s: "env" + s),
]
BREAKERS = {
    "newline": ("\n" + PAYLOAD, "a newline (U+000A)"),
    "NUL": ("\x00", "a NUL (U+0000)"),
    "carriage return": ("\r" + PAYLOAD, "a carriage return (U+000D)"),
}


def _leaf(key: str) -> str:
    return key.rsplit("__", maxsplit=1)[-1]


def _refusal(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as refused:
        validate(data, "bench.yaml")
    return str(refused.value)


@pytest.mark.parametrize("breaker", sorted(BREAKERS))
@pytest.mark.parametrize(("key", "wrap"), RENDERED_KEYS, ids=[k for k, _ in RENDERED_KEYS])
def test_line_breaking_characters_in_every_rendered_key_are_refused(
    key: str, wrap: Any, breaker: str
) -> None:
    """A newline, CR or NUL in any key that reaches a script is refused, naming the key and the character."""
    text, described = BREAKERS[breaker]
    message = _refusal(_benchmark(**{key: wrap(text)}))
    assert _leaf(key) in message and described in message
    assert PAYLOAD not in message, "a refusal names the character, it does not repeat the value"


@pytest.mark.parametrize("key", ["slurm__partition", "slurm__account", "slurm__qos"])
@pytest.mark.parametrize("bad", ["low;id", "low$(id)", "low`id`", "'low'", 'low"', "low id", "lo\\w", "a#b"])
def test_shell_and_sbatch_metacharacters_in_directive_names_are_refused(key: str, bad: str) -> None:
    """Partition, account and qos hold only a Slurm name: ``;``, ``$(``, quotes, spaces are refused."""
    message = _refusal(_benchmark(**{key: bad}))
    assert _leaf(key) in message and "U+00" in message


@pytest.mark.parametrize(
    "bad",
    [
        "--comment=$(id)",
        "--comment='x;y'",
        "--mem=4G; touch PWNED",
        "--x=`id`",
        "touch PWNED",
        "--mem=4G --time=1",
        "--chdir=a(b)",
        "--begin=now>x",
    ],
)
def test_extra_directive_must_be_one_plain_sbatch_option(bad: str) -> None:
    """An extra directive is one option (``--flag``, ``--flag=value``, ``-X value``), no metacharacters."""
    message = _refusal(_benchmark(slurm__extra_directives=[bad]))
    assert "extra_directives[0]" in message


@pytest.mark.parametrize("bad", ["--job-name=mine", "-J mine", "--job-na=mine", "#SBATCH --job-name mine"])
def test_an_extra_directive_may_not_rename_the_runs_jobs(bad: str) -> None:
    """The run's jobs are found by their names (gs-<run>): a directive renaming them is refused."""
    message = _refusal(_benchmark(slurm__extra_directives=[bad]))
    assert "extra_directives[0]" in message and "gs-<run>" in message


@pytest.mark.parametrize(
    "good",
    [
        "--mem=4G",
        "--gres=gpu:1",
        "--gres gpu:2",
        "-N 1",
        "#SBATCH --exclusive",
        "--constraint=a100&nvlink",
        "--constraint=a100|v100",
        "--nodelist=node[01-04]",
        "--mail-user=me@example.org",
        "--output=/tmp/x-%j.out",
    ],
)
def test_ordinary_extra_directives_are_accepted(good: str) -> None:
    """Directives real benchmarks use stay accepted (constraints with ``&``/``|``, node lists, ``%j``)."""
    settings = validate(_benchmark(slurm__extra_directives=[good]), "bench.yaml")
    assert settings.slurm.extra_directives == [good]


def test_ordinary_names_and_partition_lists_are_accepted() -> None:
    """Slug names, dotted stems and comma-separated partitions pass the checks."""
    settings = validate(
        _benchmark(
            name="my-bench_v1.2",
            output_stem="rollouts.v2",
            slurm__partition="gpu,cpu",
            slurm__account="proj-42",
            slurm__qos="normal",
            slurm__env_setup=["export A=1\t# tab ok"],
        ),
        "bench.yaml",
    )
    assert settings.slurm.partition == "gpu,cpu"


@pytest.mark.parametrize("name", ["../../../x", "a/b", "a b", "..", ".hidden", "-rf", "", "x" * 101])
@pytest.mark.parametrize("key", ["name", "output_stem", "servers__0__name"])
def test_names_that_become_paths_are_slugs(key: str, name: str) -> None:
    """``name=../../../x``, ``a/b``, ``a b``... are refused: a name becomes a folder or file of the run."""
    message = _refusal(_benchmark(**{key: name}))
    assert _leaf(key) in message


def test_run_directory_is_always_inside_run_root(tmp_path: Path) -> None:
    """The run directory of a valid benchmark is a direct child of the resolved ``run_root``."""
    settings = BenchmarkSettings.model_validate(_benchmark(run_root="runs"))
    run = new_run_dir(settings, tmp_path)
    assert run.root.parent == (tmp_path / "runs").resolve()


@pytest.mark.parametrize("folder", ["my runs", "runs%j", "runs;x", "it's"])
def test_run_root_that_cannot_appear_in_an_sbatch_line_is_refused(tmp_path: Path, folder: str) -> None:
    """A run_root whose path sbatch cannot read in ``#SBATCH --output=`` (space, ``%``, quote) is refused."""
    settings = BenchmarkSettings.model_validate(_benchmark(run_root=folder))
    with pytest.raises(ConfigError, match="run_root"):
        new_run_dir(settings, tmp_path)


def test_render_refuses_a_multi_line_value_that_bypassed_the_settings(tmp_path: Path) -> None:
    """Defence in depth: render itself refuses a single-line slot holding a newline."""
    values = ScriptValues(
        run_name="r",
        shard="000",
        job_name="gs-r\n" + PAYLOAD,
        script_path="/r/s",
        log_path="/r/l",
        ledger_path="/r/g",
        signal_lead=90,
        time_limit="01:00:00",
        directives="",
        env_setup="",
        workdir="/w",
        command="true",
    )
    with pytest.raises(ConfigError, match="job_name contains a newline"):
        render(load_template(LINK_TEMPLATE), values)
    assert "\n" + PAYLOAD in render(
        load_template(LINK_TEMPLATE),
        dataclasses.replace(values, job_name="gs-r", env_setup="echo ok\n" + PAYLOAD),
    )  # env_setup lines run as written


def _write_bench(tmp_path: Path, slurm_yaml: str) -> Path:
    (tmp_path / "data.jsonl").write_text('{"q": 1}\n')
    bench = tmp_path / "bench.yaml"
    bench.write_text(
        f"dataset: {tmp_path / 'data.jsonl'}\nrun_root: {tmp_path / 'runs'}\n"
        f"servers: [{{name: env, url: 'http://127.0.0.1:9'}}]\nslurm:\n{slurm_yaml}"
    )
    return bench


def _every_file(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "submit"])
@pytest.mark.parametrize(
    "case",
    [
        ('  partition: "low\\ntouch PWNED"\n', []),
        ("  partition: null\n", ["slurm.account='a;touch PWNED'"]),
        ("  partition: null\n", ["slurm.qos='$(touch PWNED)'"]),
        ('  extra_directives: ["--mem=4G\\ntouch PWNED"]\n', []),
        ("  partition: null\n", ["name=../../../PWNED"]),
    ],
    ids=["newline-in-yaml", "semicolon-override", "subshell-override", "newline-directive", "escaping-name"],
)
def test_refused_value_never_reaches_a_script(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: tuple[str, list[str]],
    dry_run: bool,
) -> None:
    """submit (and --dry-run) with an injected value refuses before rendering: no script, no output of it."""
    slurm_yaml, overrides = case
    bench = _write_bench(tmp_path, slurm_yaml)
    before = set(_every_file(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError):
        submit(str(bench), overrides, "local", dry_run)
    out = capsys.readouterr()
    assert "PWNED" not in out.out and "#SBATCH" not in out.out
    assert set(_every_file(tmp_path)) == before, "a refusal writes nothing"
    assert not (tmp_path / "runs").exists() and not list(tmp_path.parent.glob("PWNED*"))
