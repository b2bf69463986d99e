"""Where ``gymslurm reverify`` re-grades a server NeMo Gym names (routing.grader_by_name): a typed
server's own /verify; a legacy relay or adapter through its resources server."""

from __future__ import annotations

from typing import Any

import pytest

from gymslurm.collector.routing import grader_by_name
from gymslurm.errors import ConfigError

# The shape of NeMo Gym 0.7.0's global config (../shared/nemogym/compat_stack.yaml's servers).
CONFIG: dict[str, Any] = {
    "weather": {"resources_servers": {"example_single_tool_call": {"host": "127.0.0.1", "port": 18311}}},
    "weather_agent": {
        "responses_api_agents": {
            "simple_agent": {"host": "127.0.0.1", "port": 18312, "resources_server": {"name": "weather"}}
        }
    },
    "weather_env": {
        "environment_servers": {
            "single_agent_turn": {
                "host": "127.0.0.1",
                "port": 18313,
                "resources_server": {"name": "weather"},
                "agent_server": {"name": "weather_agent"},
            }
        }
    },
    "weather_legacy_env": {
        "environment_servers": {
            "legacy_agent": {"host": "0.0.0.0", "port": 18314, "agent_server": {"name": "weather_agent"}}
        }
    },
    "weather_sat_legacy_env": {
        "environment_servers": {
            "single_agent_turn_legacy": {
                "host": "127.0.0.1",
                "port": 18315,
                "resources_server": {"name": "weather"},
                "agent_server": {"name": "weather_agent"},
            }
        }
    },
    "orphan_relay": {"environment_servers": {"legacy_agent": {"host": "127.0.0.1", "port": 18316}}},
}

GRADERS = [
    ("a typed server grades itself", "weather_env", None, ("http://127.0.0.1:18313", "episode")),
    (
        "a relay through its agent's resources server",
        "weather_legacy_env",
        None,
        ("http://127.0.0.1:18311", "legacy_agent"),
    ),
    (
        "an adapter through its own resources server",
        "weather_sat_legacy_env",
        None,
        ("http://127.0.0.1:18311", "legacy_reply"),
    ),
    (
        "an explicit protocol wins over the type",
        "weather_env",
        "legacy_reply",
        ("http://127.0.0.1:18311", "legacy_reply"),
    ),
]


@pytest.mark.parametrize(("case", "name", "explicit", "found"), GRADERS, ids=[g[0] for g in GRADERS])
def test_the_grader_of_a_named_server(case: str, name: str, explicit: Any, found: tuple[str, str]) -> None:
    """Each row: the URL re-grades go to and the body they take, read from the configuration."""
    assert grader_by_name(CONFIG, name, "127.0.0.1", explicit) == found


def test_an_unknown_name_is_refused_with_the_names_there_are() -> None:
    """A name the configuration does not have: the error lists the servers it has."""
    with pytest.raises(ConfigError, match=r"names no Environment Server 'nope'.*weather_env"):
        grader_by_name(CONFIG, "nope", "127.0.0.1")


def test_a_legacy_server_without_a_resources_server_is_refused_with_the_way_out() -> None:
    """A relay whose block and agent name no resources server: refused, naming +environment_server_url."""
    with pytest.raises(ConfigError, match=r"orphan_relay.*names none.*\+environment_server_url"):
        grader_by_name(CONFIG, "orphan_relay", "127.0.0.1")
