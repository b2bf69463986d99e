"""Adaptive concurrency against a model server with a capacity, the fixed settings measured in the same run.

The stack is the demo stack with a capacity: ``gymslurm demo-model-server --slots S --latency-ms L``
(a batching server: S completions at once, a FIFO queue past them, latency that grows with load)
and ``gymslurm demo-server --policy-url`` in front of it, both real processes on loopback. The
collector's own dispatch loop (``collector.DispatchLoop`` with the real ``EnvironmentClient``)
sends N episodes at each fixed concurrency of 8, 32, 128 and 512, then with the adaptive limit
(``latency``, and ``metrics``: the model server's ``vllm:num_requests_waiting``), and prints for
each the throughput, the p50/p99 latency of a request, and the largest model-server queue seen.

Target (issue 22): adaptive throughput >= 0.95 of the best fixed setting's, with a p99 no worse
than that setting's, and a bounded queue. Run from the repository root:
    python bench/adaptive.py [--n 3000] [--slots 32] [--latency-ms 250]

``--vllm`` puts a real vLLM in the model server's place (issue 31): docs/servers.md's "vLLM on CPU"
recipe (``launchers/vllm-up.sh``'s cached venv and tiny model, ``--max-num-seqs 32``; started and
stopped with its whole process group by tests/vllm/harness.py), the fixed settings 4, 8, 16, 32
and 64, the adaptive ones capped at 64, all against the same vLLM in the same run:
    python bench/adaptive.py --vllm [--n 300] [--rounds 3]
``--rounds R`` interleaves the settings R times, each round in another order, and prints each
figure's median: on a shared machine the load drifts over minutes, and settings measured one after
another each met a different load (fixed 16 measured at 0.48 of fixed 32 and fixed 8 at 0.71 in one
run). Each adaptive mode keeps one limit across its rounds, as one long collection would; with
``--fresh-limit`` it starts again every round, so each round pays its slow start and the median
cannot leave the start-up out (the stricter reading). Each setting's row ends with every round's
figure: on 2 cores shared with CPU vLLM one fixed setting measured 101 and 38 rollouts/s in two
rounds of one run, nothing else running.
``--max-tokens N`` asks for answers of up to N tokens (the demo Environment Server's
``--policy-max-tokens``; 16 by default): with 16, CPU vLLM of the tiny model is not what bounds the
bench (polls find it running a few of the requests out, none waiting; the front ends' Python is),
with 128 it is, as a model under evaluation is (docs/servers.md, the quiet machine's runs).
``--vllm-url URL`` uses a vLLM already running there instead (bench/gpu_vllm.sh: a GPU one).
``--trace FILE`` writes each adaptive mode's metrics polls (running, waiting) and, each half second,
its limit and what is out, as JSON lines: what the limit did, not only where it ended. ``--only``
measures some settings while iterating; a figure against the best fixed setting needs them all.

The default model server (32 slots, 250 ms) is what bounds the throughput, as a model server does
in an evaluation. With a fast one (``--latency-ms 40``: 800 completions/s) this machine's CPU and the
demo Environment Server in front are what fill first (fixed 128 gives under half of fixed 32 there,
the model's queue empty): that measures the bench, not the adaptive limit against a model server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from gymslurm.collector.collect import DispatchLoop, initial_counters, pending_order
from gymslurm.collector.view import RunView
from gymslurm.concurrency import AdaptiveLimit
from gymslurm.dispatch import EnvironmentClient
from gymslurm.dispatch.calls import parse_queue_length, watch_model_queue
from gymslurm.job.servers import RunningServer
from gymslurm.selection import BudgetPolicy, SavedOutcome, select_rollout

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.vllm.harness: the recipe's vLLM, shared with the vLLM tests


def start(argv: list[str], banner: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "gymslurm", *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if banner not in line:
        process.kill()
        raise SystemExit(f"{argv[0]} did not start: {line!r}")
    return process, line.split()[-1]


class Timed:
    """The real client, timing each episode."""

    def __init__(self, client: EnvironmentClient) -> None:
        self.client, self.latencies = client, []

    async def run(self, url: str, episode: Any, task: Any, *, indices: tuple[int, int] = (0, 0)) -> Any:
        t0 = time.monotonic()
        outcome = await self.client.run(url, episode, task, indices=indices)
        self.latencies.append(time.monotonic() - t0)
        return outcome


async def measure(
    env_url: str,
    metrics_url: str,
    n: int,
    cap: int,
    mode: str,
    *,
    limit: AdaptiveLimit | None = None,
    trace: Any = None,
) -> dict[str, float]:
    policy = BudgetPolicy(max_rollout_attempts=3)
    tasks = [
        {
            "_ng_rollout_id": f"r{i}",
            "task_id": {"taskset": "arith", "task_id": str(i)},
            "task_input": {"a": i % 97, "b": 3, "op": "+"},
        }
        for i in range(n)
    ]
    states = [select_rollout(0, [], policy) for _ in range(n)]
    view = RunView(
        tasks=tasks,
        reserved=[0] * n,
        states=states,
        policy=policy,
        run_id="run-bench",
        identity_verified=True,
        historical_failed_attempts=0,
    )
    client = Timed(EnvironmentClient(concurrency=cap, run_id="run-bench", route_failures=False))

    def reserve(index: int) -> int:
        view.reserved[index] += 1
        return view.reserved[index] - 1

    def save(index: int, attempt: int, outcome: Any) -> SavedOutcome:
        return SavedOutcome(attempt=attempt, kind="result", line=0, reward=1.0)

    loop = DispatchLoop(
        view=view,
        client=client,
        reserve=reserve,
        save=save,
        urls=[env_url] * n,
        counters=initial_counters(view.states),
        concurrency=cap,
        retry_in_invocation=False,
        limit=limit,
    )
    peak_queue = 0

    async def sample_queue() -> None:
        nonlocal peak_queue
        async with httpx.AsyncClient(trust_env=False) as http:
            while True:
                waiting = parse_queue_length((await http.get(metrics_url)).text) or 0
                peak_queue = max(peak_queue, waiting)
                await asyncio.sleep(0.2)

    t0 = time.monotonic()

    def note(**fields: Any) -> None:
        """One line of the limit's trace (``--trace``): what it was told and where it stood."""
        if trace is not None and loop.limit is not None:
            fields.update(t=round(time.monotonic() - t0, 2), mode=mode, out=loop.counters.in_flight)
            trace.write(json.dumps({**fields, "limit": loop.limit.current}) + "\n")

    def tell(load: Any) -> None:
        loop.server_queue(load)
        note(running=load.running, waiting=load.waiting, kv=load.kv_usage)

    async def sample_limit() -> None:
        while True:
            note()
            await asyncio.sleep(0.5)

    samplers = [asyncio.create_task(sample_queue())]
    if trace is not None:
        samplers.append(asyncio.create_task(sample_limit()))
    if mode == "metrics":
        # Polled as often as the collector polls (1 s), so the figure is what a collection gets.
        samplers.append(asyncio.create_task(watch_model_queue([metrics_url], tell)))
    await loop.run(pending_order(view, view.states, False))
    wall = time.monotonic() - t0
    for task in samplers:
        task.cancel()
    await client.client.aclose()
    lat = sorted(client.latencies)
    end_limit = float(loop.limit.current) if loop.limit else float(cap)
    return {
        "rate": n / wall,
        "p50": statistics.median(lat),
        "p99": lat[int(0.99 * (len(lat) - 1))],
        "queue": peak_queue,
        "limit": end_limit,
    }


def parse_args() -> argparse.Namespace:
    """The bench's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=250.0)
    parser.add_argument("--rounds", type=int, default=1, help="settings interleaved, the median of each")
    parser.add_argument(
        "--fresh-limit",
        action="store_true",
        help="each adaptive mode starts from its first limit every round (each pays its slow start)",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=16, help="each model call's max_tokens (the demo server's flag)"
    )
    parser.add_argument("--vllm", action="store_true", help="a real vLLM (CPU) as the model server")
    parser.add_argument("--vllm-url", default=None, help="a vLLM already serving there (model 'tiny')")
    parser.add_argument(
        "--only",
        default=None,
        help="only these settings, while iterating: e.g. 'fixed 32,metrics' (a final figure needs all)",
    )
    parser.add_argument(
        "--trace", default=None, help="write the adaptive limits' moves and polls here (JSON lines)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # kill/pkill (SIGTERM) ends the bench through its `finally`, which stops vLLM and the demo servers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    vllm = None
    if args.vllm_url:
        model, model_url, name = None, args.vllm_url.rstrip("/"), "tiny"
        what = f"vLLM at {model_url}"
    elif args.vllm:
        vllm, model, name = start_vllm(), None, "tiny"
        model_url, what = vllm.url, "vLLM (CPU, tiny model, --max-num-seqs 32)"
    else:
        model, model_url = start(
            [
                "demo-model-server",
                "--port",
                "0",
                "--slots",
                str(args.slots),
                "--latency-ms",
                str(args.latency_ms),
            ],
            "listening on",
        )
        name, what = "demo-arith-policy", f"demo: {args.slots} slots, {args.latency_ms:g} ms"
    settings, cap = bench_settings(bool(args.vllm or args.vllm_url), args.only)
    limits = {mode: AdaptiveLimit(cap=cap) for mode in ("latency", "metrics")}  # one long collection each
    trace = open(args.trace, "w") if args.trace else None  # noqa: SIM115 (closed at the end)
    env, env_url = start(
        [
            "demo-server",
            "--port",
            "0",
            "--policy-url",
            model_url,
            "--model-name",
            name,
            "--policy-max-tokens",
            str(args.max_tokens),
        ],
        "listening on",
    )
    try:
        runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in settings}
        for round_ in range(args.rounds):  # each round in another order: the load drifts, not the order
            shift = round_ % len(settings)
            for label, setting, mode in settings[shift:] + settings[:shift]:
                if args.fresh_limit and mode in limits:
                    limits[mode] = AdaptiveLimit(cap=cap)
                limit = limits.get(mode)
                row = asyncio.run(
                    measure(env_url, f"{model_url}/metrics", args.n, setting, mode, limit=limit, trace=trace)
                )
                runs[label].append(row)
                print(f"  round {round_ + 1}: {label}: {row['rate']:.1f} rollouts/s", flush=True)
        rows = {label: median_row(rounds) for label, rounds in runs.items()}
    finally:
        if trace is not None:
            trace.close()
        for process in (env, model):
            if process is not None:
                process.terminate()
                process.wait()
        if vllm is not None:
            from tests.vllm.harness import stop_vllm

            stop_vllm(vllm)
    best_name = max((k for k in rows if k.startswith("fixed")), key=lambda k: rows[k]["rate"])
    best = rows[best_name]
    each = "a fresh adaptive limit each round" if args.fresh_limit else "one adaptive limit across the rounds"
    print(
        f"model server: {what}; {args.rounds} rounds of {args.n} episodes per setting (max_tokens "
        f"{args.max_tokens}), medians; {each}"
    )
    print(
        f"{'setting':28} {'rollouts/s':>10} {'÷ best':>7} {'p50 ms':>8} {'p99 ms':>8} {'p99 ÷ best':>10} "
        f"{'max queue':>9} {'end limit':>9} {'rounds (rollouts/s)':>20}"
    )
    for name, row in rows.items():
        spread = " ".join(f"{r['rate']:.0f}" for r in runs[name])  # each round's: the noise in view
        print(
            f"{name:28} {row['rate']:10.1f} {row['rate'] / best['rate']:7.2f} {row['p50'] * 1e3:8.0f} "
            f"{row['p99'] * 1e3:8.0f} {row['p99'] / best['p99']:10.2f} {row['queue']:9.0f} "
            f"{row['limit']:9.0f}  {spread:>20}"
        )
    print(f"best fixed setting: {best_name}; target: adaptive >= 0.95 of its rate, p99 <= its p99")


def bench_settings(vllm: bool, only: str | None) -> tuple[list[tuple[str, int, str]], int]:
    """The settings measured (label, concurrency or cap, mode) and the adaptive modes' cap; ``only``
    (comma-separated labels or modes) keeps some of them, for iterating."""
    fixed, cap = ((4, 8, 16, 32, 64), 64) if vllm else ((8, 32, 128, 512), 512)
    settings = [(f"fixed {f}", f, "fixed") for f in fixed]
    settings += [(f"adaptive {mode} (cap {cap})", cap, mode) for mode in ("latency", "metrics")]
    if only:
        wanted = {part.strip() for part in only.split(",")}
        settings = [s for s in settings if s[0] in wanted or s[2] in wanted]
    return settings, cap


def median_row(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over a setting's rounds (the end limit: its last round's)."""
    row = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    row["limit"] = rounds[-1]["limit"]
    return row


def start_vllm() -> RunningServer:
    """docs/servers.md's "vLLM on CPU" server, installed if needed, started in a session of its own."""
    from tests.vllm.harness import ensure_vllm
    from tests.vllm.harness import start_vllm as start_recipe

    log = Path(tempfile.mkdtemp(prefix="bench-vllm-")) / "vllm.log"
    print(f"starting vLLM (log {log}; 80-180 s)", flush=True)
    return start_recipe(ensure_vllm(), log, name="policy")


if __name__ == "__main__":
    main()
