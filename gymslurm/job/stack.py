"""A link's stack: every instance of every server started in order on its nodes, replicas behind a router.

Where each instance runs is :mod:`gymslurm.launcher.server_placement`'s rule; this module reads the job's
nodes (``scontrol show hostnames $SLURM_JOB_NODELIST``, the link's node first) and starts each
instance with :func:`gymslurm.job.servers.start`. A server with ``replicas: K`` starts its
K replicas (``policy-r0`` ...), then its router (``servers[].router``, vLLM's ``vllm-router`` by
default) on the link's node with one ``--worker-urls`` entry per replica; the router goes by the
server's own name, so ``{servers.NAME.url}`` and the collector's override get the router's URL.
Outside a Slurm allocation (the local backend) every instance runs in the link's process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gymslurm.errors import ConfigError, ServerStartError
from gymslurm.job import servers as server_mod
from gymslurm.launcher import server_placement as placement
from gymslurm.launcher.settings import ServerSettings

Note = Callable[[str, server_mod.RunningServer, str], None]


def _never_held() -> bool:
    return False


def _not_cancelled() -> str | None:
    return None


def _unannounced(_server: server_mod.RunningServer) -> None:
    return None


@dataclass(frozen=True)
class StartHooks:
    """How a start goes on beside others: a suite link starts its stack in a thread while its
    benchmarks' servers and collectors start (job/stack_load.py).

    ``launched``: an instance's processes started (or its ``url`` adopted): its address is known;
    ``held``: True while its ``startup_timeout_s`` must not count yet (the model server it may wait
    on still loads); ``cancelled``: a reason to stop waiting (it is killed and the start fails).
    """

    launched: Callable[[server_mod.RunningServer], None] = _unannounced
    held: Callable[[], bool] = _never_held
    cancelled: Callable[[], str | None] = _not_cancelled


ALONE = StartHooks()


def allocation_nodes() -> list[str]:
    """The job's nodes, the link's own first; [] outside a Slurm allocation."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist or not os.environ.get("SLURM_JOB_ID"):
        return []
    try:
        done = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ServerStartError(f"cannot read the job's nodes (scontrol show hostnames): {error}") from error
    if done.returncode != 0 or not done.stdout.split():
        said = done.stderr.strip()[-300:]
        raise ServerStartError(f"scontrol show hostnames {nodelist} failed ({done.returncode}): {said}")
    return placement.order_nodes(done.stdout.split(), socket.gethostname())


def router_settings(
    server: ServerSettings, replicas: list[server_mod.RunningServer], host: str
) -> ServerSettings:
    """The router of ``server``'s replicas as a server of its own: the replicas' URLs, health-probed."""
    router = server.router
    argv = [
        *router.command,
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--worker-urls",
        *(replica.url for replica in replicas),
        "--policy",
        router.policy,
        *router.extra_args,
        *metrics_port_args(router.extra_args),
    ]
    return ServerSettings(
        name=server.name,
        command=argv,
        host=host,
        health_path="/health",
        probe="health",
        startup_timeout_s=router.startup_timeout_s,
        collector_override=server.collector_override,
        probe_interval_s=server.probe_interval_s,
        probe_timeout_s=server.probe_timeout_s,
        probe_failures=server.probe_failures,
        restart_limit=server.restart_limit,
    )


def metrics_port_args(extra_args: list[str]) -> list[str]:
    """A free port for vllm-router's Prometheus exporter, unless the user named one.

    Why: it binds 29000 by default, so two routers on one node (two runs, two shards of one run)
    clashed: the second exited with "Address already in use" and its link retried (seen in the suite).
    """
    if any(arg.split("=")[0] == "--prometheus-port" for arg in extra_args):
        return []
    return ["--prometheus-port", str(server_mod.free_port("0.0.0.0"))]


def start_stack(
    servers: list[ServerSettings],
    logs: Path,
    shard: int,
    started: list[server_mod.RunningServer],
    *,
    note: Note,
    withheld: frozenset[str],
    hooks: StartHooks = ALONE,
) -> None:
    """Start every server in order, appending each started instance to ``started`` (the caller stops them).

    Raises :class:`ServerStartError` (deterministic for a stack the job cannot hold) on the first
    instance that does not start.
    """
    nodes = allocation_nodes() if any(s.nodes is not None for s in servers) else []
    instances = placement.instances(servers)
    devices = placement.device_slices(servers, visible_devices())
    for wanted in servers:
        if wanted.nodes is not None and wanted.nodes > 1 and not nodes:
            raise ServerStartError(
                f"server {wanted.name!r} spans nodes: {wanted.nodes}, which needs a Slurm allocation of "
                "that many nodes (the local backend runs everything on this host)",
                deterministic=True,
            )
        mine = [i for i in instances if i.server == wanted.name]
        replicas = []
        for instance in mine:
            name = placement.label(wanted.name, instance.replica, wanted.replicas)
            try:
                where = tuple(placement.node_names(instance, nodes)) if nodes and instance.placed else ()
            except ConfigError as error:
                raise ServerStartError(str(error), deterministic=True) from error
            known = {s.name: s for s in started}
            log = logs / f"server-{name}-s{shard:03d}.log"
            server = started_server(
                wanted,
                log,
                hooks,
                started=known,
                withheld=withheld,
                nodes=where,
                label=name,
                devices=devices.get(name, ()),
            )
            started.append(server)
            replicas.append(server)
            _noted(note, server)
        if wanted.replicas > 1:
            host = nodes[0] if nodes and wanted.nodes is not None else wanted.host
            settings = router_settings(wanted, replicas, host)
            log = logs / f"server-{wanted.name}-router-s{shard:03d}.log"
            known = {s.name: s for s in started}
            router = started_server(settings, log, hooks, started=known, withheld=withheld)
            started.append(router)
            _noted(note, router)


def started_server(
    settings: ServerSettings,
    log: Path,
    hooks: StartHooks,
    *,
    started: dict[str, server_mod.RunningServer],
    withheld: frozenset[str],
    nodes: tuple[str, ...] = (),
    label: str = "",
    devices: tuple[str, ...] = (),
) -> server_mod.RunningServer:
    """One instance launched, announced, and probed until healthy (:func:`server_mod.started_yet`:
    every probe of a start alone); its ``startup_timeout_s`` counts from when ``hooks.held`` ends."""
    if settings.command is None:
        adopted = server_mod.start(settings, log)
        hooks.launched(adopted)
        return adopted
    server = server_mod.launch(
        settings, log, None, started, withheld, nodes=nodes, label=label, devices=devices
    )
    hooks.launched(server)
    deadline = time.monotonic() + settings.startup_timeout_s
    while True:
        if (why := hooks.cancelled()) is not None:
            server_mod.kill_now(server)
            raise ServerStartError(f"server {server.name!r} not started: {why}")
        if hooks.held():
            deadline = time.monotonic() + settings.startup_timeout_s
        if server_mod.started_yet(server, deadline):
            return server
        time.sleep(0.2)


def visible_devices() -> list[str]:
    """The GPUs this link sees (Slurm sets ``CUDA_VISIBLE_DEVICES`` for a job with ``--gres=gpu``)."""
    return [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]


def _noted(note: Note, server: server_mod.RunningServer) -> None:
    if server.process is not None:
        where = f" on {', '.join(server.nodes)}" if server.nodes else ""
        where += f" with GPUs {','.join(server.devices)}" if server.devices else ""
        probes = ", ".join(server.probes[-5:])
        note("started", server, f"healthy at {server.url}{where} after {server.startup_s:.1f}s ({probes})")


def stack_lines(servers: list[ServerSettings]) -> list[tuple[str, list[str] | None, str | None]]:
    """What a link starts, for a script's header and ``--dry-run``: each instance's command, as an
    ``srun`` step on its node (``<node I>``: the job's I-th node, the link's being 0) when placed,
    and a replicated server's router (pure)."""
    lines: list[tuple[str, list[str] | None, str | None]] = []
    for instance in placement.instances(servers):
        server = next(s for s in servers if s.name == instance.server)
        if server.command is None:
            lines.append((server.name, None, server.url))
            continue
        name = placement.label(server.name, instance.replica, server.replicas)
        for rank, index in enumerate(instance.nodes or (None,)):
            node = None if index is None else f"<node {index}>"
            command = server_mod.rank_argv(server, rank)
            argv = server_mod.container_argv(server, command, node=node, step_name=f"gs-{name}-{rank}")
            lines.append((f"{name} (rank {rank})" if len(instance.nodes) > 1 else name, argv, None))
        if server.replicas > 1 and instance.replica == server.replicas - 1:
            urls = [f"<{placement.label(server.name, r, server.replicas)}>" for r in range(server.replicas)]
            router = [
                *server.router.command,
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--worker-urls",
                *urls,
                "--policy",
                server.router.policy,
                *server.router.extra_args,
            ]
            lines.append((f"{server.name} (router)", router, None))
    return lines
