"""How a link's collector adapts its load when the benchmark does not say (pure).

A benchmark's collector overrides that name ``dispatch_adaptive`` (``off``, ``latency``,
``metrics``) are obeyed. Otherwise the concurrency adapts by itself, ``+concurrency`` the cap
(issue 22, docs/servers.md "Load that adapts"): from the model server's own queue where the job's
model server (a server probed by ``chat_completions`` or ``completions``) serves vLLM's or
SGLang's metrics, each replica's when it has replicas; else from latency. Which one is decided in
the job, once the servers are up, from what the model server answers (:func:`adaptive_overrides`
takes the answers; ``job/collector_process.py`` asks).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gymslurm.launcher.server_refs import override_value, reference_value
from gymslurm.launcher.settings import ServerSettings

MODEL_PROBES = frozenset({"chat_completions", "completions"})
_CHOSEN = re.compile(r"^\+{0,2}dispatch_adaptive=")


@dataclass(frozen=True)
class AdaptiveChoice:
    """What the link adds to the collector's overrides, and the job log's sentence saying why."""

    overrides: list[str]
    why: str


def chosen_by_benchmark(overrides: Sequence[str]) -> bool:
    """The benchmark's collector overrides set ``dispatch_adaptive`` themselves."""
    return any(_CHOSEN.match(o) for o in overrides)


def model_servers(servers: Sequence[ServerSettings]) -> list[str]:
    """The names of the stack's model servers (probed as OpenAI-compatible completions)."""
    return [s.name for s in servers if s.probe in MODEL_PROBES]


def metrics_urls(name: str, urls: Mapping[str, str]) -> list[str]:
    """Each replica's ``/metrics`` of model server ``name`` (or its own)."""
    return reference_value(name, "metrics_url", urls).split(",")


def adaptive_overrides(
    overrides: Sequence[str],
    models: Sequence[str],
    urls: Mapping[str, str],
    serves_metrics: Mapping[str, bool],
    loading: frozenset[str] = frozenset(),
) -> AdaptiveChoice:
    """The overrides that make the collector adapt (none when the benchmark chose), and why.

    ``serves_metrics``: for each model server, whether its metrics answered with a queue length.
    ``loading``: model servers still loading when the collector starts (a suite link starts its
    collectors meanwhile, job/stack_load.py), not asked: their queue is read once their /metrics
    answers. The same as asking first: with ``metrics`` the collector polls every second and, in a
    round where none answers, goes on the latency it sees (``dispatch.calls.watch_model_queue``),
    which is all ``latency`` does.
    """
    if chosen_by_benchmark(overrides):
        return AdaptiveChoice([], "dispatch_adaptive as collector.overrides set it")
    for name in models:
        if serves_metrics.get(name) or name in loading:
            url = override_value(name, "metrics_url", urls)
            why = (
                "once its /metrics answers (it was loading when the collector started; latency until then)"
                if name in loading
                else "(its /metrics answers)"
            )
            return AdaptiveChoice(
                ["+dispatch_adaptive=metrics", f"+dispatch_model_metrics_url={url}"],
                f"the load adapts to model server {name!r}'s queue {why}",
            )
    served = (
        f"model server {', '.join(map(repr, models))} serves no vLLM/SGLang metrics"
        if models
        else ("no model server in the stack")
    )
    return AdaptiveChoice(["+dispatch_adaptive=latency"], f"the load adapts to latency ({served})")
