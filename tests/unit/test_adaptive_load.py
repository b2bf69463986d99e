"""How a link's collector adapts its load when the benchmark does not say (launcher/adaptive_load.py)."""

from __future__ import annotations

import pytest

from gymslurm.launcher.adaptive_load import adaptive_overrides, chosen_by_benchmark, model_servers
from gymslurm.launcher.settings import ServerSettings

URLS = {"policy": "http://n1:8000", "env": "http://n1:9000"}
REPLICAS = {"policy": "http://n1:7000", "policy-r0": "http://n2:8000", "policy-r1": "http://n3:8000"}


@pytest.mark.parametrize(
    ("overrides", "models", "urls", "serves", "expected"),
    [
        # the benchmark chose: nothing is added, whatever the servers serve
        (["+dispatch_adaptive=off"], ["policy"], URLS, {"policy": True}, []),
        (["dispatch_adaptive=latency"], ["policy"], URLS, {"policy": True}, []),
        (["++dispatch_adaptive=metrics", "+dispatch_model_metrics_url=x"], [], URLS, {}, []),
        # the model server's /metrics answers with a queue: its queue decides
        (
            [],
            ["policy"],
            URLS,
            {"policy": True},
            ["+dispatch_adaptive=metrics", "+dispatch_model_metrics_url=http://n1:8000/metrics"],
        ),
        # replicas: each one's /metrics, quoted (a comma in a Hydra override is a sweep)
        (
            ["+concurrency=64"],
            ["policy"],
            REPLICAS,
            {"policy": True},
            [
                "+dispatch_adaptive=metrics",
                '+dispatch_model_metrics_url="http://n2:8000/metrics,http://n3:8000/metrics"',
            ],
        ),
        # no metrics there, or no model server in the stack: latency decides
        ([], ["policy"], URLS, {"policy": False}, ["+dispatch_adaptive=latency"]),
        ([], [], URLS, {}, ["+dispatch_adaptive=latency"]),
    ],
)
def test_the_load_adapts_to_the_model_queue_where_it_is_served_else_to_latency(
    overrides: list[str],
    models: list[str],
    urls: dict[str, str],
    serves: dict[str, bool],
    expected: list[str],
) -> None:
    """The benchmark's own dispatch_adaptive wins; else metrics where a model server serves them;
    else latency."""
    assert adaptive_overrides(overrides, models, urls, serves).overrides == expected


def test_the_job_log_says_why() -> None:
    """The sentence names the model server and what decided."""
    assert "'policy'" in adaptive_overrides([], ["policy"], URLS, {"policy": True}).why
    assert "serves no vLLM/SGLang metrics" in adaptive_overrides([], ["policy"], URLS, {"policy": False}).why
    assert "no model server" in adaptive_overrides([], [], URLS, {}).why


def test_only_a_key_named_dispatch_adaptive_is_a_choice() -> None:
    """``+dispatch_adaptive_x=1`` or a metrics URL alone choose nothing."""
    assert chosen_by_benchmark(["+dispatch_adaptive=off"])
    assert not chosen_by_benchmark(["+dispatch_model_metrics_url=http://a/metrics", "+concurrency=8"])


def test_model_servers_are_those_probed_as_completions() -> None:
    """A server probed by chat_completions or completions is a model server; a health-probed one is not."""
    servers = [
        ServerSettings.model_validate({"name": "policy", "url": "http://a:1", "probe": "chat_completions"}),
        ServerSettings.model_validate({"name": "base", "url": "http://a:2", "probe": "completions"}),
        ServerSettings.model_validate({"name": "env", "url": "http://a:3"}),
    ]
    assert model_servers(servers) == ["policy", "base"]


def test_a_model_server_still_loading_is_read_once_its_metrics_answer() -> None:
    """A suite link starts its collectors while the model server loads: not asked (it cannot
    answer yet), its queue is read once it does (latency until then), and the job log says so;
    the benchmark's own choice still wins."""
    loading = frozenset({"policy"})
    choice = adaptive_overrides([], ["policy"], URLS, {"policy": False}, loading)
    assert choice.overrides == [
        "+dispatch_adaptive=metrics",
        "+dispatch_model_metrics_url=http://n1:8000/metrics",
    ]
    assert "loading" in choice.why
    assert adaptive_overrides(["+dispatch_adaptive=off"], ["policy"], URLS, {}, loading).overrides == []
