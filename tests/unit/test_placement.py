"""Where a job's servers run (launcher/server_placement.py) and how each placed step is launched."""

from __future__ import annotations

import pytest

from gymslurm.errors import ConfigError
from gymslurm.job.servers import container_argv
from gymslurm.job.stack import router_settings, stack_lines
from gymslurm.launcher import server_placement as placement
from gymslurm.launcher.settings import ServerSettings


def server(name: str, **extra: object) -> ServerSettings:
    return ServerSettings.model_validate({"name": name, "command": ["serve", "--host", "{host}"], **extra})


def test_a_server_without_nodes_runs_in_the_links_process() -> None:
    """No ``nodes``: one instance with no node of its own (the link's process, as before)."""
    assert placement.instances([server("env")]) == [placement.Instance("env", 0, ())]


def test_placed_instances_take_nodes_of_their_own_in_order() -> None:
    """A two-node policy takes nodes 0-1 (its head is the link's node), a judge after it node 2."""
    found = placement.instances([server("policy", nodes=2), server("env"), server("judge", nodes=1)])
    assert [(i.server, i.nodes) for i in found] == [("policy", (0, 1)), ("env", ()), ("judge", (2,))]


def test_each_replica_spans_its_own_node_set() -> None:
    """replicas: 3 of a one-node server: three instances on nodes 0, 1, 2, labelled NAME-rI."""
    found = placement.instances([server("policy", nodes=1, replicas=3)])
    assert [i.nodes for i in found] == [(0,), (1,), (2,)]
    assert [placement.label("policy", i.replica, 3) for i in found] == ["policy-r0", "policy-r1", "policy-r2"]


def test_the_job_asks_for_the_nodes_the_stack_takes_and_no_kill_with_replicas() -> None:
    """--nodes is what the placed instances span; --no-kill only when a server has replicas."""
    assert placement.placement_directives([server("env")], []) == []
    assert placement.placement_directives([server("policy", nodes=2)], []) == ["--nodes=2"]
    assert placement.placement_directives([server("policy", nodes=2, replicas=2)], []) == [
        "--nodes=4",
        "--no-kill",
    ]


def test_an_extra_nodes_directive_beside_a_placed_stack_is_refused() -> None:
    """The stack says how many nodes it needs: a --nodes in extra_directives is refused with the number."""
    with pytest.raises(ConfigError, match="need --nodes=2"):
        placement.placement_directives([server("policy", nodes=2)], ["--nodes=1"])


def test_the_links_node_comes_first() -> None:
    """Slurm lists the job's nodes sorted; the batch host (the link's) is put first."""
    assert placement.order_nodes(["a1", "a2", "a3"], "a2") == ["a2", "a1", "a3"]


def test_a_job_with_too_few_nodes_is_refused_with_the_count() -> None:
    """An instance on node 3 of a two-node job: refused, naming the --nodes it needs."""
    instance = placement.Instance("judge", 0, (2,))
    with pytest.raises(ConfigError, match="--nodes=3"):
        placement.node_names(instance, ["a1", "a2"])


def test_the_node_words_of_a_multi_node_command() -> None:
    """{nodes}, {head_node} and {node_rank} as multi-node vLLM and SGLang take them."""
    words = "--nnodes {nodes} --node-rank {node_rank} --master-addr {head_node}"
    assert placement.node_words(words, ["a2", "a3"], 1) == "--nnodes 2 --node-rank 1 --master-addr a2"


def test_a_placed_server_runs_as_an_overlapping_step_on_its_node() -> None:
    """No container: ``srun --overlap --nodes=1 --ntasks=1 --nodelist=NODE --job-name=STEP -- ARGV``."""
    argv = container_argv(server("policy"), ["serve"], node="a3", step_name="gs-policy-1")
    assert argv == [
        "srun",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=a3",
        "--job-name=gs-policy-1",
        "--",
        "serve",
    ]


def test_a_placed_pyxis_server_is_one_srun_with_its_node_and_image() -> None:
    """Pyxis on a placed server: the container flags join the same step (one srun, not two)."""
    box = {"runtime": "pyxis", "image": "vllm.sqsh"}
    argv = container_argv(server("policy", container=box), ["serve"], node="a2", step_name="gs-policy-0")
    assert argv.count("srun") == 1 and "--nodelist=a2" in argv and "--container-image=vllm.sqsh" in argv


def test_ranks_above_zero_run_the_worker_command() -> None:
    """worker_command (multi-node vLLM's --headless workers) runs on ranks >= 1; the dry run shows each."""
    policy = server("policy", nodes=2, worker_command=["serve", "--headless"])
    lines = stack_lines([policy])
    assert [name for name, _, _ in lines] == ["policy (rank 0)", "policy (rank 1)"]
    assert "--headless" not in (lines[0][1] or []) and (lines[1][1] or [])[-1] == "--headless"
    assert "--nodelist=<node 1>" in (lines[1][1] or [])


def test_a_worker_command_without_several_nodes_is_refused() -> None:
    """worker_command only means something on node ranks >= 1."""
    with pytest.raises(ValueError, match="set nodes >= 2"):
        server("policy", worker_command=["serve"])


def test_the_dry_run_lists_each_replica_and_its_router() -> None:
    """replicas: 2 shows two replica steps and the router naming both."""
    lines = stack_lines([server("policy", nodes=1, replicas=2)])
    assert [name for name, _, _ in lines] == ["policy-r0", "policy-r1", "policy (router)"]
    router = lines[2][1] or []
    assert router[router.index("--worker-urls") + 1 :][:2] == ["<policy-r0>", "<policy-r1>"]
    assert router[router.index("--policy") + 1] == "power_of_two"


def test_the_router_goes_by_the_servers_name_and_takes_its_override() -> None:
    """The router is the server the collector and later servers reach: its name, its collector_override."""
    policy = server("policy", replicas=2, collector_override="+policy_base_url")
    settings = router_settings(policy, [], "127.0.0.1")
    assert (settings.name, settings.collector_override, settings.health_path) == (
        "policy",
        "+policy_base_url",
        "/health",
    )


def test_each_router_gets_a_free_port_for_its_metrics_unless_one_is_named() -> None:
    """vllm-router's Prometheus exporter binds 29000 by default: two routers on one node clashed."""
    argv = router_settings(server("policy", replicas=2), [], "127.0.0.1").command
    port = int(argv[argv.index("--prometheus-port") + 1])
    assert port != 29000 and port > 0
    named = server("policy", replicas=2, router={"extra_args": ["--prometheus-port", "9100"]})
    argv = router_settings(named, [], "127.0.0.1").command
    assert argv.count("--prometheus-port") == 1 and argv[argv.index("--prometheus-port") + 1] == "9100"


# (name, servers, GPUs needed on each node of the job)
NODE_GPUS = [
    ("no GPU anywhere", [dict(name="env")], [0]),
    (
        "in-process servers add up on the link's node",
        [dict(name="policy", gpus=2), dict(name="judge", gpus=1)],
        [3],
    ),
    ("in-process replicas all run on the link's node", [dict(name="policy", gpus=2, replicas=2)], [4]),
    ("a placed server takes its gpus on each node it spans", [dict(name="policy", nodes=2, gpus=4)], [4, 4]),
    (
        "the first placed head shares the link's node with in-process servers",
        [dict(name="policy", nodes=2, gpus=4), dict(name="env", gpus=1)],
        [5, 4],
    ),
    ("replicas on node sets of their own", [dict(name="policy", nodes=1, replicas=3, gpus=2)], [2, 2, 2]),
    (
        "a judge apart from the policy",
        [dict(name="policy", nodes=2, gpus=4), dict(name="judge", nodes=1, gpus=1)],
        [4, 4, 1],
    ),
]


@pytest.mark.parametrize(("name", "servers", "need"), NODE_GPUS, ids=[r[0] for r in NODE_GPUS])
def test_the_gpus_each_node_needs(name: str, servers: list[dict[str, object]], need: list[int]) -> None:
    """Each row: the servers' ``gpus`` on the nodes they run on, the link's node first."""
    assert placement.node_gpus([server(**spec) for spec in servers]) == need  # type: ignore[arg-type]


def test_the_job_asks_per_node_for_what_its_busiest_node_needs() -> None:
    """``--gres=gpu:N`` follows from the servers' gpus (Slurm's --gres is per node); slurm.gpus or a
    --gres directive stand when they cover the need, and the whole job's GPUs are per node × nodes."""
    stack = [server("policy", nodes=2, gpus=4), server("env", gpus=1)]
    assert placement.gres_directive(stack, 0, []) == ["--gres=gpu:5"]
    assert placement.gres_directive(stack, 8, []) == ["--gres=gpu:8"]
    assert placement.gres_directive(stack, 0, ["--gres=gpu:a100:6"]) == []  # written by the user
    assert placement.gres_directive([server("env")], 0, []) == []
    assert placement.job_gpus(stack, 0) == 10


def test_a_declared_gpu_count_below_the_servers_need_is_refused() -> None:
    """slurm.gpus (or a --gres directive) below what a node needs: refused, naming the node and the count."""
    stack = [server("policy", nodes=2, gpus=4), server("env", gpus=1)]
    with pytest.raises(ConfigError, match=r"need 5 GPUs on node 1 of the job.*asks for 4 per node"):
        placement.gres_directive(stack, 4, [])
    with pytest.raises(ConfigError, match="need 5 GPUs"):
        placement.gres_directive(stack, 0, ["--gres=gpu:2"])


DEVICE_CASES = [
    (
        "two servers on the link's node get devices of their own, in start order",
        [dict(name="policy", gpus=2), dict(name="judge", gpus=1)],
        ["0", "1", "2", "3"],
        {"policy": ("0", "1"), "judge": ("2",)},
    ),
    (
        "each in-process replica its own",
        [dict(name="policy", gpus=1, replicas=2)],
        ["4", "5"],
        {"policy-r0": ("4",), "policy-r1": ("5",)},
    ),
    (
        "a server without gpus and a placed one are not dealt any",
        [dict(name="env"), dict(name="policy", nodes=1, gpus=4), dict(name="judge", gpus=1)],
        ["0"],
        {"judge": ("0",)},
    ),
    ("too few devices: none dealt (each sees the link's)", [dict(name="policy", gpus=2)], ["0"], {}),
    (
        "a server that sets its own CUDA_VISIBLE_DEVICES is dealt none",
        [dict(name="policy", gpus=2, env={"CUDA_VISIBLE_DEVICES": "3"}), dict(name="judge", gpus=1)],
        ["0", "1"],
        {"judge": ("0",)},
    ),
    ("no GPUs asked for", [dict(name="env")], ["0", "1"], {}),
]


@pytest.mark.parametrize(
    ("name", "servers", "visible", "dealt"), DEVICE_CASES, ids=[c[0] for c in DEVICE_CASES]
)
def test_the_gpus_each_in_process_server_sees(
    name: str, servers: list[dict[str, object]], visible: list[str], dealt: dict[str, tuple[str, ...]]
) -> None:
    """Each row: the link's visible devices dealt to its in-process instances by their ``gpus``."""
    assert placement.device_slices([server(**spec) for spec in servers], visible) == dealt  # type: ignore[arg-type]
