"""gymslurm's table of ``gym eval run``'s flags and settings against NeMo Gym 0.7.0's own (issue 21).

Read from the installed wheel itself, in its own interpreter: the options of its ``gym eval run``
parser (``nemo_gym.cli.main.build_parser``) and the fields of ``RolloutCollectionConfig``. Every one
must be accepted by gymslurm collect or refused by name with its reason
(gymslurm/nemogym_flags.py, docs/nemo-gym.md), and the table may name nothing NeMo Gym lacks.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from gymslurm import nemogym_flags
from gymslurm.settings import CollectSettings
from tests.compat.nemogym import NemoGymSetupError, ensure_nemo_gym

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

READ = """
import json
from nemo_gym.cli.main import build_parser
from nemo_gym.rollout_collection import RolloutCollectionConfig

def sub(parser, name):
    return next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[name]

run = sub(sub(build_parser(), "eval"), "run")
print(json.dumps({"flags": sorted(o for a in run._actions for o in a.option_strings),
                  "fields": sorted(RolloutCollectionConfig.model_fields)}))
"""
GENERIC = {"-h", "--help", "-v", "--verbose"}  # argparse's and NeMo Gym's own, on every command


@pytest.fixture(scope="module")
def nemo_gym_eval_run() -> dict[str, list[str]]:
    try:
        venv = ensure_nemo_gym()
    except NemoGymSetupError as error:
        pytest.fail(f"NeMo Gym could not be installed: {error}", pytrace=False)
    done = subprocess.run(
        [str(venv / "bin/python"), "-c", READ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_every_gym_eval_run_flag_is_accepted_or_refused_by_name(
    nemo_gym_eval_run: dict[str, list[str]],
) -> None:
    """Each option of 0.7.0's ``gym eval run`` (short aliases too) is in gymslurm's flag table."""
    ours = {
        *nemogym_flags.VALUE_FLAGS,
        *nemogym_flags.BOOL_FLAGS,
        *nemogym_flags.NO_OP_FLAGS,
        *nemogym_flags.REFUSED_FLAGS,
    }
    assert [flag for flag in nemo_gym_eval_run["flags"] if flag not in ours | GENERIC] == []
    assert sorted(ours - set(nemo_gym_eval_run["flags"])) == []  # nothing NeMo Gym does not have


def test_every_collection_setting_is_accepted_or_refused_by_name(
    nemo_gym_eval_run: dict[str, list[str]],
) -> None:
    """Each field of 0.7.0's RolloutCollectionConfig is a gymslurm setting of that name, folded into
    one, or refused with its reason."""
    known = {*CollectSettings.model_fields, *nemogym_flags.FOLDED, *nemogym_flags.REFUSED}
    assert [field for field in nemo_gym_eval_run["fields"] if field not in known] == []
