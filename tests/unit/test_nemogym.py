"""NeMo Gym's vocabulary on gymslurm's outputs: which server a URL is, the row stamps, the metrics entry."""

from __future__ import annotations

from typing import Any

import pytest

from gymslurm.nemogym import ServerOrigin, metrics_entry, row_for_metrics, server_origin

# The shape of NeMo Gym's global config (what its head server answers), trimmed to what matters here.
AGENT = {"type": "responses_api_agents", "name": "weather_agent"}
CONFIG: dict[str, Any] = {
    "head_server": {"host": "127.0.0.1", "port": 11000},
    "weather_agent": {"responses_api_agents": {"simple_agent": {"host": "127.0.0.1", "port": 18312}}},
    "weather_env": {
        "environment_servers": {
            "single_agent_turn": {"host": "127.0.0.1", "port": 18313, "agent_server": AGENT}
        }
    },
    "weather_legacy_env": {
        "environment_servers": {"legacy_agent": {"host": "node7", "port": 18314, "agent_server": AGENT}}
    },
}


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://127.0.0.1:18313", ServerOrigin("weather_env", "single_agent_turn", "weather_agent")),
        ("http://localhost:18313/", ServerOrigin("weather_env", "single_agent_turn", "weather_agent")),
        ("http://node7:18314", ServerOrigin("weather_legacy_env", "legacy_agent", "weather_agent")),
        ("http://127.0.0.1:18314", None),  # the relay listens on node7, not here
        ("http://127.0.0.1:18312", None),  # an agent, not an Environment Server
        ("http://127.0.0.1:9999", None),
    ],
)
def test_a_server_url_is_named_by_the_head_servers_config(url: str, origin: ServerOrigin | None) -> None:
    """The Environment Server at a URL is the config block with that host (loopback alike) and port."""
    assert server_origin(CONFIG, url) == origin


def test_configs_keyed_by_taskset_are_searched_too() -> None:
    """Without a head server each server's config is keyed by its tasksets; those are searched as well."""
    keyed = {"weather": CONFIG}
    assert server_origin(keyed, "http://127.0.0.1:18313") == ServerOrigin(
        "weather_env", "single_agent_turn", "weather_agent"
    )


def test_stamps_are_nemo_gyms_keys() -> None:
    """_ng_environment_server, _ng_result_type and agent_ref, as NeMo Gym's collector stamps every record."""
    stamps = ServerOrigin("weather_env", "single_agent_turn", "weather_agent").stamps()
    assert stamps == {
        "_ng_environment_server": "weather_env",
        "_ng_result_type": "single_agent_turn",
        "agent_ref": {"name": "weather_agent"},
    }


def test_a_typed_servers_stamps_name_no_agent() -> None:
    """NeMo Gym stamps no agent_ref on a materialized task's record: neither does gymslurm (issue 34)."""
    stamps = ServerOrigin("weather_env", "single_agent_turn", "weather_agent").stamps(agent_ref=False)
    assert stamps == {"_ng_environment_server": "weather_env", "_ng_result_type": "single_agent_turn"}


def test_a_metrics_entry_has_nemo_gyms_shape() -> None:
    """One entry of <stem>_aggregate_metrics.json: agent_ref, server name and the four metric sections."""
    answer = {"agent_metrics": {"mean/reward": 1.0}, "key_metrics": {"mean/reward": 1.0}}
    origin = ServerOrigin("weather_env", "single_agent_turn", "weather_agent")
    entry = metrics_entry(origin, "http://x:1", answer)
    assert entry == {
        "agent_ref": {"name": "weather_agent"},
        "_ng_environment_server": "weather_env",
        "agent_metrics": {"mean/reward": 1.0},
        "key_metrics": {"mean/reward": 1.0},
        "group_level_metrics": [],
        "repeat_level_metrics": [],
    }


def test_rows_sent_for_metrics_lose_their_heavy_fields() -> None:
    """As NeMo Gym does: the request and trajectory go, only the response's usage stays."""
    row = {
        "reward": 1.0,
        "responses_create_params": {"input": "x"},
        "ng_trajectory": {},
        "response": {"output": ["long"], "usage": {"total_tokens": 15}},
    }
    assert row_for_metrics(row) == {"reward": 1.0, "response": {"usage": {"total_tokens": 15}}}
