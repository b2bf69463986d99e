"""Every identity change of spec 000 through the three ways a resume can be answered: from the
finished-run seal, from the outcome index, and the full path (neither). All three must agree, on
the exit status and on every word besides the one line that says where a sealed answer came from.

A shortcut may only skip work, never a check: a change the full path refuses (a model, sampling, a
judge, the Environment Server's configuration, a dataset, a prompt) is refused by each shortcut
too, and one it accepts (concurrency, reporting, a credential, an address) is accepted alike.

Real parts, in this process for speed: the demo Environment Server's app behind its own HTTP server
on loopback (a thread), its served configuration changed between the run and its resume as a
redeployed server would change it; ``gymslurm collect`` called as its command line calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gymslurm.collector.seal import SAID_FROM_SEAL
from gymslurm.demo.app import DemoApp, DemoConfig, config_dict
from gymslurm.demo.http import start_server
from gymslurm.demo.messages import Reply, json_reply
from gymslurm.errors import GymslurmError
from tests.e2e.helpers import companion, write_tasks

RESUME = "+resume_from_cache=true"


@dataclass
class ConfigurableServer:
    """The demo Environment Server whose ``GET /global_config_dict_yaml`` answer a test can change."""

    url: str = ""
    served: dict[str, Any] = field(default_factory=dict)
    asked: int = 0  # configuration requests answered
    down: bool = False  # the configuration endpoint answers 503 (a server being redeployed)

    def handler(self, app: DemoApp) -> Callable[[bytes, bytes, bytes], Reply]:
        def handle(method: bytes, target: bytes, body: bytes) -> Reply:
            if target.split(b"?", 1)[0] == b"/global_config_dict_yaml":
                self.asked += 1
                if self.down:
                    return json_reply(503, {"detail": "Service Unavailable"})
                return json_reply(200, yaml.safe_dump(self.served, sort_keys=True))
            return app.handle(method, target, body)

        return handle


@pytest.fixture
def server() -> Iterator[ConfigurableServer]:
    config = DemoConfig(accuracy=1.0)
    found = ConfigurableServer(served=config_dict(config))
    loop = asyncio.new_event_loop()
    started = threading.Event()

    async def serve() -> None:
        listening, _ = await start_server(found.handler(DemoApp(config)), "127.0.0.1", 0)
        found.url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop)
    assert started.wait(10)
    yield found
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def gymslurm_collect(*argv: str) -> tuple[int, str, str]:
    """``gymslurm collect ARGV`` as the command line runs it: exit status, stdout, stderr."""
    from gymslurm.commands.collect import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except GymslurmError as error:
            print(f"gymslurm collect: error: {error}", file=err)
            code = error.exit_code
    return code, out.getvalue(), err.getvalue()


def args(dataset: Path, output: Path, url: str, *overrides: str) -> list[str]:
    return [
        f"+input_jsonl_fpath={dataset}",
        f"+output_jsonl_fpath={output}",
        f"+environment_server_url={url}",
        "+progress=plain",
        "+summary=false",
        *overrides,
    ]


def _policy(served: dict[str, Any]) -> dict[str, Any]:
    policy: dict[str, Any] = served["policy_model"]["responses_api_models"]["demo_policy"]
    return policy


def _environment(served: dict[str, Any]) -> dict[str, Any]:
    environment: dict[str, Any] = next(iter(served.values()))["resources_servers"]
    return next(iter(environment.values()))


def _set(where: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Callable[[dict], None]:
    def change(served: dict[str, Any]) -> None:
        where(served)[key] = value

    return change


def _judge(model: str) -> Callable[[dict], None]:
    def change(served: dict[str, Any]) -> None:
        served["judge_model"] = {"responses_api_models": {"judge": {"model": model}}}

    return change


@dataclass(frozen=True)
class Change:
    """One identity change of spec 000: at the server (its served configuration), in the command, or in
    the dataset; and whether the saved results must then be refused (exit 2, naming the key)."""

    name: str
    invalidates: bool
    served: Callable[[dict[str, Any]], None] | None = None  # applied to the served config (and its base)
    base: Callable[[dict[str, Any]], None] | None = None  # the served config the run was collected with
    overrides: tuple[str, ...] = ()
    dataset: list[dict[str, Any]] | None = None
    url: Callable[[str], str] | None = None  # the resume names the server another way


TASKS: list[dict[str, Any]] = [{}, {}]
CHANGES = [
    # --- at the server: what GET /global_config_dict_yaml answers ---
    Change("the served model", True, served=_set(_policy, "model", "another-model")),
    Change(
        "the sampling temperature", True, _set(_policy, "temperature", 0.7), _set(_policy, "temperature", 0.0)
    ),
    Change("the judge model", True, served=_judge("judge-b"), base=_judge("judge-a")),
    Change("the Environment Server's verifier", True, served=_set(_environment, "verifier", "lenient")),
    Change("the Environment Server's orchestration", True, served=_set(_environment, "num_agents", 4)),
    Change(
        "the policy's API key at the server",
        False,
        _set(_policy, "api_key", "sk-B"),
        _set(_policy, "api_key", "sk-A"),
    ),
    Change(
        "the policy's address at the server",
        False,
        _set(_policy, "base_url", "http://b:1"),
        _set(_policy, "base_url", "http://a:1"),
    ),
    Change(
        "the server's concurrency",
        False,
        _set(_policy, "max_concurrency", 8),
        _set(_policy, "max_concurrency", 4),
    ),
    # --- in the command or the dataset ---
    Change("the dataset's content", True, dataset=[{}, {}, {}]),
    Change("the prompt template", True, overrides=("+prompt_template='Q: {prompt}'",)),
    Change("the repeats", True, overrides=("+num_repeats=2",)),
    Change("the collection concurrency", False, overrides=("+concurrency=3",)),
    Change("the reporting options", False, overrides=("+progress_interval_s=5",)),
    Change("a dispatch budget", False, overrides=("+dispatch_budget_s=600",)),
    Change("the endpoint address", False, url=lambda url: url.replace("127.0.0.1", "localhost")),
    Change("nothing", False),
]
PATHS = ("sealed", "indexed", "full")


def resume(server: ConfigurableServer, folder: Path, change: Change, path: str) -> tuple[int, str, str, bool]:
    """Collect a finished run, change one thing, and resume it by ``path``: what the resume said."""
    base = copy.deepcopy(server.served)
    if change.base is not None:
        change.base(server.served)
    folder.mkdir()
    dataset = write_tasks(folder / "tasks.jsonl", TASKS)
    output = folder / "run" / "out.jsonl"
    first = gymslurm_collect(*args(dataset, output, server.url))
    assert first[0] == 0, first[2]
    assert companion(output, "_finished.json").exists(), first[2]
    if change.served is not None:
        change.served(server.served)
    if change.dataset is not None:
        write_tasks(dataset, change.dataset)
    if path != "sealed":
        companion(output, "_finished.json").unlink()
    if path == "full":
        companion(output, "_outcome_index.bin").unlink(missing_ok=True)
    url = change.url(server.url) if change.url else server.url
    code, out, err = gymslurm_collect(*args(dataset, output, url, *change.overrides, RESUME))
    server.served = base
    lines = err.splitlines(keepends=True)
    said = "".join(line for line in lines if not line.startswith(SAID_FROM_SEAL))
    return code, out, said.replace(str(folder), "<run>"), SAID_FROM_SEAL in err


@pytest.mark.parametrize("change", CHANGES, ids=[change.name for change in CHANGES])
def test_the_seal_the_index_and_the_full_path_agree(
    server: ConfigurableServer, tmp_path: Path, change: Change
) -> None:
    """Each identity change of spec 000 gets the same answer whichever way the resume is answered:
    a refusal naming the change when it invalidates the saved results, the run's answer when not."""
    answers = {path: resume(server, tmp_path / path, change, path) for path in PATHS}
    for path in PATHS:
        code, _, said, _ = answers[path]
        if change.invalidates:
            assert code == 2, (path, said)
            assert "changed" in said or "differ" in said, (path, said)
        else:
            assert code == 0, (path, said)
    assert answers["sealed"][:3] == answers["indexed"][:3] == answers["full"][:3]
    assert not answers["indexed"][3] and not answers["full"][3]


def test_an_unchanged_server_is_asked_and_the_seal_answers(
    server: ConfigurableServer, tmp_path: Path
) -> None:
    """The seal answers only after the server's configuration was asked again and found unchanged."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", TASKS)
    output = tmp_path / "run" / "out.jsonl"
    assert gymslurm_collect(*args(dataset, output, server.url))[0] == 0
    before = server.asked
    code, _, err = gymslurm_collect(*args(dataset, output, server.url, RESUME))
    assert code == 0 and SAID_FROM_SEAL in err, err
    assert server.asked == before + 1  # one small request, nothing else


def test_a_server_that_does_not_answer_sends_the_resume_down_the_full_path(
    server: ConfigurableServer, tmp_path: Path
) -> None:
    """A seal cannot prove what a server it cannot reach would answer: the full path says why it stops."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", TASKS)
    output = tmp_path / "run" / "out.jsonl"
    assert gymslurm_collect(*args(dataset, output, server.url))[0] == 0
    server.down = True
    code, _, err = gymslurm_collect(*args(dataset, output, server.url, RESUME))
    assert code != 0 and SAID_FROM_SEAL not in err
    assert "cannot read the Environment Server's configuration" in err, err
