"""NeMo Gym's own vocabulary, so that NeMo Gym's tools read gymslurm's outputs (pure: dicts in, dicts out).

Two things NeMo Gym's ``gym eval aggregate`` and its readers need, learned from NeMo Gym 0.7.0's
rollout collection (docs/nemo-gym.md has the mapping):

- **Row stamps.** NeMo Gym stamps every record with the Environment Server that ran it
  (``_ng_environment_server``, the server's name in the config), that server's type
  (``_ng_result_type``, e.g. ``single_agent_turn``), the agent it binds (``agent_ref: {"name": ...}``)
  and the task id (``_ng_task_id``). Without ``_ng_environment_server`` (or ``agent_ref``) its
  aggregation groups nothing and reports ``[]``. gymslurm addresses servers by URL, so
  :func:`server_origin` finds the server's name in the head server's configuration by its host and port.
- **The metrics file** ``<stem>_aggregate_metrics.json``: a JSON list with one entry per Environment
  Server, ``{agent_ref, _ng_environment_server, agent_metrics, key_metrics, group_level_metrics,
  repeat_level_metrics}`` as its ``POST /aggregate_metrics`` answered (:func:`metrics_entry`).

Trade-off: a server that the configuration does not name (gymslurm's demo server, a config given
with ``+environment_config``) gets no stamps; NeMo Gym's tools cannot group its rows, gymslurm's can.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gymslurm.identity import redact_text

ENVIRONMENT_SERVER_STAMP, RESULT_TYPE_STAMP, TASK_ID_STAMP, AGENT_REF = (
    "_ng_environment_server",
    "_ng_result_type",
    "_ng_task_id",
    "agent_ref",
)
ENVIRONMENT_SERVERS = "environment_servers"
# The sections of NeMo Gym's AggregateMetrics answer and their JSON types (nemo_gym/config_types.py).
SECTION_SHAPES: dict[str, dict[str, Any] | list[Any]] = {
    "agent_metrics": {},
    "key_metrics": {},
    "group_level_metrics": [],
    "repeat_level_metrics": [],
}
# Fields NeMo Gym strips from each row before POST /aggregate_metrics (only usage details of the
# response are kept): the request stays small and the servers see what NeMo Gym sends them.
HEAVY_FIELDS = frozenset(
    {"response", "responses_create_params", "ng_agent_observations", "ng_model_call_capture", "ng_trajectory"}
)
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


@dataclass(frozen=True)
class ServerOrigin:
    """An Environment Server as NeMo Gym's configuration names it."""

    name: str
    server_type: str
    agent: str | None

    def stamps(self, *, agent_ref: bool = True) -> dict[str, Any]:
        """The stamps NeMo Gym puts on every record this server ran (``_ng_task_id`` is per row).

        ``agent_ref=False`` for a typed (``episode``) server: NeMo Gym stamps no agent on a
        materialized task's record, so gymslurm's typed rows carry none either (issue 34)."""
        out: dict[str, Any] = {ENVIRONMENT_SERVER_STAMP: self.name, RESULT_TYPE_STAMP: self.server_type}
        if self.agent and agent_ref:
            out[AGENT_REF] = {"name": self.agent}
        return out


def server_origin(config: Mapping[str, Any], url: str) -> ServerOrigin | None:
    """The Environment Server of ``config`` (NeMo Gym's global config) listening at ``url``, if one does."""
    parts = urlsplit(url)
    for name, server_type, block in environment_servers(config):
        host = str(block.get("host", "127.0.0.1"))
        if block.get("port") == parts.port and _same_host(host, parts.hostname):
            return ServerOrigin(name, server_type, _agent_of(block))
    return None


def environment_servers(config: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    for name, instance in config.items():
        if not isinstance(instance, Mapping):
            continue
        servers = instance.get(ENVIRONMENT_SERVERS)
        if isinstance(servers, Mapping):
            for server_type, block in servers.items():
                if isinstance(block, Mapping):
                    yield str(name), str(server_type), block
        elif ENVIRONMENT_SERVERS not in instance:  # a config keyed by tasksets (one per server)
            yield from environment_servers(instance)


def _same_host(configured: str, asked: str | None) -> bool:
    return configured == asked or (configured in _LOOPBACK and asked in _LOOPBACK)


def _agent_of(block: Mapping[str, Any]) -> str | None:
    agent = block.get("agent_server")
    name = agent.get("name") if isinstance(agent, Mapping) else None
    return name if isinstance(name, str) else None


def materialized_row(task: Mapping[str, Any], origin: ServerOrigin | None, episode: bool) -> dict[str, Any]:
    """A gymslurm task as the row NeMo Gym's ``gym eval run`` writes to ``<stem>_materialized_inputs.jsonl``.

    What NeMo Gym 0.7.0 reads back on ``+resume_from_cache=true``: an ``episode`` server's task in
    the materialized envelope (``task_id``, ``task_input``), else the flat row; both with
    ``_ng_task_index``, the server's name (``_ng_environment_server``, which NeMo Gym dispatches by) and
    ``_ng_rollout_index``, keys in NeMo Gym's order; a flat row gets the bound agent as ``agent_ref``
    unless it names one, as NeMo Gym stamps it. gymslurm's own fields (rollout id) stay out.
    """
    task_input = task.get("task_input")
    row: dict[str, Any]
    if not episode and isinstance(task_input, Mapping):
        row = dict(task_input)
    else:
        row = {"task_id": task.get("task_id"), "task_input": task_input}
    row["_ng_task_index"] = task.get("_ng_task_index", 0)
    if origin is not None:
        row[ENVIRONMENT_SERVER_STAMP] = origin.name
    row["_ng_rollout_index"] = task.get("_ng_rollout_index", 0)
    named = row.get(AGENT_REF)
    named = isinstance(named, Mapping) and named.get("name")
    if "task_input" not in row and origin is not None and origin.agent and not named:
        row[AGENT_REF] = {"name": origin.agent}
    return row


def row_for_metrics(row: Mapping[str, Any]) -> dict[str, Any]:
    """A result row as NeMo Gym sends it to ``POST /aggregate_metrics``: heavy fields out, usage kept."""
    entry = {key: value for key, value in row.items() if key not in HEAVY_FIELDS}
    response = row.get("response")
    if isinstance(response, Mapping):
        kept = {key: response[key] for key in ("usage", "incomplete_details") if response.get(key)}
        if kept:
            entry["response"] = kept
    return entry


def metrics_entry(origin: ServerOrigin | None, url: str, answer: Mapping[str, Any]) -> dict[str, Any]:
    """One entry of NeMo Gym's ``<stem>_aggregate_metrics.json``: a server's ``/aggregate_metrics`` answer."""
    name = origin.name if origin else redact_text(url)  # a saved file never holds a URL password
    entry: dict[str, Any] = {
        AGENT_REF: {"name": (origin.agent if origin and origin.agent else name)},
        ENVIRONMENT_SERVER_STAMP: name,
    }
    for section, empty in SECTION_SHAPES.items():
        value = answer.get(section)
        entry[section] = value if isinstance(value, type(empty)) else type(empty)()
    if answer.get("perf_summary") is not None:
        entry["perf_summary"] = answer["perf_summary"]
    return entry


def not_the_servers_metrics(nemo_gym_file: str, own_file: object) -> str:
    """Why a merge wrote no NeMo Gym ``<stem>_aggregate_metrics.json``: no server answered for it.

    That file name promises the Environment Servers' own ``POST /aggregate_metrics`` answers; a merge
    that ran without one (the servers stop with their job) writes gymslurm's metrics under their name.
    """
    return (
        f"no Environment Server's POST /aggregate_metrics answered (+environment_server_url), so NeMo Gym's "
        f"{nemo_gym_file} was not written: the metrics in {own_file} are gymslurm's own. For the servers' "
        "metrics, run `gym eval aggregate` on the merged file while the servers run, or give "
        "+environment_server_url"
    )
