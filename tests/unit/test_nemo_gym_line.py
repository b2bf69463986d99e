"""A ``gym eval run`` line that starts NeMo Gym's servers, as a gymslurm benchmark (issue 34).

Each word of the line goes to whoever takes it in NeMo Gym's own serving run: ``gym env start`` (the
server flags and the servers' overrides), the split's preparation, or the collector.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.commands.nemo_gym_serve import plan_serving_run
from gymslurm.commands.submit import nemo_gym_line
from gymslurm.errors import ConfigError
from gymslurm.launcher.nemo_gym_line import (
    collect_words,
    composes_configs,
    serving_benchmark,
    settings_the_configs_set,
    split_config_flags,
    starts_servers,
    translate_serving_line,
    with_config_settings,
)
from gymslurm.settings import setting_names

GYM = "/opt/nemo-gym/bin/gym"
IFBENCH = [  # benchmarks/ifbench/README.md, as NeMo Gym documents it
    "--benchmark", "ifbench", "--model-type", "vllm_model", "--output", "results/benchmarks/ifbench.jsonl",
    "--split", "benchmark", "--model-url", "http://h:1/v1", "--model", "m", "--resume",
    "++overwrite_metrics_conflicts=true", "++reuse_existing_data_preparation=true", "--num-repeats", "4",
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "starts"),
    [
        (["--benchmark", "gpqa", "--output", "o.jsonl"], True),
        (["--config", "a.yaml", "--output", "o.jsonl"], True),
        (["--split", "benchmark", "+config_paths=[a.yaml]"], True),
        (["+config_paths=[a.yaml]", "+split=benchmark"], False),  # ng_collect_rollouts' too: refused by name
        (["--no-serve", "--benchmark", "gpqa", "--input", "d.jsonl"], False),
        (["+input_jsonl_fpath=d.jsonl", "+output_jsonl_fpath=o.jsonl"], False),
    ],
)
def test_a_line_starts_servers_when_nemo_gym_would_start_them(argv: list[str], starts: bool) -> None:
    """No --no-serve, and a server flag or --split: NeMo Gym's serving run (overrides alone may be
    ng_collect_rollouts', which never serves)."""
    assert starts_servers(argv) is starts


def test_each_word_goes_where_nemo_gyms_serving_run_takes_it() -> None:
    """Server words to gym env start (and the preparation), --split and the preparation's settings to
    the preparation, the collection's to the collector; --output names the run's stem, --resume is the
    run's own."""
    line = translate_serving_line(IFBENCH, setting_names())
    servers = ["--benchmark", "ifbench", "--model-type", "vllm_model", "--model-url", "http://h:1/v1"]
    assert line.servers == (*servers, "--model", "m")
    assert line.preparation == (
        "--benchmark", "ifbench", "--model-type", "vllm_model", "--split", "benchmark",
        "--model-url", "http://h:1/v1", "--model", "m",
        "++overwrite_metrics_conflicts=true", "++reuse_existing_data_preparation=true",
    )  # fmt: skip
    assert line.collection == ("+num_repeats=4",)
    assert (line.output_stem, line.reuse_prepared) == ("ifbench", True)


def test_a_credential_reaches_gym_env_start_through_its_environment_only() -> None:
    """--model-api-key and a credential override: an ${oc.env:...} on argv (gym env start's and the
    preparation's), the value in their environment (split_secrets keeps it out of the run's files)."""
    line = translate_serving_line(
        ["--benchmark", "b", "--model-api-key", "sk-1", "++judge_api_key=sk-2", "--split", "benchmark"],
        setting_names(),
    )
    assert "sk-1" not in str(line.servers + line.preparation) and "sk-2" not in str(
        line.servers + line.preparation
    )
    assert "++policy_api_key=${oc.env:GYMSLURM_NEMO_GYM_POLICY_API_KEY}" in line.servers
    assert "++policy_api_key=${oc.env:GYMSLURM_NEMO_GYM_POLICY_API_KEY}" in line.preparation
    assert line.secrets == {
        "GYMSLURM_NEMO_GYM_POLICY_API_KEY": "sk-1",
        "GYMSLURM_NEMO_GYM_JUDGE_API_KEY": "sk-2",
    }


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--benchmark", "b", "--input", "d.jsonl"], "is not supported when serving end-to-end"),
        (["--benchmark", "b", "--split", "example"], "`--split example` is not runnable end-to-end"),
        (["--benchmark", "b", "--split", "test"], "split is one of train, validation, benchmark"),
    ],
)
def test_what_nemo_gyms_serving_run_refuses_is_refused_in_its_words(argv: list[str], said: str) -> None:
    """--input, --split example and an unknown split: NeMo Gym's own reasons."""
    with pytest.raises(ConfigError, match="NeMo Gym") as refused:
        translate_serving_line(argv, setting_names())
    assert said in str(refused.value)


def test_the_benchmark_starts_the_stack_with_gym_env_start_on_the_jobs_port() -> None:
    """One server: gym env start with the server words and the job's head server; the prepared split,
    a file of gymslurm's own, as the dataset; the head server's URL to the collector."""
    line = translate_serving_line([*IFBENCH, "+head_server.port=11000"], setting_names())
    benchmark = serving_benchmark(line, GYM, "runs")
    (server,) = benchmark["servers"]
    assert server["command"][:3] == [GYM, "env", "start"]
    assert server["command"][-2:] == ["+head_server.host=127.0.0.1", "+head_server.port={port}"]
    assert "+head_server.port=11000" not in server["command"]
    assert (server["port"], server["collector_override"]) == (0, "+head_server_url")
    assert benchmark["dataset"].startswith("runs/nemo_gym_prepared/ifbench-")
    assert benchmark["collector"]["overrides"] == ["+num_repeats=4"]


def test_a_serving_line_is_validated_as_a_benchmark_and_a_collection() -> None:
    """The plan validates the benchmark (submit's overrides on top) and the collector's overrides as
    each job gives them: a collection setting gymslurm refuses is refused by name, before any I/O."""
    _, settings, _ = plan_serving_run(IFBENCH, ["shards=2"], GYM)
    assert settings.shards == 2 and settings.output_stem == "ifbench"
    with pytest.raises(ConfigError, match="wandb_project"):
        plan_serving_run(["--benchmark", "b", "+wandb_project=p"], [], GYM)


def test_submit_splits_its_own_arguments_from_the_nemo_gym_line() -> None:
    """`gymslurm submit [OPTIONS] [OVERRIDES] gym eval run ARGS`."""
    argv = ["--backend", "local", "shards=2", "gym", "eval", "run", "--benchmark", "b"]
    assert nemo_gym_line(argv) == (["--backend", "local", "shards=2"], ["--benchmark", "b"])
    assert nemo_gym_line(["demo", "shards=2"]) == (["demo", "shards=2"], None)


def test_the_collection_settings_the_configs_set_become_the_collectors_overrides() -> None:
    """What NeMo Gym's collector reads from the configs' top level: the collector's overrides, before the
    line's own (a key the line sets is the line's); the preparation's and gymslurm's own keys left out."""
    line = translate_serving_line(
        ["--benchmark", "b", "--split", "benchmark", "--max-output-tokens", "8"], setting_names()
    )
    values = {
        "split": "benchmark",
        "output_jsonl_fpath": "x.jsonl",
        "responses_create_params": {"max_output_tokens": 131072, "temperature": 1.0},
        "num_repeats": None,
    }
    assert settings_the_configs_set(list(values), line) == ["responses_create_params", "num_repeats"]
    assert with_config_settings(line, values, setting_names()).collection == (
        "++responses_create_params.temperature=1.0",
        "+responses_create_params.max_output_tokens=8",
    )


def test_a_collection_setting_the_configs_set_that_gymslurm_refuses_is_refused_by_name() -> None:
    """gdpval's config sets rollout_collection_driver: the plan refuses it, naming it as the configs'."""
    with pytest.raises(
        ConfigError, match="the configs of this gym eval run line set rollout_collection_driver"
    ):
        plan_serving_run(["--benchmark", "gdpval"], [], GYM, {"rollout_collection_driver": "m:f"})


def test_a_no_serve_line_with_server_flags_collects_with_the_settings_its_configs_set() -> None:
    """--no-serve with server flags: the flags only compose NeMo Gym's collector's copy of the
    configuration; the collect line is the rest, with the collection settings those configs set."""
    argv = ["--no-serve", "--benchmark", "b", "--model-api-key", "sk-3", "--input", "d.jsonl", "--limit", "2"]
    assert composes_configs(argv) and not starts_servers(argv)
    assert not composes_configs(["--benchmark", "b"]) and not composes_configs(["--no-serve", "+limit=1"])
    flags = split_config_flags(argv)
    assert flags.servers == (
        "--benchmark",
        "b",
        "++policy_api_key=${oc.env:GYMSLURM_NEMO_GYM_POLICY_API_KEY}",
    )
    assert flags.secrets == {"GYMSLURM_NEMO_GYM_POLICY_API_KEY": "sk-3"}
    assert collect_words(flags, {"num_repeats": 4, "limit": 9}, setting_names()) == [
        "++num_repeats=4",
        "+input_jsonl_fpath=d.jsonl",
        "+limit=2",
    ]


def test_config_paths_go_to_the_servers_and_the_preparation() -> None:
    """+config_paths=[...] (NeMo Gym's override form of --config) starts and prepares, as --config does."""
    line = translate_serving_line(["--split", "benchmark", "+config_paths=[a.yaml]"], setting_names())
    assert line.servers == ("+config_paths=[a.yaml]",)
    assert line.preparation == ("--split", "benchmark", "+config_paths=[a.yaml]")
    assert line.collection == ()


def test_collect_runs_a_serving_line_as_a_run_which_needs_nemo_gyms_gym(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`gymslurm collect` given a line that starts servers takes the submit path (a local run), which
    needs NeMo Gym's `gym`: none there, it is refused by name before anything is written."""
    from gymslurm.commands.collect import main

    monkeypatch.setenv("NEMO_GYM_VENV", str(tmp_path / "no-venv"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"needs NeMo Gym's `gym`.*NEMO_GYM_VENV"):
        main(["--benchmark", "gpqa", "--split", "benchmark", "--output", "o.jsonl"])
    assert list(tmp_path.iterdir()) == []


def test_a_placeholder_nemo_gyms_parser_would_refuse_is_refused_before_anything_runs() -> None:
    """`--model <>` (a documented placeholder): NeMo Gym hands it to Hydra as +policy_model_name=<>,
    which Hydra refuses; so does the translation, naming it."""
    with pytest.raises(ConfigError, match=r"is not a Hydra override.*fill in the line's placeholders"):
        translate_serving_line(["--benchmark", "b", "--model", "<>", "--split", "benchmark"], setting_names())


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--no-serve", "--benchmark", "gpqa", "--output", "o.jsonl"], "--no-serve says NeMo Gym's servers"),
        (["--no-serve", "--config", "a.yaml", "--input", "d.jsonl"], "--no-serve says NeMo Gym's servers"),
        (["--input", "d.jsonl", "--output", "o.jsonl"], "this gym eval run line starts no servers"),
    ],
)
def test_submit_refuses_a_line_that_starts_no_servers_before_anything_runs(
    argv: list[str],
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`gymslurm submit ... gym eval run --no-serve <server flags>`: the servers are up already, so no
    job may start them: exit 2 naming --no-serve and `gymslurm collect` (the command that collects it),
    before NeMo Gym is looked for, nothing written. A line with no server flag and no --split likewise."""
    from gymslurm.cli import main

    monkeypatch.setenv("NEMO_GYM_VENV", str(tmp_path / "no-venv"))  # never reached
    monkeypatch.chdir(tmp_path)
    assert main(["submit", "--backend", "local", "gym", "eval", "run", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and "`gymslurm collect`" in err and "nothing was written" in err
    assert list(tmp_path.iterdir()) == []


def test_a_no_serve_lines_server_overrides_only_compose_as_its_server_flags_do() -> None:
    """--no-serve with an override of a server instance's configuration (benchmarks/human_eval_infilling's
    `++policy_model.resources_servers.code_fim.split=...`): NeMo Gym's collector only composes it into its
    copy of the configuration (its servers' is the head server's), so it joins the composition and is
    dropped from the collect line; a credential among them travels in the environment. A key that is
    no server's (a typo of a setting) stays on the collect line, to be refused by name there."""
    split = "++policy_model.resources_servers.code_fim.split=single_line"
    key = "++judge.responses_api_models.openai_model.api_key=sk-9"
    argv = ["--no-serve", "--input", "d.jsonl", split, key, "+num_repeat=2"]
    assert composes_configs(argv) and not composes_configs(["--no-serve", "+num_repeat=2"])
    flags = split_config_flags(argv)
    variable = "GYMSLURM_NEMO_GYM_JUDGE_RESPONSES_API_MODELS_OPENAI_MODEL_API_KEY"
    assert flags.servers == (
        split,
        f"++judge.responses_api_models.openai_model.api_key=${{oc.env:{variable}}}",
    )
    assert flags.secrets == {variable: "sk-9"}
    assert flags.rest == ("--no-serve", "--input", "d.jsonl", "+num_repeat=2")
