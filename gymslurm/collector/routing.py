"""Which Environment Server runs each taskset, and which protocol it speaks (pure: settings, config in).

NeMo Gym users address servers by **name** (``+environment_routing_mode=legacy
+environment_server_name=NAME``, ``+environment_server_routes={taskset: NAME}``, ``+agent_name=AGENT``);
gymslurm's own spelling addresses them by **URL** (``+environment_server_url``,
``+environment_server_urls``). Both are resolved here, once, against the NeMo Gym configuration the
collector fetches for the run's identity anyway (the head server's ``GET /global_config_dict_yaml``):

- a name is the top-level key of a block with ``environment_servers: {TYPE: {host, port, ...}}``; its
  URL is ``http://host:port`` (a wildcard host, ``0.0.0.0``, is the head server's host);
- a URL is named by the block listening there (:func:`gymslurm.nemogym.server_origin`), when one does;
- the **protocol** of a route is the explicit ``+environment_protocol=`` when given, else read from the
  server's declared type (:data:`SERVER_TYPE_PROTOCOLS`); a server the configuration does not name
  (gymslurm's demo server) speaks ``episode``; a declared type gymslurm does not know is refused by
  name, never guessed.

Several protocols in one run are fine: each route has its own (the relay for one taskset, a typed
server for another). Trade-off: the explicit ``+environment_protocol=`` applies to every route (it is
one setting, as before); a mixed run leaves it unset and lets each server's type decide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gymslurm.errors import ConfigError
from gymslurm.nemogym import ServerOrigin, environment_servers, materialized_row, server_origin
from gymslurm.records import Protocol
from gymslurm.settings import CollectSettings

# NeMo Gym 0.7.0's Environment Server types (environment_servers/ in its wheel) → the protocol each speaks.
SERVER_TYPE_PROTOCOLS: dict[str, Protocol] = {
    "single_agent_turn": "episode",
    "nemo_user_sim": "episode",
    "legacy_agent": "legacy_agent",
    "single_agent_turn_legacy": "legacy_reply",
}
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


@dataclass(frozen=True)
class Route:
    """One Environment Server of the run: where it listens, how it speaks, what NeMo Gym calls it."""

    url: str
    protocol: Protocol
    origin: ServerOrigin | None = None


@dataclass(frozen=True)
class Routing:
    """The run's routes: a default server and per-taskset ones."""

    default: Route | None
    by_taskset: Mapping[str, Route] = field(default_factory=dict)
    # NeMo Gym's default routing: each flat row's taskset is its agent_ref's name (tasks.py), and
    # ``by_taskset`` maps every agent one Environment Server fronts to that server.
    by_agent: bool = False

    def route_for(self, taskset: str) -> Route:
        """The server that runs ``taskset``'s episodes (a ConfigError naming the taskset when none does)."""
        route = self.by_taskset.get(taskset, self.default)
        if route is None:
            known = ", ".join(sorted(self.by_taskset)) or "none"
            raise ConfigError(
                f"no Environment Server for taskset {taskset!r} (the routes name: {known}); add "
                f"+environment_server_routes.{taskset}=NAME (or +environment_server_urls.{taskset}=URL), "
                "or set a default server (+environment_server_name=NAME or +environment_server_url=URL)"
            )
        return route

    def url_for(self, taskset: str) -> str:
        return self.route_for(taskset).url

    def routes(self) -> list[Route]:
        """Every distinct route (by URL), default first."""
        seen: dict[str, Route] = {}
        for route in [self.default, *self.by_taskset.values()]:
            if route is not None:
                seen.setdefault(route.url, route)
        return list(seen.values())

    def protocols(self) -> dict[str, Protocol]:
        return {route.url: route.protocol for route in self.routes()}

    def origins(self) -> dict[str, ServerOrigin | None]:
        return {route.url: route.origin for route in self.routes()}


def nemo_gym_rows(routing: Routing) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """Each task as NeMo Gym's materialized row for the server that runs its taskset (never raises:
    a taskset without a route gets no server name, and NeMo Gym's resume then needs its own flags)."""

    def row(task: Mapping[str, Any]) -> dict[str, Any]:
        task_id = task.get("task_id")
        taskset = task_id.get("taskset") if isinstance(task_id, Mapping) else None
        route = routing.by_taskset.get(str(taskset), routing.default)
        # routed by agent_ref, NeMo Gym's row names no server: its resume routes it by its agent again
        origin = route.origin if route is not None and not routing.by_agent else None
        return materialized_row(task, origin, episode=route is None or route.protocol == "episode")

    return row


def resolve_routing(settings: CollectSettings, config: Mapping[str, Any]) -> Routing:
    """The routes of ``settings`` in NeMo Gym's configuration ``config`` (ConfigError if one cannot be)."""
    fallback_host = urlsplit(settings.head_server_url or "http://127.0.0.1").hostname or "127.0.0.1"
    explicit = settings.environment_protocol

    def by_url(url: str) -> Route:
        origin = server_origin(config, url)
        return Route(url, explicit or protocol_of(origin, url), origin)

    def by_name(name: str, setting: str) -> Route:
        origin, url = named_server(config, name, setting, fallback_host)
        return Route(url, explicit or protocol_of(origin, url), origin)

    default: Route | None = None
    if settings.environment_server_url:
        default = by_url(settings.environment_server_url)
    elif settings.environment_server_name:
        default = by_name(settings.environment_server_name, "environment_server_name")
    elif settings.agent_name:
        origin, url = server_of_agent(config, settings.agent_name, fallback_host)
        default = Route(url, explicit or protocol_of(origin, url), origin)
    if settings.routes_by_agent:
        return Routing(None, agent_routes(config, fallback_host, explicit), by_agent=True)
    routes = {taskset: by_url(url) for taskset, url in settings.environment_server_urls.items()}
    for taskset, name in (settings.environment_server_routes or {}).items():
        routes[taskset] = by_name(name, f"environment_server_routes.{taskset}")
    return Routing(default, routes)


def agent_routes(
    config: Mapping[str, Any], fallback_host: str, explicit: Protocol | None
) -> dict[str, Route]:
    """Each agent exactly one Environment Server fronts → that server, as NeMo Gym's agent routing
    finds it (an agent of several servers, or of a server without a port, is left out: its rows are
    refused by name before anything is written)."""
    fronting: dict[str, list[tuple[str, str, Mapping[str, Any]]]] = {}
    for name, server_type, block in _servers(config):
        for agent in agents_of(block):
            fronting.setdefault(agent, []).append((name, server_type, block))
    routes = {}
    for agent, found in fronting.items():
        if len(found) == 1 and type(found[0][2].get("port")) is int:
            name, server_type, block = found[0]
            origin, url = origin_of(name, server_type, block), url_of(block, fallback_host, name)
            routes[agent] = Route(url, explicit or protocol_of(origin, url), origin)
    return routes


def agents_of(block: Mapping[str, Any]) -> list[str]:
    """The agents an Environment Server's block references: ``agent_server`` and any field of type
    ``responses_api_agents`` (NeMo Gym's ``environment_server_agent_names``)."""
    return [
        str(reference["name"])
        for key, reference in block.items()
        if isinstance(reference, Mapping)
        and reference.get("name") is not None
        and (
            reference.get("type") == "responses_api_agents"
            or (key == "agent_server" and "type" not in reference)
        )
    ]


def protocol_of(origin: ServerOrigin | None, url: str) -> Protocol:
    """The protocol a server's declared type speaks; ``episode`` for a server no config names."""
    if origin is None:
        return "episode"
    protocol = SERVER_TYPE_PROTOCOLS.get(origin.server_type)
    if protocol is None:
        known = ", ".join(sorted(SERVER_TYPE_PROTOCOLS))
        raise ConfigError(
            f"the Environment Server {origin.name!r} ({url}) is declared with type {origin.server_type!r}, "
            f"which gymslurm does not know (it knows: {known}), so it cannot tell which protocol the server "
            "speaks: set +environment_protocol=episode (typed replies), legacy_agent (the flat row out and "
            "back) or legacy_reply (typed request, flat reply)"
        )
    return protocol


def _servers(config: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    yield from environment_servers(config)


def named_server(
    config: Mapping[str, Any], name: str, setting: str, fallback_host: str
) -> tuple[ServerOrigin, str]:
    """The Environment Server NeMo Gym's configuration calls ``name``, and its URL."""
    for server_name, server_type, block in _servers(config):
        if server_name == name:
            return origin_of(server_name, server_type, block), url_of(block, fallback_host, name)
    known = ", ".join(sorted({server for server, _, _ in _servers(config)})) or "none"
    raise ConfigError(
        f"+{setting}={name}: the NeMo Gym configuration names no Environment Server {name!r} (it names: "
        f"{known}). Check the name against your `gym env start` config, or the head server "
        "(+head_server.host/+head_server.port) gymslurm read it from"
    )


def server_of_agent(config: Mapping[str, Any], agent: str, fallback_host: str) -> tuple[ServerOrigin, str]:
    """The one Environment Server bound to ``agent`` (``agent_server.name``), as NeMo Gym's agent routing."""
    found = [(n, t, b) for n, t, b in _servers(config) if origin_of(n, t, b).agent == agent]
    if len(found) != 1:
        names = ", ".join(sorted(n for n, _, _ in found)) or "none"
        raise ConfigError(
            f"+agent_name={agent}: {len(found)} Environment Servers of the NeMo Gym configuration are bound "
            f"to that agent ({names}); gymslurm needs exactly one. Name the server with "
            "+environment_routing_mode=legacy +environment_server_name=NAME instead"
        )
    name, server_type, block = found[0]
    return origin_of(name, server_type, block), url_of(block, fallback_host, name)


def origin_of(name: str, server_type: str, block: Mapping[str, Any]) -> ServerOrigin:
    agent = block.get("agent_server")
    agent_name = agent.get("name") if isinstance(agent, Mapping) else None
    return ServerOrigin(name, server_type, agent_name if isinstance(agent_name, str) else None)


def url_of(block: Mapping[str, Any], fallback_host: str, name: str) -> str:
    port = block.get("port")
    if type(port) is not int:
        raise ConfigError(
            f"the Environment Server {name!r} has no port in the NeMo Gym configuration ({port!r}): is it "
            "running? Start it with `gym env start`, or give its address with +environment_server_url=URL"
        )
    host = str(block.get("host") or "")
    host = fallback_host if host in WILDCARD_HOSTS else host
    return f"http://{host}:{port}"


def grader_by_name(
    config: Mapping[str, Any], name: str, fallback_host: str, explicit: Protocol | None = None
) -> tuple[str, Protocol]:
    """Where ``gymslurm reverify`` re-grades the answers of the Environment Server NeMo Gym calls
    ``name``, and with which body: a typed server's own ``/verify``; a legacy one (``legacy_agent``,
    ``single_agent_turn_legacy``) has none, so its resources server's (named by the server's block,
    else by its agent's), with NeMo Gym's flat verify request."""
    origin, url = named_server(config, name, "environment_server_name", fallback_host)
    protocol = explicit or protocol_of(origin, url)
    if protocol == "episode":
        return url, protocol
    block = next(b for n, _, b in _servers(config) if n == name)
    resources = _named(block.get("resources_server")) or _named(
        _typed_block(config, origin.agent or "", "responses_api_agents").get("resources_server")
    )
    if not resources:
        raise ConfigError(
            f"the Environment Server {name!r} speaks {protocol}, whose answers are re-graded by its "
            "resources server, but the NeMo Gym configuration names none for it (neither its block nor "
            f"its agent {origin.agent!r} has resources_server.name): give it with +environment_server_url=URL"
        )
    return url_of(_typed_block(config, resources, "resources_servers"), fallback_host, resources), protocol


def _named(reference: object) -> str | None:
    name = reference.get("name") if isinstance(reference, Mapping) else None
    return name if isinstance(name, str) and name else None


def _typed_block(config: Mapping[str, Any], name: str, category: str) -> Mapping[str, Any]:
    """The one ``{category: {type: block}}`` block of ``config[name]`` ({} when there is none)."""
    instance = config.get(name)
    servers = instance.get(category) if isinstance(instance, Mapping) else None
    blocks = [b for b in servers.values() if isinstance(b, Mapping)] if isinstance(servers, Mapping) else []
    return blocks[0] if len(blocks) == 1 else {}
