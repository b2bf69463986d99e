"""``gymslurm demo-model-server``: the demo stack's OpenAI-compatible model server (docs/servers.md).

Serves :class:`gymslurm.demo.model.ModelApp` on the demo HTTP layer until SIGTERM/SIGINT. With
``--slow-start-s S`` it listens only after S seconds (a model loading its weights), so a job's
start-up probe sees a server that is not ready yet. With ``--checkpoint DIR`` it answers as the
policy that checkpoint holds (its ``accuracy.txt``), so each checkpoint of a watch scores differently.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

from gymslurm.demo.http import start_server
from gymslurm.demo.model import DEFAULT_MODEL, ModelApp, ModelConfig
from gymslurm.demo.ranks import RankGroup, serve_worker
from gymslurm.errors import ConfigError

LISTENING = "gymslurm demo-model-server listening on"
CHECKPOINT_ACCURACY = "accuracy.txt"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gymslurm demo-model-server",
        description="A deterministic OpenAI-compatible model server for the demo stack (no GPU).",
        epilog="Docs: docs/servers.md",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (default 8000)")
    parser.add_argument("--model-name", default=DEFAULT_MODEL, help="the served model's name")
    parser.add_argument("--accuracy", type=float, default=0.8, help="P(a correct answer)")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="a checkpoint folder: the policy is its accuracy.txt (P(a correct answer)), the model "
        "name its folder's (as a real server loads a checkpoint; docs/watch.md)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the answers and the fault draws")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added before every completion")
    parser.add_argument("--http500-rate", type=float, default=0.0, metavar="P", help="P(a 500 'engine dead')")
    parser.add_argument("--die-after", type=int, default=None, metavar="N", help="exit on completion N+1")
    parser.add_argument(
        "--hang-after",
        type=int,
        default=None,
        metavar="N",
        help="wedge the engine at completion N+1: no completion answered, /health and /metrics still are",
    )
    parser.add_argument("--slow-start-s", type=float, default=0.0, help="wait this long before listening")
    parser.add_argument(
        "--slots",
        type=int,
        default=None,
        metavar="N",
        help="serve at most N completions at once, queue the rest (default: no limit)",
    )
    parser.add_argument(
        "--load-factor",
        type=float,
        default=1.0,
        help="with --slots: a completion takes latency x (1 + factor x busy share) (default 1)",
    )
    ranks = parser.add_argument_group("across nodes (as multi-node vLLM and SGLang: demo/ranks.py)")
    ranks.add_argument("--nodes", type=int, default=1, help="ranks of this server, one per node (default 1)")
    ranks.add_argument("--node-rank", type=int, default=0, help="this process's rank: 0 serves (the head)")
    ranks.add_argument("--head-node", default=None, help="the head's host, for ranks >= 1")
    ranks.add_argument("--head-port", type=int, default=None, help="the head's port (default: --port)")
    return parser


async def serve(config: ModelConfig, host: str, port: int, nodes: int = 1) -> int:
    """Serve until SIGTERM or SIGINT (the head of ``nodes`` ranks when more than 1)."""
    app = ModelApp(config, ranks=RankGroup(nodes) if nodes > 1 else None)
    try:
        server, connections = await start_server(app.handle, host, port)
    except OSError as error:
        raise ConfigError(f"cannot listen on {host}:{port}: {error.strerror}. Pick another --port.") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"{LISTENING} http://{host}:{server.sockets[0].getsockname()[1]}", flush=True)
    await stop.wait()
    server.close()
    for connection in list(connections):
        connection.close()
    await server.wait_closed()
    parts = f", {app.ranks.parts_asked} with every worker rank's part" if app.ranks is not None else ""
    print(f"gymslurm demo-model-server: stopped after {app.completions} completions{parts}", file=sys.stderr)
    return 0


def checkpoint_accuracy(checkpoint: Path) -> float:
    """The accuracy a demo checkpoint folder holds (``accuracy.txt``): the policy of that checkpoint."""
    path = checkpoint / CHECKPOINT_ACCURACY
    try:
        text = path.read_text().strip()
    except OSError as error:
        raise ConfigError(
            f"--checkpoint {checkpoint}: cannot read {path} ({error.strerror}); a demo checkpoint is a "
            f"folder holding {CHECKPOINT_ACCURACY} with one number in [0, 1]"
        ) from None
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{path}: {text[:40]!r} is not a number in [0, 1]") from None


def main(argv: list[str]) -> int:
    """Entry point of ``gymslurm demo-model-server``."""
    args = _parser().parse_args(argv)
    if args.checkpoint is not None:
        args.accuracy = checkpoint_accuracy(args.checkpoint)
    config = ModelConfig(
        model_name=args.model_name,
        accuracy=args.accuracy,
        seed=args.seed,
        latency_ms=args.latency_ms,
        http500_rate=args.http500_rate,
        die_after=args.die_after,
        hang_after=args.hang_after,
        slots=args.slots,
        load_factor=args.load_factor,
    )
    problems = config.problems()
    if args.slow_start_s < 0:
        problems.append(f"--slow-start-s must be >= 0, got {args.slow_start_s}")
    if args.nodes < 1 or not 0 <= args.node_rank < args.nodes:
        problems.append(f"--node-rank must be within 0..--nodes-1 ({args.nodes}), got {args.node_rank}")
    if args.node_rank > 0 and not args.head_node:
        problems.append("a worker rank (--node-rank >= 1) needs --head-node, the head's host")
    if problems:
        raise ConfigError("invalid demo-model-server options: " + "; ".join(problems) + ". See --help.")
    if args.slow_start_s:
        print(f"gymslurm demo-model-server: loading (slow start, {args.slow_start_s}s)", flush=True)
        time.sleep(args.slow_start_s)
    if args.node_rank > 0:
        head = f"http://{args.head_node}:{args.head_port or args.port}"
        return asyncio.run(serve_worker(args.node_rank, args.host, args.port, head))
    return asyncio.run(serve(config, args.host, args.port, args.nodes))
