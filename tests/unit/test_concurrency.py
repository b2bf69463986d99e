"""The adaptive in-flight limit (gymslurm/concurrency.py), rule by rule."""

from __future__ import annotations

import pytest

from gymslurm.concurrency import AdaptiveLimit


def test_the_limit_starts_small_and_never_passes_the_cap() -> None:
    """It starts at 8 (or the cap when smaller) and growth stops at ``+concurrency``."""
    assert AdaptiveLimit(cap=4).current == 4
    limit = AdaptiveLimit(cap=20)
    assert limit.current == 8
    for _ in range(200):
        limit.completed(0.1, in_flight=limit.current)
    assert limit.current == 20


def test_fast_answers_with_the_limit_in_use_double_it_per_window() -> None:
    """In slow start each fast completion at a full limit adds one: 8 completions take 8 to 16."""
    limit = AdaptiveLimit(cap=1000)
    for _ in range(8):
        limit.completed(0.1, in_flight=limit.current - 1)
    assert limit.current == 16


def test_an_unused_limit_does_not_grow() -> None:
    """Completions while far fewer requests are out than allowed say nothing about capacity."""
    limit = AdaptiveLimit(cap=1000)
    for _ in range(100):
        limit.completed(0.1, in_flight=1)
    assert limit.current == 8


def test_a_slow_answer_shrinks_the_limit_once_per_window() -> None:
    """Latency past tolerance × the fastest seen cuts the limit by 10 %, once per window of completions."""
    limit = AdaptiveLimit(cap=1000, limit=100)
    limit.completed(0.1, in_flight=99)
    grown = limit.limit
    limit.completed(0.5, in_flight=99)
    assert limit.limit == grown * 0.9
    limit.completed(0.5, in_flight=99)
    assert limit.limit == grown * 0.9


def test_after_the_first_shrink_growth_is_one_per_window() -> None:
    """Past slow start a window of fast completions at a full limit adds about one."""
    limit = AdaptiveLimit(cap=1000, limit=50)
    limit.completed(0.1, in_flight=49)
    limit.completed(0.5, in_flight=49)
    before = limit.limit
    for _ in range(int(before)):
        limit.completed(0.1, in_flight=limit.current - 1)
    assert 0.9 < limit.limit - before < 1.1


def test_a_waiting_queue_at_the_server_shrinks_and_holds_the_limit() -> None:
    """Requests waiting at the model server cut the limit by as many and stop growth until none waits."""
    limit = AdaptiveLimit(cap=1000, limit=40)
    limit.server_queue(waiting=5)
    assert limit.current == 35
    for _ in range(50):
        limit.completed(0.1, in_flight=limit.current - 1)
    assert limit.current == 35
    limit.server_queue(waiting=0)
    limit.completed(0.1, in_flight=limit.current - 1)
    assert limit.limit > 35


def test_the_limit_never_falls_below_one() -> None:
    """However slow the server gets, one request stays in flight."""
    limit = AdaptiveLimit(cap=10, limit=1)
    limit.completed(0.1, in_flight=0)
    for _ in range(50):
        limit.completed(10.0, in_flight=0)
        limit.server_queue(waiting=100)
    assert limit.current == 1


def test_the_queue_length_is_read_from_vllm_or_sglang_metrics() -> None:
    """vLLM's ``num_requests_waiting`` (summed over label sets), else SGLang's ``num_queue_reqs``."""
    from gymslurm.dispatch.calls import parse_queue_length

    vllm = (
        '# HELP vllm:num_requests_waiting x\nvllm:num_requests_waiting{model_name="a"} 3.0\n'
        'vllm:num_requests_waiting{model_name="b"} 2.0\nvllm:num_requests_waiting_total 99\n'
    )
    assert parse_queue_length(vllm) == 5
    assert parse_queue_length('sglang:num_queue_reqs{name="m"} 7\n') == 7
    assert parse_queue_length("other_metric 1\n") is None


def test_a_nearly_full_kv_cache_holds_the_limit_though_none_waits() -> None:
    """KV cache at 95 % or more (none waiting yet): the limit neither grows nor drops; below, it grows."""
    limit = AdaptiveLimit(cap=1000, limit=40)
    limit.server_queue(waiting=0, kv_usage=0.97)
    for _ in range(50):
        limit.completed(0.1, in_flight=limit.current - 1)
    assert limit.current == 40
    limit.server_queue(waiting=0, kv_usage=0.5)
    limit.completed(0.1, in_flight=limit.current - 1)
    assert limit.limit > 40


def test_the_load_is_read_from_vllm_or_sglang_metrics_and_replicas_add_up() -> None:
    """Waiting and running requests and the KV cache's fullness (vLLM v1 or v0 names, SGLang's);
    several replicas' loads: waiting and running summed, the fullest cache."""
    from gymslurm.dispatch.calls import ModelLoad, combined_load, parse_model_load

    vllm = ('vllm:num_requests_waiting{model_name="a"} 3.0\nvllm:num_requests_running{model_name="a"} 8\n'
            'vllm:kv_cache_usage_perc{model_name="a"} 0.41\n')  # fmt: skip
    assert parse_model_load(vllm) == ModelLoad(3, 8, 0.41)
    v0 = "vllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.9\n"
    assert parse_model_load(v0) == ModelLoad(0, None, 0.9)
    sglang = "sglang:num_queue_reqs 2\nsglang:num_running_reqs 5\nsglang:token_usage 0.7\n"
    assert parse_model_load(sglang) == ModelLoad(2, 5, 0.7)
    assert parse_model_load("other_metric 1\n") is None
    replicas = [ModelLoad(3, 8, 0.41), ModelLoad(1, None, 0.96), ModelLoad(0, 2)]
    assert combined_load(replicas) == ModelLoad(4, 10, 0.96)
    assert combined_load([]) is None


def test_metrics_urls_of_replicas_are_given_comma_separated() -> None:
    """``+dispatch_model_metrics_url=A,B``: one URL per replica; each must be an http(s) URL."""
    from gymslurm.errors import ConfigError
    from gymslurm.settings import CollectSettings

    base = {"input_jsonl_fpath": "in.jsonl", "output_jsonl_fpath": "out.jsonl",
            "environment_server_url": "http://127.0.0.1:1", "dispatch_adaptive": "metrics"}  # fmt: skip
    settings = CollectSettings.model_validate(
        {**base, "dispatch_model_metrics_url": "http://a:1/metrics, http://b:2/metrics/"}
    )
    assert settings.model_metrics_urls == ["http://a:1/metrics", "http://b:2/metrics"]
    with pytest.raises((ConfigError, ValueError)):
        CollectSettings.model_validate({**base, "dispatch_model_metrics_url": "http://a:1/metrics,ftp://b"})
