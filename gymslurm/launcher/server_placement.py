"""Where a job's servers run: the node sets of the stack, the job's node count, a command's node words.

Pure (no I/O). The rule, in one place:

- a server without ``nodes`` runs in the link's process on the link's node (as it always did);
- a server with ``nodes: N`` is *placed*: each of its instances (``replicas``, default 1) spans N
  nodes of its own, taken in the order the servers are listed from the job's nodes ordered with
  the link's node first (:func:`order_nodes`), so the first placed instance's head is the link's node
  and a judge listed after the policy sits on nodes of its own;
- the job asks for as many nodes as the placed instances take (at least 1): ``--nodes=N``, and
  ``--no-kill`` when a server has replicas, so that a node failing under one replica leaves the
  job (and the other replicas) running.

A placed instance's command is given ``{nodes}`` (how many nodes it spans), ``{head_node}`` (the
name of its first node, where rank 0 serves) and ``{node_rank}`` (0 on the head, 1.. on the others),
the words multi-node vLLM (``--nnodes``, ``--node-rank``, ``--master-addr``) and SGLang
(``--nnodes``, ``--node-rank``, ``--dist-init-addr``) take; ``{host}`` is the node's own name there,
so a server binds where the other nodes reach it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gymslurm.errors import ConfigError
from gymslurm.launcher.settings import ServerSettings
from gymslurm.launcher.settings_sections import gpus_in_directives


@dataclass(frozen=True)
class Instance:
    """One instance of a server: its replica number and the job's node indices it spans."""

    server: str
    replica: int
    nodes: tuple[int, ...]  # indices into order_nodes(...); () = in the link's process

    @property
    def placed(self) -> bool:
        """Whether it runs as ``srun --overlap`` steps on nodes of its own."""
        return bool(self.nodes)


def label(name: str, replica: int, replicas: int) -> str:
    """The name of one replica in logs, the ledger and the supervision channel (``policy-r1``)."""
    return name if replicas == 1 else f"{name}-r{replica}"


def instances(servers: Sequence[ServerSettings]) -> list[Instance]:
    """Every instance of every server, in the order they start, with the node indices each spans."""
    found, next_node = [], 0
    for server in servers:
        for replica in range(server.replicas):
            if server.nodes is None:
                found.append(Instance(server.name, replica, ()))
                continue
            found.append(Instance(server.name, replica, tuple(range(next_node, next_node + server.nodes))))
            next_node += server.nodes
    return found


def job_node_count(servers: Sequence[ServerSettings]) -> int:
    """How many nodes the job needs: those its placed instances span, at least 1."""
    return max(1, sum((s.nodes or 0) * s.replicas for s in servers))


def node_gpus(servers: Sequence[ServerSettings]) -> list[int]:
    """GPUs each node of the job needs, the link's node first: its in-process servers' (every replica
    runs there) plus, on every node a placed instance spans, that instance's ``gpus``."""
    need = [0] * job_node_count(servers)
    need[0] = sum(s.gpus * s.replicas for s in servers if s.nodes is None)
    gpus = {s.name: s.gpus for s in servers}
    for instance in instances(servers):
        for index in instance.nodes:
            need[index] += gpus[instance.server]
    return need


def device_slices(servers: Sequence[ServerSettings], visible: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The GPUs each instance in the link's process sees, by its label: the job's ``visible`` devices
    (``CUDA_VISIBLE_DEVICES`` of the link) dealt in start order, ``gpus`` each, so two servers on one
    node do not share a device. Empty when no such server asks for GPUs or the devices are too few
    (each then sees what the link sees, as a server without ``gpus`` does). A server whose ``env``
    sets ``CUDA_VISIBLE_DEVICES`` keeps its own and is dealt none. A placed instance's steps get
    their devices from Slurm."""
    wanted = [
        (label(s.name, replica, s.replicas), s.gpus)
        for s in servers
        if s.nodes is None and s.gpus and "CUDA_VISIBLE_DEVICES" not in s.env
        for replica in range(s.replicas)
    ]
    if not wanted or sum(gpus for _, gpus in wanted) > len(visible):
        return {}
    slices, at = {}, 0
    for name, gpus in wanted:
        slices[name] = tuple(visible[at : at + gpus])
        at += gpus
    return slices


def gpus_per_node(servers: Sequence[ServerSettings], declared: int) -> int:
    """The GPUs per node the job asks for (Slurm's ``--gres`` is per node): ``declared`` (slurm.gpus or
    a ``--gres``/``--gpus`` directive) when set, else what the servers' ``gpus`` need on their busiest
    node; a declared count below that need is refused, naming the node that needs more."""
    need = node_gpus(servers)
    most = max(need)
    if declared and declared < most:
        node = need.index(most)
        raise ConfigError(
            f"the servers need {most} GPUs on node {node + 1} of the job (servers[].gpus, docs/servers.md, "
            f"'Placement'), but the job asks for {declared} per node (slurm.gpus or a --gres directive): "
            f"raise it to {most} or leave it unset, and the job asks for what the servers need"
        )
    return declared or most


def gres_directive(servers: Sequence[ServerSettings], gpus: int, extra: Sequence[str]) -> list[str]:
    """``--gres=gpu:N`` per node for the link script: ``slurm.gpus`` (``gpus``) or the servers' need;
    none when ``slurm.extra_directives`` asks for GPUs itself (checked against the need, not doubled)."""
    written = gpus_in_directives(list(extra))
    per_node = gpus_per_node(servers, gpus or written)
    return [f"--gres=gpu:{per_node}"] if per_node and not written else []


def job_gpus(servers: Sequence[ServerSettings], declared: int) -> int:
    """GPUs the whole job holds: :func:`gpus_per_node` on every node it asks for (GPU-hours count these)."""
    return gpus_per_node(servers, declared) * job_node_count(servers)


def placement_directives(servers: Sequence[ServerSettings], extra: Sequence[str]) -> list[str]:
    """The ``#SBATCH`` options the stack asks for (``--nodes=N``, ``--no-kill``), or [] for a one-node stack.

    A ``--nodes``/``-N`` of ``slurm.extra_directives`` beside a placed stack is refused: the stack
    says how many nodes it needs.
    """
    if not any(s.nodes is not None for s in servers):
        return []
    for line in extra:
        words = line.removeprefix("#SBATCH").split()
        if any(w == "-N" or w.startswith(("--nodes", "-N")) for w in words):
            raise ConfigError(
                f"slurm.extra_directives has {line.strip()!r}, but the servers place instances on nodes of "
                f"their own and need --nodes={job_node_count(servers)} (docs/servers.md, 'Placement'): "
                "remove it"
            )
    replicated = any(s.replicas > 1 for s in servers)
    return [f"--nodes={job_node_count(servers)}", *(["--no-kill"] if replicated else [])]


def order_nodes(hostnames: Sequence[str], batch_host: str) -> list[str]:
    """The job's nodes, the link's own first (Slurm lists them sorted; the batch host may not be first)."""
    rest = [name for name in hostnames if name != batch_host]
    return [batch_host, *rest] if batch_host in hostnames else list(hostnames)


def node_names(instance: Instance, nodes: Sequence[str]) -> list[str]:
    """The node names ``instance`` spans, from the job's ordered nodes; refused when there are too few."""
    if instance.nodes and instance.nodes[-1] >= len(nodes):
        raise ConfigError(
            f"server {instance.server!r} (replica {instance.replica}) needs node {instance.nodes[-1] + 1} "
            f"of the job, which has {len(nodes)} ({', '.join(nodes)}): the job was not given --nodes="
            f"{instance.nodes[-1] + 1} or more"
        )
    return [nodes[index] for index in instance.nodes]


def node_words(text: str, nodes: Sequence[str], rank: int) -> str:
    """``{nodes}``, ``{head_node}`` and ``{node_rank}`` in one command item or env value."""
    if not nodes:
        return text
    return (
        text.replace("{nodes}", str(len(nodes)))
        .replace("{head_node}", nodes[0])
        .replace("{node_rank}", str(rank))
    )


def step_head(node: str, step_name: str) -> list[str]:
    """The ``srun`` words that run a command as one step of the job on ``node``, sharing its allocation."""
    return ["srun", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}", f"--job-name={step_name}"]
