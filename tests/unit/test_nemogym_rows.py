"""NeMo Gym's row preparation under gymslurm: its prompt configs and responses_create_params overrides.

What ``gym eval run --prompt-config FILE`` and ``--temperature/--top-p/--max-output-tokens`` do to a
flat row in NeMo Gym 0.7.0 (``nemo_gym/prompt.py``, ``_preprocess_raw_rows``), done the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.collector.prepare import load_prompt_config
from gymslurm.errors import ConfigError
from gymslurm.nemogym_flags import translate_flags
from gymslurm.nemogym_rows import RowPreparation, prepare_row
from gymslurm.settings import load_settings, setting_names
from gymslurm.tasks import MaterializeOptions, materialize

ROW = {"question": "2+2?", "responses_create_params": {"tools": [], "temperature": 1.0}}


def test_a_prompt_config_builds_the_input_as_nemo_gym_does(tmp_path: Path) -> None:
    """system then user, each filled from the row's fields; the row's other parameters kept."""
    path = tmp_path / "p.yaml"
    path.write_text("system: Be brief.\nuser: 'Q: {question}'\n")
    user, system = load_prompt_config(str(path))
    row = prepare_row(0, dict(ROW), RowPreparation(user=user, system=system))
    assert row["responses_create_params"] == {
        "tools": [],
        "temperature": 1.0,
        "input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q: 2+2?"}],
    }


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"responses_create_params": {"input": "hi"}, "question": "x"}, "mutually exclusive"),
        ({"responses_create_params": {}}, r"uses \{question\}, which the row does not have"),
    ],
)
def test_a_row_the_prompt_config_cannot_fill_is_refused(row: dict[str, object], message: str) -> None:
    """A row with its own input, or without a field the template names: refused naming the row."""
    with pytest.raises(ConfigError, match=message):
        prepare_row(3, row, RowPreparation(user="{question}"))


def test_the_sampling_flags_override_each_rows_parameters() -> None:
    """--temperature 0.6 --max-output-tokens 512: merged over the row's own, as NeMo Gym merges them."""
    overrides = translate_flags(["--temperature", "0.6", "--max-output-tokens", "512"], setting_names())
    base = ["+input_jsonl_fpath=d.jsonl", "+output_jsonl_fpath=o.jsonl", "+environment_server_url=http://h:1"]
    settings, _ = load_settings([*base, *overrides])
    assert settings.responses_create_params == {"temperature": 0.6, "max_output_tokens": 512}
    row = prepare_row(0, dict(ROW), RowPreparation(overrides=settings.responses_create_params))
    assert row["responses_create_params"] == {"tools": [], "temperature": 0.6, "max_output_tokens": 512}


def test_a_materialized_task_is_refused_with_them() -> None:
    """NeMo Gym refuses overrides on a materialized task (sent as saved); so does gymslurm."""
    options = MaterializeOptions(dataset_name="d", nemo_gym=RowPreparation(overrides={"temperature": 0.1}))
    with pytest.raises(ConfigError, match="flat rows only"):
        materialize([{"task_id": {"taskset": "t", "task_id": "1"}, "task_input": {}}], options)


def test_each_repeat_gets_its_seed_as_nemo_gym_adds_it() -> None:
    """+num_repeats_add_seed: extra_body's seed is the rollout index, other metadata kept."""
    row = {"responses_create_params": {"metadata": {"extra_body": '{"top_k": 5}', "k": "v"}}}
    options = MaterializeOptions(dataset_name="d", num_repeats=2, nemo_gym=RowPreparation(seed=True))
    tasks = materialize([row], options)
    assert [t["task_input"]["responses_create_params"]["metadata"] for t in tasks] == [
        {"extra_body": '{"top_k": 5, "seed": 0}', "k": "v"},
        {"extra_body": '{"top_k": 5, "seed": 1}', "k": "v"},
    ]
