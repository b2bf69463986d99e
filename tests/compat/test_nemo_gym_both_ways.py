"""A run either tool started, the other finishes, turn after turn (issue 34), on NeMo Gym 0.7.0's own stack.

The chain NeMo Gym → gymslurm → NeMo Gym → gymslurm (and gymslurm → NeMo Gym → gymslurm → NeMo Gym),
each turn the same NeMo Gym command line (``gym eval run --no-serve ...``; gymslurm adds
``+allow_unsafe_resume=true`` to resume a run NeMo Gym started, which has no manifest), each turn but
the last **SIGKILLed mid-way** once it saved a few more rows, for relay, typed and repeats+sidecar
runs. What must hold after every turn and at the end:

- NeMo Gym's ``<stem>_materialized_inputs.jsonl`` is byte-identical after each gymslurm turn, and every
  outcome row saved before a turn is still there, byte for byte (both tools only append);
- each turn sends only what is not saved: 0 saved rollouts re-sent (each tool says how many it
  sends; the count is checked against the saved rows), and every rollout has exactly one result at
  the end (the bad row's two repeats: failures only, never a result).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.nemogym import RELAY, TYPED, NemoGymSetupError, Stack, ensure_nemo_gym, start_stack
from tests.e2e.helpers import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.nemogym]

COPIES = 6  # each example row six times: 30 rollouts a run, so that a kill lands mid-way
PARALLEL = ["+num_samples_in_parallel=2"]
NO_HEALTH = ["+disable_health_check=true"]
RELAY_ROUTE = ["+environment_routing_mode=legacy", f"+environment_server_name={RELAY}"]
TYPED_ROUTE = ["+environment_routing_mode=taskset", f"+environment_server_routes={{weather: {TYPED}}}"]
SIDECAR = [*RELAY_ROUTE, "+num_repeats=2", "+route_failures_to_sidecar=true"]
SHAPES = {"relay": RELAY_ROUTE, "typed": TYPED_ROUTE, "repeats-sidecar": SIDECAR}
MAX_ATTEMPTS = 3  # NeMo Gym's and gymslurm's default NEMO_GYM_MAX_ROLLOUT_ATTEMPTS


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The compat stack with its head server on a free port (every command here names it)."""
    try:
        started = start_stack(ensure_nemo_gym(), tmp_path_factory.mktemp("both-ways-stack"), head_port=None)
    except NemoGymSetupError as error:
        pytest.fail(f"the NeMo Gym compat stack could not be set up: {error}", pytrace=False)
    yield started
    started.stop()
    left = started.leftovers()
    assert not left, f"processes of the NeMo Gym stack outlived its stop: {[p.pid for p in left]}"


def head(stack: Stack) -> list[str]:
    port = stack.head_url.rsplit(":", 1)[1]
    return [
        "--no-serve",
        "+head_server.host=127.0.0.1",
        f"+head_server.port={port}",
        "+disable_health_check=true",
    ]


def dataset(stack: Stack, folder: Path, shape: str) -> tuple[Path, int]:
    """The shape's dataset and its number of rollouts (the bad row's repeats included)."""
    flat = [json.loads(line) for line in stack.dataset.read_text().splitlines() if line.strip()] * COPIES
    if shape == "typed":
        items = [
            {"task_id": {"taskset": "weather", "task_id": str(n)}, "task_input": r}
            for n, r in enumerate(flat)
        ]
    elif shape == "repeats-sidecar":
        items = [*flat, {"responses_create_params": {"input": 5}}]  # the relay refuses it: a sidecar row
    else:
        items = flat
    path = folder / f"{shape}.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path, len(items) * (2 if shape == "repeats-sidecar" else 1)


def lines(path: Path) -> list[bytes]:
    """The complete lines of a file (a kill may leave a torn last one, which both tools drop)."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    return raw[: raw.rfind(b"\n") + 1].splitlines(keepends=True)


def keys(path: Path) -> list[tuple[int, int]]:
    return [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in map(json.loads, lines(path))]


def command(
    tool: str, stack: Stack, data: Path, output: Path, overrides: list[str], *, resume: str | None
) -> list[str]:
    """A turn's command line: NeMo Gym's own, plus the resume flags (``resume``: the tool that started)."""
    args = [
        *head(stack),
        f"+input_jsonl_fpath={data}",
        f"+output_jsonl_fpath={output}",
        *overrides,
        *PARALLEL,
    ]
    if tool == "nemo_gym":
        return [
            str(stack.venv / "bin/gym"),
            "eval",
            "run",
            *args,
            *(["+resume_from_cache=true"] if resume else []),
        ]
    resumed = ["+resume_from_cache=true"] if resume else []
    resumed += ["+allow_unsafe_resume=true"] if resume == "nemo_gym" else []  # NeMo Gym writes no manifest
    return [sys.executable, "-m", "gymslurm", "collect", *args, "+progress=plain", "+summary=false", *resumed]


def turn(argv: list[str], cwd: Path, output: Path, kill_at: int | None) -> tuple[int, str]:
    """Run one turn; with ``kill_at``, SIGKILL it (its whole session) once the results hold that many rows."""
    process = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        if kill_at is not None and len(lines(output)) >= kill_at:
            os.killpg(process.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    else:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    said, _ = process.communicate(timeout=60)
    return process.returncode, said


def sent(tool: str, said: str) -> int:
    """How many rollouts a turn said it sends (0 when it found nothing to do)."""
    pattern = (
        r"(\d+) rows that still need to be run"
        if tool == "nemo_gym"
        else r"(\d+) of \d+ rollouts to dispatch"
    )
    found = re.search(pattern, said)
    return int(found.group(1)) if found else 0


def owed(output: Path, total: int) -> int:
    """Rollouts neither saved as a result nor out of attempts: what a resume must send, and no more."""
    done = set(keys(output))
    failed = Counter(keys(output.with_name(output.stem + "_failures.jsonl")))
    exhausted = {key for key, count in failed.items() if count >= MAX_ATTEMPTS}
    return total - len(done) - len(exhausted - done)


@pytest.mark.parametrize("first", ["nemo_gym", "gymslurm"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_run_goes_back_and_forth_between_nemo_gym_and_gymslurm(
    stack: Stack, tmp_path: Path, shape: str, first: str
) -> None:
    """Four turns alternating the two tools, three killed mid-way: every rollout once, NeMo Gym's files
    unchanged by gymslurm, 0 saved rollouts re-sent."""
    data, total = dataset(stack, tmp_path, shape)
    good = total - (2 if shape == "repeats-sidecar" else 0)
    output = tmp_path / "run" / "ng.jsonl"
    output.parent.mkdir()
    materialized = output.with_name("ng_materialized_inputs.jsonl")
    tools = [first, "gymslurm" if first == "nemo_gym" else "nemo_gym"] * 2
    for number, tool in enumerate(tools):
        before = {path: lines(path) for path in (output, output.with_name("ng_failures.jsonl"))}
        nemo_gyms_file = materialized.read_bytes() if materialized.exists() else None
        expected = owed(output, total) if number else total
        last = number == len(tools) - 1
        kill_at = None if last else len(before[output]) + max(3, good // 8)
        argv = command(tool, stack, data, output, SHAPES[shape], resume=first if number else None)
        code, said = turn(argv, stack.workdir if tool == "nemo_gym" else REPO_ROOT, output, kill_at)
        where = f"turn {number + 1} ({tool}, exit {code}):\n{said[-4000:]}"
        assert code == (0 if last else -signal.SIGKILL), where
        assert number == 0 or sent(tool, said) == expected, where  # nothing saved is sent again
        for path, kept in before.items():
            assert lines(path)[: len(kept)] == kept, where  # every saved row kept, byte for byte
        if tool == "gymslurm" and nemo_gyms_file is not None:
            assert materialized.read_bytes() == nemo_gyms_file, where  # NeMo Gym's file untouched
    results = Counter(keys(output))
    assert len(results) == good and set(results.values()) == {1}  # every rollout once
    assert {json.loads(row)["reward"] for row in lines(output)} == {1.0}
    if shape == "repeats-sidecar":
        failures = Counter(keys(output.with_name("ng_failures.jsonl")))
        assert set(failures).isdisjoint(results) and len(failures) == 2
