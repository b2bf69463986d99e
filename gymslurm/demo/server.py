"""``gymslurm demo-server``: run the built-in demo Environment Server, or write its dataset.

::

    python -m gymslurm demo-server --host 127.0.0.1 --port 0 [--accuracy 0.8] [--seed 0] [fault flags]
    python -m gymslurm demo-server --write-dataset tasks.jsonl --n 1000 [--seed 0]

Once listening it prints exactly one line to stdout, flushed:
``gymslurm demo-server listening on http://HOST:PORT`` (``--port 0`` picks a free port; test
fixtures parse the line). SIGTERM and SIGINT stop it cleanly (exit 0, a one-line summary of what it
answered on stderr). Everything else is in docs/demo-server.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import orjson

from gymslurm.demo.app import DEFAULT_ACCURACY, DemoApp, DemoConfig
from gymslurm.demo.arith import DEFAULT_MODEL_NAME, dataset_rows
from gymslurm.demo.faults import FAULTS, RATE_ORDER
from gymslurm.demo.http import DIE_EXIT_CODE, start_server
from gymslurm.errors import ConfigError
from gymslurm.exitcodes import ExitCode

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8123
LISTENING = "gymslurm demo-server listening on"
API_KEY_ENV = "DEMO_API_KEY"  # the server's own key, read from its environment (fault rejected_key)


def _parser() -> argparse.ArgumentParser:
    faults = "\n".join(f"  {name:<12} {text}" for name, text in FAULTS.items())
    parser = argparse.ArgumentParser(
        prog="gymslurm demo-server",
        description="The built-in demo Environment Server (exact-answer arithmetic, no model needed).",
        epilog=(
            f"faults (per task: task_input._demo_fault = NAME, _demo_fault_attempts = K):\n{faults}\n\n"
            f"An injected 'die' exits with status {DIE_EXIT_CODE}. Docs: docs/demo-server.md"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"0 picks a free port (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--model-name", default=DEFAULT_MODEL_NAME, help="the policy's name in the served config"
    )
    parser.add_argument(
        "--accuracy", type=float, default=DEFAULT_ACCURACY, help="P(policy answers correctly)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the policy, the fault draws and the dataset"
    )
    for name in RATE_ORDER:
        parser.add_argument(
            f"--{name.replace('_', '-')}-rate",
            type=float,
            default=0.0,
            metavar="P",
            help=f"P({FAULTS[name]})",
        )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added before every /run reply")
    parser.add_argument(
        "--policy-turns",
        type=int,
        default=1,
        metavar="N",
        help="with --policy-url: ask the model N times per episode, as an agent's turns (default 1)",
    )
    parser.add_argument(
        "--policy-max-tokens",
        type=int,
        default=16,
        metavar="N",
        help="with --policy-url: each model call's max_tokens (default 16)",
    )
    parser.add_argument(
        "--die-after", type=int, default=None, metavar="N", help="answer N /run requests, die on the next"
    )
    parser.add_argument(
        "--policy-url",
        default=None,
        metavar="URL",
        help="an OpenAI-compatible model server answering for the policy (e.g. gymslurm demo-model-server)",
    )
    dataset = parser.add_argument_group("dataset")
    dataset.add_argument("--write-dataset", type=Path, metavar="PATH", help="write a JSONL dataset and exit")
    dataset.add_argument(
        "--n", type=int, default=None, help="number of tasks to write (with --write-dataset)"
    )
    dataset.add_argument(
        "--no-task-ids", action="store_true", help="write rows without task_id (the collector derives ids)"
    )
    return parser


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    """The server configuration the flags ask for; a ConfigError says every flag that is wrong."""
    rates = tuple((name, float(getattr(args, f"{name}_rate"))) for name in RATE_ORDER)
    config = DemoConfig(
        model_name=args.model_name,
        accuracy=args.accuracy,
        seed=args.seed,
        rates=tuple((name, rate) for name, rate in rates if rate),
        latency_ms=args.latency_ms,
        die_after=args.die_after,
        policy_url=args.policy_url,
        policy_turns=args.policy_turns,
        policy_max_tokens=args.policy_max_tokens,
        api_key=os.environ.get(API_KEY_ENV, ""),
    )
    problems = config.problems()
    if problems:
        raise ConfigError("invalid demo-server options: " + "; ".join(problems) + ". See --help.")
    return config


def write_dataset(path: Path, n: int, seed: int, with_task_ids: bool = True) -> None:
    """Write ``n`` arithmetic tasks to ``path`` as JSONL, atomically (a temporary file renamed)."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with temporary.open("wb") as out:
        for row in dataset_rows(n, seed, with_task_ids):
            out.write(orjson.dumps(row) + b"\n")
    os.replace(temporary, path)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def summary(app: DemoApp) -> str:
    """The shutdown line: how many ``/run`` and ``/verify`` requests were answered, and how."""

    def tally(outcomes: Counter[str]) -> str:
        return ", ".join(f"{name} {count}" for name, count in sorted(outcomes.items())) or "nothing"

    return (
        f"stopped after {app.run_requests} /run requests ({tally(app.outcomes)}) and "
        f"{app.verify_requests} /verify requests ({tally(app.verify_outcomes)})"
    )


async def serve(config: DemoConfig, host: str, port: int) -> int:
    """Serve until SIGTERM or SIGINT; announce the address on stdout once listening."""
    app = DemoApp(config)
    try:
        server, connections = await start_server(app.handle, host, port)
    except OSError as error:
        raise ConfigError(
            f"cannot listen on {host}:{port}: {error.strerror}. Pick another --port (0: any)."
        ) from None
    bound_port = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"{LISTENING} {_url(host, bound_port)}", flush=True)
    await stop.wait()
    server.close()
    for connection in list(connections):
        connection.close()
    await server.wait_closed()
    print(f"gymslurm demo-server: {summary(app)}", file=sys.stderr)
    return ExitCode.DONE


def main(argv: list[str]) -> int:
    """Entry point of ``gymslurm demo-server``."""
    args = _parser().parse_args(argv)
    if args.write_dataset is not None:
        if args.n is None or args.n < 0:
            raise ConfigError("--write-dataset needs --n N (the number of tasks, >= 0)")
        write_dataset(args.write_dataset, args.n, args.seed, with_task_ids=not args.no_task_ids)
        print(f"wrote {args.n} tasks to {args.write_dataset}")
        return ExitCode.DONE
    return asyncio.run(serve(config_from_args(args), args.host, args.port))
