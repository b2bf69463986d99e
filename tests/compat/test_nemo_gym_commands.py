"""NeMo Gym users' own command lines and runs under gymslurm, against NeMo Gym 0.7.0's own stack (issue 21).

- ``gym eval run``'s arguments, spelled the NeMo Gym way (``--no-serve``, ``+head_server.host/port``,
  ``+environment_routing_mode=legacy +environment_server_name=NAME``, ``+environment_server_routes``),
  given to ``gymslurm collect`` unchanged: no ``+environment_protocol``, each server's protocol is read
  from its declared type; one run may route tasksets to servers of different types.
- Runs **NeMo Gym's own collector** wrote (no manifest: legacy import behind ``+allow_unsafe_resume``),
  resumed by gymslurm with the same command plus ``+resume_from_cache=true +allow_unsafe_resume=true``:
  typed and relay, finished and interrupted, with a failures sidecar, and without NeMo Gym's
  materialized file. An interrupted NeMo Gym run is made by cutting its results file after a few rows
  (with a torn last line): NeMo Gym appends one row per finished rollout, so that is what a kill leaves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.compat.gym_eval import HEAD_SERVER, gym_aggregate
from tests.compat.nemogym import RELAY, TYPED, Stack
from tests.e2e.helpers import gymslurm

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

ROWS = 5
HEAD = ["--no-serve", *HEAD_SERVER, "+disable_health_check=true"]
RELAY_ROUTE = ["+environment_routing_mode=legacy", f"+environment_server_name={RELAY}"]
TYPED_ROUTE = ["+environment_routing_mode=taskset", f"+environment_server_routes={{weather: {TYPED}}}"]
RESUME = ["+resume_from_cache=true", "+allow_unsafe_resume=true"]


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_rows(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def materialized(flat: list[dict[str, Any]], taskset: str) -> list[dict[str, Any]]:
    """Rows in NeMo Gym's materialized form: ``{task_id: {taskset, task_id}, task_input}``."""
    return [{"task_id": {"taskset": taskset, "task_id": str(n)}, "task_input": r} for n, r in enumerate(flat)]


def nemo_gym_run(stack: Stack, dataset: Path, output: Path, *overrides: str) -> Path:
    """NeMo Gym's own collector, ``gym eval run --no-serve``, on the stack: its results file."""
    done = stack.gym_command(
        "eval", "run", *HEAD, f"+input_jsonl_fpath={dataset}", f"+output_jsonl_fpath={output}", *overrides
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return output


def under_gymslurm(dataset: Path, output: Path, *overrides: str) -> Any:
    """The same arguments given to ``gymslurm collect``."""
    return gymslurm(
        "collect",
        *HEAD,
        f"+input_jsonl_fpath={dataset}",
        f"+output_jsonl_fpath={output}",
        "+progress=plain",
        "+summary=false",
        *overrides,
        timeout=600,
    )


@pytest.fixture(scope="module")
def datasets(nemo_gym_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """NeMo Gym's example rows: flat (for the relay), materialized (for the typed server), one bad row."""
    folder = tmp_path_factory.mktemp("datasets")
    flat = rows(nemo_gym_stack.dataset)
    native = materialized(flat, "weather")
    bad = {"responses_create_params": {"input": 5}}  # the relay refuses it (HTTP 422): a sidecar row
    return {
        "flat": write_rows(folder / "weather.jsonl", flat),
        "native": write_rows(folder / "native.jsonl", native),
        "with_bad": write_rows(folder / "with_bad.jsonl", [*flat, bad]),
        "mixed": write_rows(
            folder / "mixed.jsonl", [*materialized(flat, "typed"), *materialized(flat, "relay")]
        ),
    }


@pytest.fixture(scope="module")
def nemo_gym_runs(
    nemo_gym_stack: Stack, datasets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Two runs of NeMo Gym's own collector: typed (5 rows), and relay (num_repeats=2, a failures sidecar)."""
    folder = tmp_path_factory.mktemp("nemo-gym-runs")
    typed = nemo_gym_run(nemo_gym_stack, datasets["native"], folder / "typed" / "ng.jsonl", *TYPED_ROUTE)
    relay = nemo_gym_run(
        nemo_gym_stack,
        datasets["with_bad"],
        folder / "relay" / "ng.jsonl",
        *RELAY_ROUTE,
        "+num_repeats=2",
        "+route_failures_to_sidecar=true",
    )
    assert len(rows(relay.with_name("ng_failures.jsonl"))) == 2  # the bad row's two repeats
    return {"typed": typed, "relay": relay}


def test_a_gym_eval_run_command_runs_unchanged(datasets: dict[str, Path], tmp_path: Path) -> None:
    """NeMo Gym's own arguments (names, head server, --no-serve; no protocol): 5/5 through the relay."""
    output = tmp_path / "relay.jsonl"
    done = under_gymslurm(datasets["flat"], output, *RELAY_ROUTE)
    assert done.returncode == 0, done.stderr
    results = rows(output)
    assert len(results) == ROWS and {row["reward"] for row in results} == {1.0}
    assert {row["_ng_result_type"] for row in results} == {"legacy_agent"}


def test_the_typed_route_reads_its_protocol_from_the_servers_type(
    datasets: dict[str, Path], tmp_path: Path
) -> None:
    """+environment_server_routes to single_agent_turn: the typed protocol, 5/5, as NeMo Gym routes it."""
    output = tmp_path / "typed.jsonl"
    done = under_gymslurm(datasets["native"], output, *TYPED_ROUTE)
    assert done.returncode == 0, done.stderr
    assert {row["reward"] for row in rows(output)} == {1.0} and len(rows(output)) == ROWS


def test_one_run_speaks_two_protocols(datasets: dict[str, Path], tmp_path: Path) -> None:
    """Routes to a typed server and to the relay in one run: each taskset in its server's protocol, 10/10."""
    output = tmp_path / "mixed.jsonl"
    routes = f"+environment_server_routes={{typed: {TYPED}, relay: {RELAY}}}"
    done = under_gymslurm(datasets["mixed"], output, routes)
    assert done.returncode == 0, done.stderr
    results = rows(output)
    assert len(results) == 2 * ROWS and {row["reward"] for row in results} == {1.0}
    by_taskset = {row["task_id"]["taskset"]: row["_ng_result_type"] for row in results}
    assert by_taskset == {"typed": "single_agent_turn", "relay": "legacy_agent"}


def test_an_unknown_server_name_is_refused_before_anything_is_written(
    datasets: dict[str, Path], tmp_path: Path
) -> None:
    """A name the head server's config does not hold: exit 2 naming it and the known ones; no file."""
    output = tmp_path / "run" / "x.jsonl"
    done = under_gymslurm(
        datasets["flat"], output, "+environment_routing_mode=legacy", "+environment_server_name=weather_relay"
    )
    assert done.returncode == 2 and "'weather_relay'" in done.stderr and RELAY in done.stderr
    assert not output.parent.exists()


def cut(results: Path, keep: int) -> None:
    """What a kill leaves of NeMo Gym's results file: its first ``keep`` rows and a torn last line."""
    lines = results.read_bytes().splitlines(keepends=True)
    results.write_bytes(b"".join(lines[:keep]) + lines[keep][:40])


RELAY_RUN = [*RELAY_ROUTE, "+num_repeats=2", "+route_failures_to_sidecar=true"]
SHAPES = {  # (NeMo Gym's run, the dataset, its command's overrides, rows kept by the interruption)
    "typed-finished": ("typed", "native", TYPED_ROUTE, None),
    "typed-interrupted": ("typed", "native", TYPED_ROUTE, 2),
    "relay-sidecar-finished": ("relay", "with_bad", RELAY_RUN, None),
    "relay-sidecar-interrupted": ("relay", "with_bad", RELAY_RUN, 3),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_run_nemo_gym_wrote_resumes_under_gymslurm(
    shape: str, nemo_gym_runs: dict[str, Path], datasets: dict[str, Path], tmp_path: Path
) -> None:
    """A NeMo Gym run in each shape, resumed with its own command + resume flags: NeMo Gym's rows and
    its materialized file kept byte for byte (issue 34), only the missing rollouts sent, every
    rollout answered (the bad row's two repeats stay failures)."""
    run, dataset, overrides, keep = SHAPES[shape]
    source = nemo_gym_runs[run]
    shutil.copytree(source.parent, tmp_path / "run")
    output = tmp_path / "run" / source.name
    if keep is not None:
        cut(output, keep)
    before = b"".join(output.read_bytes().splitlines(keepends=True)[: keep or None])
    materialized = output.parent / "ng_materialized_inputs.jsonl"
    nemo_gyms = materialized.read_bytes()
    done = under_gymslurm(datasets[dataset], output, *overrides, *RESUME)
    assert done.returncode == 0, done.stderr
    assert "importing the legacy run" in done.stderr
    assert output.read_bytes().startswith(before)  # NeMo Gym's own rows untouched
    assert materialized.read_bytes() == nemo_gyms  # and its materialized inputs: never replaced
    results = rows(output)
    expected = ROWS if run == "typed" else 2 * ROWS
    assert len(results) == expected and {row["reward"] for row in results} == {1.0}
    if keep is None:
        assert "to dispatch" not in done.stderr or "2 of 12 rollouts to dispatch" in done.stderr


def test_a_nemo_gym_run_without_its_materialized_file_resumes(
    nemo_gym_runs: dict[str, Path], datasets: dict[str, Path], tmp_path: Path
) -> None:
    """Its materialized file removed: the dataset's tasks are used, only missing ones sent (was KeyError)."""
    source = nemo_gym_runs["typed"]
    shutil.copytree(source.parent, tmp_path / "run")
    output = tmp_path / "run" / source.name
    (output.parent / "ng_materialized_inputs.jsonl").unlink()
    cut(output, 2)
    done = under_gymslurm(datasets["native"], output, *TYPED_ROUTE, *RESUME)
    assert done.returncode == 0, done.stderr
    assert "3 of 5 rollouts to dispatch" in done.stderr
    assert len(rows(output)) == ROWS and {row["reward"] for row in rows(output)} == {1.0}


def test_nemo_gyms_aggregate_reads_merged_shards(
    nemo_gym_stack: Stack, datasets: dict[str, Path], tmp_path: Path
) -> None:
    """Two shards collected the NeMo Gym way, merged by gymslurm aggregate: gym eval aggregate on the
    merged file computes NeMo Gym's own metrics (one entry, the relay's); the merge itself wrote no
    NeMo Gym metrics file (no server answered it), only gymslurm's own under its name."""
    # Each shard holds its rows with their global task indices, as NeMo Gym's materialized shards do:
    # the merged file then has one row per task index, which NeMo Gym's aggregation groups by.
    flat = [{**r, "_ng_task_index": n, "_ng_rollout_index": 0} for n, r in enumerate(rows(datasets["flat"]))]
    shards = []
    for number, part in enumerate((flat[:2], flat[2:])):
        dataset = write_rows(tmp_path / f"part{number}.jsonl", part)
        output = tmp_path / f"shard{number}" / "weather.jsonl"
        done = under_gymslurm(dataset, output, *RELAY_ROUTE, "+taskset=weather")
        assert done.returncode == 0, done.stderr
        shards.append(output)
    merged = tmp_path / "merged" / "weather.jsonl"
    done = gymslurm("aggregate", *map(str, shards), f"+output_jsonl_fpath={merged}")
    assert done.returncode == 0, done.stderr
    assert not (merged.parent / "weather_aggregate_metrics.json").exists()
    assert (merged.parent / "weather_gymslurm_metrics.json").exists()
    (entry,) = gym_aggregate(nemo_gym_stack, merged, tmp_path / "ng" / "ng.jsonl")
    assert entry["_ng_environment_server"] == RELAY and entry["agent_metrics"]
