"""NeMo Gym's ``gym eval run`` command lines under gymslurm collect: ``null`` where NeMo Gym documents it."""

from __future__ import annotations

import pytest

from gymslurm.nemogym_flags import translate_flags
from gymslurm.settings import load_settings

BASE = [
    "+input_jsonl_fpath=d.jsonl",
    "+output_jsonl_fpath=o.jsonl",
    "+environment_server_url=http://127.0.0.1:1",
]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (["+num_repeats=null"], []),
        (["+num_samples_in_parallel=null"], []),
        (["--concurrency", "null"], []),
        (["--concurrency=null"], []),
        (["--num-repeats", "null"], []),
        (["+num_repeats=4"], ["+num_repeats=4"]),
        (["--concurrency", "8"], ["+num_samples_in_parallel=8"]),
        (["+limit=null"], ["+limit=null"]),  # not a setting whose null is the default: left to validation
    ],
)
def test_nemo_gyms_null_is_the_default(given: list[str], expected: list[str]) -> None:
    """+num_repeats=null, +num_samples_in_parallel=null, --concurrency null: NeMo Gym's default, dropped."""
    assert translate_flags(given) == expected


def test_a_null_override_gives_the_settings_of_no_override() -> None:
    """The run is the one the command without the null override makes (identity included)."""
    nulls = translate_flags([*BASE, "+num_repeats=null", "--concurrency", "null"])
    assert load_settings(nulls) == load_settings(BASE)
