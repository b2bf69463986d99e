"""The synchronous calls off the hot path: ``POST /verify``, the config endpoint, metrics, health probes.

They use a plain blocking ``httpx.Client`` (no proxy from the environment): each is made once per
invocation or one at a time, so the fast transport of the client would buy nothing. Every client
checks certificates with one context per process (:func:`_tls`).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import httpx
import orjson

from gymslurm.dispatch.classify import (
    GATEWAY_STATUS_KINDS,
    VERIFY_PATH,
    Outcome,
    classify_exception,
    classify_reply,
)
from gymslurm.dispatch.client import REQUEST_HEADERS
from gymslurm.errors import ConfigError, EnvironmentUnreachableError, MetricsUnavailableError
from gymslurm.identity import redact_text
from gymslurm.records import EpisodeId, Protocol


@functools.cache
def _tls() -> ssl.SSLContext:
    """httpx's own certificate check (certifi's CA bundle, nothing from the environment), built once per
    process: building it reads the bundle (~0.1 s of CPU), which every probe of a server paid again
    (every 0.2 s while a server starts, every ``probe_interval_s`` of a link after)."""
    return httpx.create_ssl_context(trust_env=False)


def _client(timeout_s: float | None, *, follow_redirects: bool = False) -> httpx.Client:
    """A blocking client: no proxy from the environment (servers are cluster-internal), one TLS check."""
    return httpx.Client(timeout=timeout_s, trust_env=False, verify=_tls(), follow_redirects=follow_redirects)


def verify_client(timeout_s: float | None = 60.0) -> httpx.Client:
    """A blocking client for :func:`verify_answer` (no proxies from the environment, like ``/run``)."""
    return _client(timeout_s)


def verify_answer(
    client: httpx.Client,
    url: str,
    episode: EpisodeId,
    task: Mapping[str, Any],
    response: object,
    *,
    run_id: str,
    protocol: Protocol = "episode",
) -> Outcome:
    """POST a saved answer to ``<url>/verify`` and classify the answer exactly like ``/run``'s.

    The body is ``{"episode_id", "task", "response"}`` (docs/aggregation.md, "Re-grading protocol");
    for a legacy server (``legacy_agent``/``legacy_reply``) it is NeMo Gym's own verify request, the
    flat row with the saved ``response`` (what ``gym eval reverify`` posts to a resources server's
    ``/verify``), and the flat verify response is read by the legacy rules.
    Protocol violations are recorded as terminal failures, never raised: a re-grade is saved either
    way. Blocking httpx, one call at a time: judge-only recovery re-grades the few answers a judge
    outage left behind, so the fast transport of :class:`EnvironmentClient` would buy nothing here.
    """
    payload: dict[str, Any] = {
        "episode_id": {"rollout_id": episode.rollout_id, "attempt": episode.attempt},
        "task": dict(task),
        "response": response,
    }
    if protocol != "episode":
        payload = {**task["task_input"], "response": response}
    endpoint = url.rstrip("/") + VERIFY_PATH
    try:
        reply = client.post(endpoint, content=orjson.dumps(payload), headers=REQUEST_HEADERS)
    except (httpx.TransportError, httpx.DecodingError, OSError) as exc:
        return classify_exception(exc, episode=episode, run_id=run_id, url=url, path=VERIFY_PATH)
    return classify_reply(
        reply.status_code,
        reply.content,
        episode=episode,
        task_id=task["task_id"],
        run_id=run_id,
        route_failures=True,
        url=url,
        path=VERIFY_PATH,
        protocol="episode" if protocol == "episode" else "legacy_reply",
    )


# One-off calls: the server's configuration and its reward metrics (synchronous, off the hot path)

CONFIG_ENDPOINT = "/global_config_dict_yaml"
METRICS_ENDPOINT = "/aggregate_metrics"
METRIC_SECTIONS = ("agent_metrics", "key_metrics")
_CONFIG_ADVICE = (
    "Start the Environment Server first, point +head_server_url= at the NeMo Gym head server, "
    "or give the configuration explicitly with +environment_config={...}"
)


def fetch_environment_config(url: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The resolved configuration a running (NeMo Gym) head server reports at its config endpoint.

    Raises :class:`EnvironmentUnreachableError` (exit 1, retryable) when no connection can be made or
    the answer is a gateway or "not now" status (429/502/503/504, :data:`GATEWAY_STATUS_KINDS`), and
    :class:`ConfigError` (exit 2) when the server itself answers without a usable configuration.
    """
    where = url.rstrip("/") + CONFIG_ENDPOINT
    shown = redact_text(where)  # messages never carry a URL's password (docs/security.md)
    try:
        with _client(timeout_s, follow_redirects=True) as http:
            reply = http.get(where)  # trust_env off: servers are cluster-internal, no proxy
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as error:
        raise ConfigError(
            f"cannot read the configuration from {shown!r}: {redact_text(str(error))}. {_CONFIG_ADVICE}"
        ) from None
    except httpx.TransportError as error:
        raise EnvironmentUnreachableError(
            f"cannot read the Environment Server's configuration from {shown}: {redact_text(str(error))}. "
            f"{_CONFIG_ADVICE}"
        ) from None
    if reply.status_code in GATEWAY_STATUS_KINDS:
        raise EnvironmentUnreachableError(
            f"cannot read the Environment Server's configuration from {shown}: it answered HTTP "
            f"{reply.status_code} (a gateway or an overloaded server; not now). Retry later. {_CONFIG_ADVICE}"
        )
    if not reply.is_success:
        raise ConfigError(
            f"the Environment Server's configuration is required for the run's identity, but {shown} "
            f"answered HTTP {reply.status_code}. {_CONFIG_ADVICE}"
        )
    return parse_environment_config(reply.text, where)


def probe_health(url: str, path: str, timeout_s: float) -> bool:
    """Whether ``GET <url><path>`` answers 2xx (redirects followed); false on any transport failure.

    Used while waiting for a server a job started to come up (``job/servers.py``): a refused
    connection or a 5xx just means "not yet", so this never raises for them.
    """
    try:
        with _client(timeout_s, follow_redirects=True) as http:
            return http.get(url.rstrip("/") + path).is_success
    except (httpx.HTTPError, httpx.InvalidURL):
        return False


def probe_answers(url: str, timeout_s: float) -> bool:
    """Whether anything answers HTTP at ``url`` (any status): the collector's circuit-breaker probe."""
    try:
        with _client(timeout_s) as http:
            http.get(url.rstrip("/") + "/")
    except (httpx.HTTPError, httpx.InvalidURL):
        return False
    return True


def router_worker(
    router_url: str, action: Literal["add", "remove"], worker_url: str, timeout_s: float
) -> str | None:
    """Ask a router (``vllm-router``, ``sglang-router``) to put a worker in or take it out of rotation.

    ``POST <router>/add_worker?url=W`` or ``/remove_worker?url=W``; None when it answered 2xx, else
    what went wrong (the supervisor logs it and goes on: the router's own health check is the fallback).
    """
    try:
        with _client(timeout_s) as http:
            answer = http.post(f"{router_url.rstrip('/')}/{action}_worker", params={"url": worker_url})
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        return f"{action}_worker {worker_url}: {type(error).__name__}: {error}"
    if answer.is_success:
        return None
    return f"{action}_worker {worker_url}: HTTP {answer.status_code}: {answer.text[:200]}"


def probe_completion(url: str, chat: bool, model: str | None, timeout_s: float) -> bool:
    """Whether an OpenAI-compatible server generates: a one-token completion must come back with text.

    A model server's ``/health`` can answer while generation is broken (an engine-dead vLLM, a hung
    GPU), so a job probes it with a real request: ``POST /v1/chat/completions`` (``chat``) or
    ``POST /v1/completions``, ``max_tokens: 1``. False on any transport failure, a non-2xx or no text.
    """
    body: dict[str, Any] = {"max_tokens": 1, "temperature": 0}
    if model:
        body["model"] = model
    if chat:
        body["messages"] = [{"role": "user", "content": "ping"}]
    else:
        body["prompt"] = "ping"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    try:
        with _client(timeout_s) as http:
            reply = http.post(url.rstrip("/") + path, json=body)
        if not reply.is_success:
            return False
        choice = reply.json()["choices"][0]
        text = choice["message"]["content"] if chat else choice["text"]
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, KeyError, IndexError, TypeError):
        return False
    return isinstance(text, str) and bool(text)


def parse_environment_config(text: str, where: str) -> dict[str, Any]:
    """The mapping in a config endpoint's answer: YAML, or YAML inside a JSON string (NeMo Gym)."""
    import yaml

    try:
        parsed = yaml.safe_load(text)
        if isinstance(parsed, str):  # NeMo Gym answers with the YAML text as a JSON string
            parsed = yaml.safe_load(parsed)
    except yaml.YAMLError as error:
        raise ConfigError(f"{where} did not return YAML ({error}). {_CONFIG_ADVICE}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(f"{where} returned an empty or non-mapping configuration. {_CONFIG_ADVICE}")
    return parsed


def fetch_aggregate_metrics(url: str, rows: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    """``POST <url>/aggregate_metrics`` with the projection; its flat ``agent_metrics`` and ``key_metrics``.

    Raises :class:`MetricsUnavailableError` for any failure (transport, HTTP status, body): the caller
    falls back to its own metrics.
    """
    return flat_metrics(post_aggregate_metrics(url, rows, timeout_s))


class MetricsRows:
    """The rows of one ``POST /aggregate_metrics``, spooled as its request body to an unlinked temporary file.

    NeMo Gym's endpoint takes one JSON list: the body is written row by row as the rows are read
    (``{"verify_responses":[`` … ``]}``, one row a line), so memory stays flat whatever the number of
    rows, and it is sent from the file with its length. Iterating gives the rows back (the HTTP seam
    of tests reads them).
    """

    _HEAD, _TAIL = b'{"verify_responses":[\n', b"\n]}"

    def __init__(self, folder: Path | None = None) -> None:
        self._file = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115  (closed by close())
        self._file.write(self._HEAD)
        self.count = 0
        self._ended = False

    def add(self, row: Mapping[str, Any]) -> None:
        if self._ended:
            raise ValueError("rows were added after the body was finished")
        self._file.write(b",\n" + orjson.dumps(row) if self.count else orjson.dumps(row))
        self.count += 1

    def body(self) -> IO[bytes]:
        """The finished request body, at its start."""
        if not self._ended:
            self._file.write(self._TAIL)
            self._ended = True
        self._file.flush()
        self._file.seek(0)
        return self._file

    def __iter__(self) -> Iterator[dict[str, Any]]:
        handle = self.body()
        handle.readline()
        for line in handle:
            if line.startswith(b"{"):
                yield orjson.loads(line.rstrip(b",\n"))
        handle.seek(0)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> MetricsRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def post_aggregate_metrics(url: str, rows: Iterable[Mapping[str, Any]], timeout_s: float) -> dict[str, Any]:
    """``POST <url>/aggregate_metrics`` with ``{"verify_responses": rows}``; the answer object as sent.

    ``rows``: a :class:`MetricsRows` body is sent as spooled; any other iterable is spooled first.
    Raises :class:`MetricsUnavailableError` for any failure (transport, HTTP status, body).
    """
    if isinstance(rows, MetricsRows):
        return _post_metrics(url, rows, timeout_s)
    with MetricsRows() as spooled:
        for row in rows:
            spooled.add(row)
        return _post_metrics(url, spooled, timeout_s)


def _post_metrics(url: str, rows: MetricsRows, timeout_s: float) -> dict[str, Any]:
    where = url.rstrip("/") + METRICS_ENDPOINT
    try:
        with _client(timeout_s) as http:
            reply = http.post(where, content=rows.body(), headers=REQUEST_HEADERS)
        reply.raise_for_status()
        body = orjson.loads(reply.content)
    except (httpx.HTTPError, httpx.InvalidURL, orjson.JSONDecodeError) as error:
        raise MetricsUnavailableError(
            f"the Environment Server at {redact_text(url)} did not answer {METRICS_ENDPOINT} "
            f"({redact_text(str(error))})"
        ) from error
    if not isinstance(body, dict):
        raise MetricsUnavailableError(
            f"the Environment Server at {redact_text(url)} answered {METRICS_ENDPOINT} with a non-object"
        )
    return body


def flat_metrics(body: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar entries of the reply's metric sections, merged (later sections win)."""
    out: dict[str, Any] = {}
    for section in METRIC_SECTIONS:
        value = body.get(section)
        if isinstance(value, dict):
            out.update({str(k): v for k, v in value.items() if isinstance(v, int | float | str | bool)})
    return out


# The model server's load, as its Prometheus metrics name it (vLLM, then SGLang): requests waiting
# for a slot, requests being served, and how full its KV cache is (0..1; SGLang's token usage).
QUEUE_METRICS = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
RUNNING_METRICS = ("vllm:num_requests_running", "sglang:num_running_reqs")
KV_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")


@dataclass(frozen=True)
class ModelLoad:
    """One model server's load (or several replicas' together: waiting and running summed, the
    fullest KV cache), from its metrics."""

    waiting: int
    running: int | None = None
    kv_usage: float | None = None


def _metric(text: str, names: tuple[str, ...]) -> list[float] | None:
    """The values of the first of ``names`` the text has, one per label set; None when it has none."""
    for name in names:
        values = [
            line.rsplit(" ", 1)[-1]
            for line in text.splitlines()
            if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " ")
        ]
        if values:
            try:
                return [float(value) for value in values]
            except ValueError:
                return None
    return None


# A model server's count of requests it finished (vLLM's counter; SGLang's): progress while it is busy.
COMPLETED_METRICS = ("vllm:request_success_total", "sglang:num_requests_total")


def parse_completed_total(text: str) -> float | None:
    """Requests the model server finished so far, summed over its label sets; None when it names none."""
    completed = _metric(text, COMPLETED_METRICS)
    return None if completed is None else sum(completed)


def completed_total(url: str, timeout_s: float) -> float | None:
    """``GET <url>/metrics``: the finished-requests counter (:func:`parse_completed_total`), or None."""
    try:
        with _client(timeout_s) as http:
            reply = http.get(f"{url}/metrics")
    except httpx.HTTPError:
        return None
    return parse_completed_total(reply.text) if reply.status_code == 200 else None


def parse_queue_length(text: str) -> int | None:
    """Requests waiting at the model server, summed over its label sets; None when it names none (pure)."""
    waiting = _metric(text, QUEUE_METRICS)
    return None if waiting is None else round(sum(waiting))


def parse_model_load(text: str) -> ModelLoad | None:
    """The model server's load from its metrics text; None without a waiting-queue metric (pure)."""
    waiting = parse_queue_length(text)
    if waiting is None:
        return None
    running, kv = _metric(text, RUNNING_METRICS), _metric(text, KV_METRICS)
    return ModelLoad(
        waiting, None if running is None else round(sum(running)), None if kv is None else max(kv)
    )


def combined_load(loads: Sequence[ModelLoad]) -> ModelLoad | None:
    """Several replicas as one server: waiting and running summed, the fullest KV cache (pure)."""
    if not loads:
        return None
    running = [load.running for load in loads if load.running is not None]
    kv = [load.kv_usage for load in loads if load.kv_usage is not None]
    return ModelLoad(
        sum(load.waiting for load in loads), sum(running) if running else None, max(kv) if kv else None
    )


def serves_model_load(url: str, timeout_s: float) -> bool:
    """``GET url`` (a model server's ``/metrics``) answers with a queue length vLLM or SGLang names."""
    try:
        with _client(timeout_s) as http:
            reply = http.get(url)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200 and parse_model_load(reply.text) is not None


async def model_load(client: httpx.AsyncClient, url: str) -> ModelLoad | None:
    """``GET url`` (a model server's ``/metrics``): its load, or None when unreadable."""
    try:
        reply = await client.get(url)
    except httpx.HTTPError:
        return None
    return parse_model_load(reply.text) if reply.status_code == 200 else None


async def watch_model_queue(
    urls: Sequence[str], tell: Callable[[ModelLoad], None], interval_s: float = 1.0
) -> None:
    """Read every replica's metrics every ``interval_s`` and ``tell`` their load together, until
    cancelled. Replicas whose poll fails are left out of that round (a dead one holds no queue);
    a round where none answers is skipped: the adaptive limit then goes on the latency it sees.
    """
    async with httpx.AsyncClient(timeout=interval_s * 5, trust_env=False, verify=_tls()) as client:
        while True:
            loads = await asyncio.gather(*(model_load(client, url) for url in urls))
            load = combined_load([found for found in loads if found is not None])
            if load is not None:
                tell(load)
            await asyncio.sleep(interval_s)
