"""Eleven of NeMo Gym 0.7.0's shipped resources-server configs, started unchanged by NeMo Gym's own
``gym env start`` and collected twice with NeMo Gym's own spelling (``--no-serve +head_server.host/port
+environment_routing_mode=legacy +environment_server_name=NAME``): by ``gym eval run`` and by
``gymslurm collect``. The rows must be the same (issue 21).

Compared: every field of NeMo Gym's rows, but what is made anew on each call, in ``response`` (the
ids and ``created_at`` that NeMo Gym's ``openai_model`` generates for every reply). gymslurm's rows
carry its own stamps in addition (``_ng_run_id``, ``_ng_attempt``, ``_ng_rollout_id``,
``_ng_task_id``, ``task_id``: the run's identity and its execution numbers). The failure sidecars
must hold as many rows.

The model is the suite's deterministic fake (tests/compat/fake_openai.py) behind NeMo Gym's own
``openai_model``: one ``get_weather`` tool call, then a message. Configs chosen: no package beyond
NeMo Gym's own and no judge model. With the weather config (``example_single_tool_call``, a module
of its own) that is 12 shipped configs. ``blackjack``'s five example rows are identical: NeMo Gym
makes them one task repeated five times (``_ng_task_index`` 0, ``_ng_rollout_index`` 0..4), and so
does gymslurm now (it made five tasks before). Left out, and why:

- ``spartqa`` fails NeMo Gym's own configuration check (its simple_agent's ``benchmark`` dataset
  needs a ``prepare_script``: "Found 1 almost-server(s) with validation errors");
- ``format_verification/citation_format.yaml``: NeMo Gym's own collector refuses the wheel's
  example rows with it ("Row agent_ref 'freeform_formatting_simple_agent' is not an agent of
  environment server 'citation_format_environment_server'"); its ``freeform_formatting.yaml`` is in;
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.nemogym import (
    SHIPPED,
    NemoGymSetupError,
    Stack,
    ensure_nemo_gym,
    shipped_dataset,
    start_shipped_stack,
)
from tests.e2e.helpers import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

GYMSLURM_STAMPS = {"_ng_run_id", "_ng_attempt", "_ng_rollout_id", "_ng_task_id", "task_id"}
PER_CALL = {"id", "created_at", "call_id"}  # made anew by openai_model on every reply
# what a game deals at random differs between any two runs, NeMo Gym's own included: compared are
# the rows' indices, stamps, every other field, and that the conversation starts with the row's own
DEALT = {"blackjack_environment_server": {"info", "response", "reward", "responses_create_params"}}


@pytest.fixture(scope="module")
def shipped_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    try:
        stack = start_shipped_stack(ensure_nemo_gym(), tmp_path_factory.mktemp("shipped-stack"))
    except NemoGymSetupError as error:
        pytest.fail(f"the shipped configs could not be started: {error}", pytrace=False)
    yield stack
    stack.stop()
    left = stack.leftovers()
    assert not left, f"processes of the NeMo Gym stack outlived its stop: {[p.pid for p in left]}"


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _without_per_call(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_per_call(v) for k, v in value.items() if k not in PER_CALL}
    if isinstance(value, list):
        return [_without_per_call(item) for item in value]
    return value


def _differences(left: Any, right: Any, where: str = "") -> list[str]:
    """Where two parsed rows differ, as dotted paths with both values (shortened)."""
    if isinstance(left, dict) and isinstance(right, dict):
        keys = sorted(set(left) | set(right))
        return [d for k in keys for d in _differences(left.get(k), right.get(k), f"{where}.{k}")]
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        pairs = enumerate(zip(left, right, strict=True))
        return [d for i, (a, b) in pairs for d in _differences(a, b, f"{where}[{i}]")]
    return [] if left == right else [f"{where}: {str(left)[:80]!r} != {str(right)[:80]!r}"]


QUIET = ["+progress=none", "+summary=false"]
Indexed = dict[tuple[int, int], dict[str, Any]]


def _by_index(rows: list[dict[str, Any]]) -> Indexed:
    """A collection's rows by their (task, rollout) index."""
    return {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in rows}


def _collect_both(
    stack: Stack, spelled: list[str], out: Path, cwd: Path = REPO_ROOT, env: dict[str, str] | None = None
) -> tuple[Indexed, Indexed]:
    """The same NeMo Gym command line run by ``gym eval run`` (into ``out/ng.jsonl``) and by ``gymslurm
    collect`` (quiet, into ``out/gs.jsonl``; from ``cwd``, with ``env`` when given): both must exit 0,
    gymslurm's rows one per index. Their rows by index, NeMo Gym's first."""
    theirs = stack.gym_command("eval", "run", *spelled, f"+output_jsonl_fpath={out}/ng.jsonl")
    assert theirs.returncode == 0, theirs.stdout[-3000:] + theirs.stderr[-3000:]
    command = [sys.executable, "-m", "gymslurm", "collect", *spelled, f"+output_jsonl_fpath={out}/gs.jsonl"]
    ours = subprocess.run(
        [*command, *QUIET], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert ours.returncode == 0, ours.stdout[-3000:] + ours.stderr[-3000:]
    mine = _rows(out / "gs.jsonl")
    gymslurm = _by_index(mine)
    assert len(gymslurm) == len(mine), "two rows of one (task, rollout) index"
    return _by_index(_rows(out / "ng.jsonl")), gymslurm


def _assert_alike(
    index: tuple[int, int], row: dict[str, Any], mine: dict[str, Any], left_out: set[str]
) -> None:
    """gymslurm's row has NeMo Gym's fields plus its own stamps, and every field but ``left_out`` equal
    to NeMo Gym's (but for what openai_model makes anew on each call)."""
    assert set(mine) - set(row) <= GYMSLURM_STAMPS, sorted(set(mine) - set(row))
    differ = _differences(
        _without_per_call({k: v for k, v in row.items() if k not in left_out}),
        _without_per_call({k: mine[k] for k in row if k not in left_out}),
    )
    assert not differ, (index, differ[:5])


@pytest.mark.parametrize("server", sorted(SHIPPED))
def test_a_shipped_config_gives_gymslurm_the_rows_nemo_gym_gets(
    shipped_stack: Stack, server: str, tmp_path: Path
) -> None:
    """The same NeMo Gym command line, both collectors: the same rows, field by field."""
    dataset = shipped_dataset(shipped_stack.venv, server)
    head = shipped_stack.head_url.rsplit(":", 1)[1]
    spelled = [
        "--no-serve",
        "+head_server.host=127.0.0.1",
        f"+head_server.port={head}",
        "+disable_health_check=true",
        "+environment_routing_mode=legacy",
        f"+environment_server_name={server}",
        f"+input_jsonl_fpath={dataset}",
    ]
    nemo_gym, gymslurm = _collect_both(shipped_stack, spelled, tmp_path)
    assert sorted(gymslurm) == sorted(nemo_gym) and nemo_gym, (sorted(gymslurm), sorted(nemo_gym))
    for index, row in nemo_gym.items():
        mine = gymslurm[index]
        dealt = DEALT.get(server, set())
        assert dealt <= set(row), sorted(dealt - set(row))
        if dealt:
            sent = [(m["role"], m["content"]) for m in _rows(dataset)[0]["responses_create_params"]["input"]]
            for either in (row, mine):
                said = [(m["role"], m["content"]) for m in either["responses_create_params"]["input"]]
                assert said[: len(sent)] == sent, said
        _assert_alike(index, row, mine, dealt)
    assert len(_rows(tmp_path / "gs_failures.jsonl")) == len(_rows(tmp_path / "ng_failures.jsonl"))


MIXED = ("lc_equivalence_rule_environment_server", "circle_count_environment_server")


def test_rows_routed_by_their_agent_ref_get_nemo_gyms_rows(shipped_stack: Stack, tmp_path: Path) -> None:
    """NeMo Gym's default routing (issue 34): no routing flag, a dataset mixing two agents' rows (each
    row's agent_ref fronted by one relay of the shipped configs): both collectors, the same rows."""
    parts = [_rows(shipped_dataset(shipped_stack.venv, server)) for server in MIXED]
    mixed = [row for pair in zip(*parts, strict=True) for row in pair]
    assert len({row["agent_ref"]["name"] for row in mixed}) == 2
    dataset = tmp_path / "mixed.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in mixed))
    head = shipped_stack.head_url.rsplit(":", 1)[1]
    spelled = ["--no-serve", "+head_server.host=127.0.0.1", f"+head_server.port={head}"]
    spelled += ["+disable_health_check=true", f"+input_jsonl_fpath={dataset}"]
    nemo_gym, gymslurm = _collect_both(shipped_stack, spelled, tmp_path)
    assert sorted(gymslurm) == sorted(nemo_gym) and len(nemo_gym) == len(mixed), (
        sorted(gymslurm),
        sorted(nemo_gym),
    )
    for index, row in nemo_gym.items():
        _assert_alike(index, row, gymslurm[index], set())
    servers = {row["agent_ref"]["name"]: row["_ng_environment_server"] for row in gymslurm.values()}
    assert sorted(servers.values()) == sorted(MIXED)  # each agent's rows went through its own server


def test_a_no_serve_line_with_a_config_gets_the_collection_settings_it_sets(
    shipped_stack: Stack, tmp_path: Path
) -> None:
    """`--no-serve --config FILE` (issue 34), FILE setting `num_repeats` and `responses_create_params` at
    its top level: NeMo Gym's collector takes both from its composition of FILE, and `gymslurm collect`
    given the same line (NeMo Gym's composition run at its start, the flag then dropped) collects the
    same rows: each task twice, at the config's temperature, field by field as NeMo Gym's."""
    server = MIXED[1]
    dataset = shipped_dataset(shipped_stack.venv, server)
    config = tmp_path / "settings.yaml"
    config.write_text("num_repeats: 2\nresponses_create_params:\n  temperature: 0.25\n")
    head = shipped_stack.head_url.rsplit(":", 1)[1]
    spelled = [
        "--no-serve",
        "--config",
        str(config),
        "+head_server.host=127.0.0.1",
        f"+head_server.port={head}",
    ]
    spelled += ["+disable_health_check=true", "+environment_routing_mode=legacy"]
    spelled += [f"+environment_server_name={server}", f"+input_jsonl_fpath={dataset}"]
    env = {**os.environ, "NEMO_GYM_VENV": str(shipped_stack.venv), "RAY_USAGE_STATS_ENABLED": "0"}
    nemo_gym, gymslurm = _collect_both(shipped_stack, spelled, tmp_path, cwd=tmp_path, env=env)
    assert sorted(gymslurm) == sorted(nemo_gym) and len(nemo_gym) == 2 * len(_rows(dataset))
    for index, row in nemo_gym.items():
        mine = gymslurm[index]
        assert (
            row["responses_create_params"]["temperature"]
            == 0.25
            == mine["responses_create_params"]["temperature"]
        )
        _assert_alike(index, row, mine, set())
