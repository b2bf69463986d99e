"""The only package that speaks HTTP: ``POST /run`` to an Environment Server, and what the answer means.

Four layers, each a module (httpx's ``_transports/`` is the model):

- :mod:`~gymslurm.dispatch.classify`: outcome types and the pure classification of answers
  (:func:`classify_reply`, :func:`classify_exception`); no I/O.
- :mod:`~gymslurm.dispatch.http11`: :class:`Http11Transport`, the minimal HTTP/1.1 keep-alive transport.
- :mod:`~gymslurm.dispatch.client`: :class:`EnvironmentClient`, one episode attempt at a time per slot.
- :mod:`~gymslurm.dispatch.calls`: the synchronous one-off calls (``/verify`` re-grading, the config
  endpoint, ``/aggregate_metrics``, health probes).

Nothing above this package knows that httpx is used: transport exceptions are translated here, once.
The transport's measurements and the reasons for it are in docs/transport.md.
"""

from gymslurm.dispatch.calls import (
    MetricsRows,
    ModelLoad,
    fetch_aggregate_metrics,
    fetch_environment_config,
    post_aggregate_metrics,
    probe_answers,
    probe_completion,
    probe_health,
    router_worker,
    verify_answer,
    verify_client,
    watch_model_queue,
)
from gymslurm.dispatch.classify import (
    Completed,
    Failed,
    Omitted,
    Outcome,
    classify_exception,
    classify_reply,
)
from gymslurm.dispatch.client import EnvironmentClient
from gymslurm.dispatch.http11 import Http11Transport

__all__ = [
    "Completed",
    "EnvironmentClient",
    "Failed",
    "Http11Transport",
    "MetricsRows",
    "ModelLoad",
    "Omitted",
    "Outcome",
    "classify_exception",
    "classify_reply",
    "fetch_aggregate_metrics",
    "fetch_environment_config",
    "post_aggregate_metrics",
    "probe_answers",
    "probe_completion",
    "probe_health",
    "router_worker",
    "verify_answer",
    "verify_client",
    "watch_model_queue",
]
