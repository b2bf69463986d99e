"""NeMo Gym's server names and types, resolved in the head server's configuration (collector/routing.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from gymslurm.collector.routing import resolve_routing
from gymslurm.dispatch import Completed, EnvironmentClient
from gymslurm.errors import ConfigError
from gymslurm.records import EpisodeId
from gymslurm.settings import load_settings

BASE = ["+input_jsonl_fpath=/data/in.jsonl", "+output_jsonl_fpath=/runs/out.jsonl"]
AGENT = {"type": "responses_api_agents", "name": "weather_agent"}
OTHER_AGENT = {"type": "responses_api_agents", "name": "math_agent"}
# NeMo Gym's global config as its head server answers it (trimmed): three servers of three types.
CONFIG: dict[str, Any] = {
    "head_server": {"host": "10.0.0.5", "port": 11000},
    "weather_env": {
        "environment_servers": {
            "single_agent_turn": {"host": "127.0.0.1", "port": 18313, "agent_server": AGENT}
        }
    },
    "weather_legacy_env": {
        "environment_servers": {
            "legacy_agent": {"host": "0.0.0.0", "port": 18314, "agent_server": OTHER_AGENT}
        }
    },
    "weather_sat_env": {
        "environment_servers": {"single_agent_turn_legacy": {"host": "node7", "port": 18315}}
    },
    "odd_env": {"environment_servers": {"my_own_server": {"host": "node8", "port": 1}}},
}


def routing(*overrides: str, config: dict[str, Any] = CONFIG) -> Any:
    return resolve_routing(load_settings([*BASE, *overrides])[0], config)


def test_a_legacy_mode_name_is_the_servers_address_and_its_type_the_protocol() -> None:
    """Legacy mode +environment_server_name=NAME: NAME's host:port, and its type's protocol."""
    route = routing("+environment_routing_mode=legacy", "+environment_server_name=weather_sat_env").default
    assert (route.url, route.protocol) == ("http://node7:18315", "legacy_reply")
    assert route.origin.name == "weather_sat_env"


def test_a_wildcard_host_is_the_head_servers_host() -> None:
    """A server listening on 0.0.0.0 is reached at the host of the head server the config came from."""
    route = routing(
        "+environment_server_name=weather_legacy_env", "+head_server.host=10.0.0.5", "+head_server.port=11000"
    ).default
    assert (route.url, route.protocol) == ("http://10.0.0.5:18314", "legacy_agent")


def test_routes_to_servers_of_different_types_mix_protocols_in_one_run() -> None:
    """+environment_server_routes={taskset: NAME}: each taskset's server speaks its own type's protocol."""
    found = routing("+environment_server_routes={typed: weather_env, relay: weather_legacy_env}")
    assert found.default is None
    assert found.protocols() == {
        "http://127.0.0.1:18313": "episode",
        "http://127.0.0.1:18314": "legacy_agent",
    }
    assert found.route_for("relay").origin.server_type == "legacy_agent"


def test_a_server_addressed_by_url_gets_its_protocol_from_its_declared_type() -> None:
    """+environment_server_url: the block listening there names the type, and so the protocol."""
    route = routing("+environment_server_url=http://localhost:18313").default
    assert route.protocol == "episode" and route.origin.name == "weather_env"
    assert routing("+environment_server_url=http://node7:18315").default.protocol == "legacy_reply"


def test_an_explicit_protocol_wins_over_the_declared_type() -> None:
    """+environment_protocol= is kept as given, whatever the server's type says."""
    route = routing(
        "+environment_server_url=http://node7:18315", "+environment_protocol=legacy_agent"
    ).default
    assert route.protocol == "legacy_agent"


def test_a_server_no_config_names_speaks_the_typed_protocol() -> None:
    """gymslurm's demo server (not in NeMo Gym's config): the typed protocol, as before."""
    assert routing("+environment_server_url=http://127.0.0.1:9999").default.protocol == "episode"


def test_an_unknown_server_type_is_refused_by_name() -> None:
    """A declared type gymslurm does not know is a ConfigError naming the server and the type."""
    with pytest.raises(ConfigError, match=r"'odd_env'.*'my_own_server'.*\+environment_protocol="):
        routing("+environment_server_name=odd_env")


def test_an_unknown_server_name_is_refused_listing_the_known_ones() -> None:
    """A name the configuration does not hold: a ConfigError listing the names it does hold."""
    with pytest.raises(ConfigError, match=r"no Environment Server 'weathr_env'.*weather_env, weather_legacy"):
        routing("+environment_server_name=weathr_env")


def test_agent_name_routes_to_the_server_bound_to_that_agent() -> None:
    """+agent_name=AGENT (NeMo Gym's agent routing): the one Environment Server whose agent_server it is."""
    route = routing("+agent_name=math_agent").default
    assert route.origin.name == "weather_legacy_env" and route.protocol == "legacy_agent"
    with pytest.raises(ConfigError, match="0 Environment Servers"):
        routing("+agent_name=nobody")


def test_legacy_mode_without_a_server_name_is_refused() -> None:
    """environment_routing_mode=legacy needs environment_server_name, as in NeMo Gym."""
    with pytest.raises(ConfigError, match="environment_server_name is required"):
        load_settings([*BASE, "+environment_routing_mode=legacy"])


def test_head_server_host_and_port_are_the_head_server_url() -> None:
    """NeMo Gym's +head_server.host=H +head_server.port=P is head_server_url http://H:P."""
    settings = load_settings(
        [*BASE, "+environment_server_name=x", "+head_server.host=10.1.2.3", "+head_server.port=11001"]
    )[0]
    assert settings.head_server_url == "http://10.1.2.3:11001"
    assert settings.config_sources() == ["http://10.1.2.3:11001"]


def test_one_client_speaks_each_servers_own_protocol() -> None:
    """A client given a protocol per URL sends the flat row to the relay and the typed request elsewhere."""
    sent: dict[str, dict[str, Any]] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        sent[request.url.host] = body
        if request.url.host == "relay":
            return httpx.Response(200, json={"reward": 1.0})
        return httpx.Response(
            200,
            json={
                "episode_id": body["episode_id"],
                "task_id": body["task"]["task_id"],
                "result": {"reward": 1.0},
            },
        )

    task = {"task_id": {"taskset": "w", "task_id": "0"}, "task_input": {"question": "q"}}

    async def go() -> list[object]:
        client = EnvironmentClient(
            concurrency=1,
            run_id="r",
            transport=httpx.MockTransport(handler),
            protocol={"http://relay:1": "legacy_agent", "http://typed:1": "episode"},
        )
        async with client:
            return [
                await client.run(url, EpisodeId(rollout_id="w-0", attempt=0), task)
                for url in ("http://relay:1", "http://typed:1")
            ]

    outcomes = asyncio.run(go())
    assert all(isinstance(outcome, Completed) for outcome in outcomes)
    assert sent["relay"]["question"] == "q" and "task" not in sent["relay"]
    assert sent["typed"]["task"] == task


def test_no_server_named_routes_each_agent_to_the_server_that_fronts_it() -> None:
    """NeMo Gym's default routing: every agent one Environment Server fronts → that server (issue 34)."""
    found = routing("+head_server.host=10.0.0.5", "+head_server.port=11000")
    assert found.by_agent and found.default is None
    assert {agent: (route.url, route.protocol) for agent, route in found.by_taskset.items()} == {
        "weather_agent": ("http://127.0.0.1:18313", "episode"),
        "math_agent": ("http://10.0.0.5:18314", "legacy_agent"),
    }


def test_an_agent_of_several_servers_is_not_routable_by_agent() -> None:
    """Rows routed by an agent cannot choose between two servers (NeMo Gym refuses them too)."""
    config = {
        **CONFIG,
        "second": {"environment_servers": {"legacy_agent": {"port": 2, "agent_server": AGENT}}},
    }
    assert "weather_agent" not in routing(config=config).by_taskset


def test_rows_routed_by_agent_take_their_agent_as_taskset() -> None:
    """Each flat row's taskset is its agent (mixed agents in one dataset); a row without a routable
    agent is refused by name before anything is written."""
    from gymslurm.errors import ConfigError as Refused
    from gymslurm.tasks import MaterializeOptions, materialize

    options = MaterializeOptions(dataset_name="data", agents=frozenset({"weather_agent", "math_agent"}))
    rows = [{"q": 1, "agent_ref": {"name": "math_agent"}}, {"q": 2, "agent_ref": AGENT}]
    assert [task["task_id"]["taskset"] for task in materialize(rows, options)] == [
        "math_agent",
        "weather_agent",
    ]
    with pytest.raises(Refused, match=r"row 1 has no agent_ref .*\+environment_server_name"):
        materialize([rows[0], {"q": 3}], options)
