"""The adaptive in-flight limit (gymslurm/concurrency.py), rule by rule."""

from __future__ import annotations

import random

import pytest

from gymslurm.concurrency import AdaptiveLimit


def _window(limit: AdaptiveLimit, latency_s: float, in_flight: int | None = None) -> None:
    """One window of completions at ``latency_s``, the limit in use (or ``in_flight`` others out)."""
    for _ in range(max(limit.current, limit.window)):
        limit.completed(latency_s, limit.current - 1 if in_flight is None else in_flight)


def test_the_limit_starts_small_and_never_passes_the_cap() -> None:
    """It starts at 8 (or the cap when smaller) and growth stops at ``+concurrency``."""
    assert AdaptiveLimit(cap=4).current == 4
    limit = AdaptiveLimit(cap=20)
    assert limit.current == 8
    for _ in range(5):
        _window(limit, 0.1)
    assert limit.current == 20


def test_the_limit_moves_once_per_window_and_doubles_in_slow_start() -> None:
    """Nothing moves within a window; a window of answers within tolerance, the limit in use, doubles it."""
    limit = AdaptiveLimit(cap=1000)
    for _ in range(limit.window - 1):
        limit.completed(0.1, in_flight=7)
    assert limit.current == 8
    limit.completed(0.1, in_flight=7)
    assert limit.current == 16


def test_an_unused_limit_does_not_grow() -> None:
    """Completions while far fewer requests are out than allowed say nothing about capacity."""
    limit = AdaptiveLimit(cap=1000)
    for _ in range(3):
        _window(limit, 0.1, in_flight=1)
    assert limit.current == 8


def test_a_slow_window_cuts_the_limit_in_proportion_and_ends_slow_start() -> None:
    """A window whose mean latency is past tolerance × the lowest window mean cuts the limit by
    tolerance × lowest ÷ mean (at least 10 %, at most half); past slow start a window within
    tolerance adds one."""
    limit = AdaptiveLimit(cap=1000, limit=100)
    _window(limit, 0.1)
    grown = limit.limit
    _window(limit, 0.25)
    assert limit.limit == pytest.approx(grown * 0.8, rel=0.01) and not limit.slow_start
    cut = limit.limit
    _window(limit, 0.25)  # the window after a cut settles: its requests were sent before it
    assert limit.limit == cut
    _window(limit, 0.15)  # fell by more than half of the 20 % the cut predicts: it was the load
    assert limit.limit == cut + 1
    _window(limit, 1.0)
    assert limit.limit == pytest.approx((cut + 1) * 0.5)


def test_a_cut_that_does_not_bring_the_latency_down_raises_the_lowest_mean() -> None:
    """Latency that stays up after a cut (and its settling window) was the work, not the load: the
    lowest mean rises to that window's (over 1.3), so no further cut follows, and growth goes on from
    the cut limit (not back to where it was: a server whose backlog drains slowly would be
    overloaded again)."""
    limit = AdaptiveLimit(cap=1000, limit=100)
    _window(limit, 0.1)
    before = limit.limit
    _window(limit, 0.4)
    cut = limit.limit
    assert cut == pytest.approx(before * 0.5, rel=0.01)
    _window(limit, 0.4)
    _window(limit, 0.38)
    assert limit.limit == cut and limit.baseline_s == pytest.approx(0.38 / 1.3)
    _window(limit, 0.38)
    assert limit.limit == cut + 1


def test_a_climbing_latency_ends_the_doubling_before_it_cuts() -> None:
    """In slow start a window 1.3 times slower than the lowest still grows the limit, by one only."""
    limit = AdaptiveLimit(cap=1000)
    _window(limit, 1.0)
    assert limit.current == 16
    _window(limit, 1.5)
    assert limit.current == 17 and not limit.slow_start


def test_one_slow_rollout_in_a_window_is_not_a_slow_server() -> None:
    """Rollouts differ in length: a window with some long ones but a mean within bounds doubles."""
    limit = AdaptiveLimit(cap=1000)
    _window(limit, 1.0)
    for number in range(limit.window):
        limit.completed(10.0 if number % 32 == 0 else 1.0, in_flight=limit.current - 1)
    assert limit.current == 32


def _closed_loop(
    limit: AdaptiveLimit, sigma: float, slots: int | None, n: int, *, seed: int = 1, growth: float = 0.0
) -> list[int]:
    """A deterministic simulation: rollouts of lognormal length (``sigma``) at a server that serves
    ``slots`` at full speed and shares itself beyond (None: no limit); the limit after each completion.
    With ``growth``, the rollouts get longer as the run goes on: the last is 1 + growth times the first."""
    rnd, t, out, seen, started = random.Random(seed), 0.0, [], [], 0
    for _ in range(n):
        while len(out) < limit.current:
            out.append([rnd.lognormvariate(0, sigma) * (1 + growth * started / n), t])
            started += 1
        rate = 1.0 if slots is None else min(1.0, slots / len(out))
        first = min(range(len(out)), key=lambda k: out[k][0])
        step = out[first][0] / rate
        for request in out:
            request[0] -= step * rate
        t += step
        _, sent = out.pop(first)
        limit.completed(t - sent, len(out))
        seen.append(limit.current)
    return seen


@pytest.mark.parametrize("sigma", [0.0, 0.3, 1.0])
def test_rollouts_of_different_lengths_at_a_server_with_room_keep_the_limit_at_the_cap(sigma: float) -> None:
    """No capacity limit, rollouts of lognormal length: the limit stays near the cap (it fell to 5 of
    64 at sigma 0.3 and to 1 at sigma 1.0 when each request was judged against the fastest one)."""
    seen = _closed_loop(AdaptiveLimit(cap=64), sigma, slots=None, n=12_000)
    assert min(seen[len(seen) // 2 :]) >= 48


@pytest.mark.parametrize("growth", [2.0, 5.0])
@pytest.mark.parametrize("sigma", [0.0, 0.3, 1.0])
def test_rollouts_that_get_longer_over_the_run_do_not_starve_a_server_with_room(
    sigma: float, growth: float
) -> None:
    """A dataset ordered easy to hard: rollouts 3x (6x) longer by the end, no capacity limit: the
    limit stays high (it fell to 1 of 64 when cuts were not judged by their effect)."""
    seen = _closed_loop(AdaptiveLimit(cap=64), sigma, slots=None, n=6_000, growth=growth)
    late = seen[len(seen) // 2 :]
    assert sum(late) / len(late) >= 40, sum(late) / len(late)


@pytest.mark.parametrize("sigma", [0.0, 0.3, 1.0])
def test_rollouts_that_get_longer_at_a_server_of_16_slots_keep_it_busy_and_bounded(sigma: float) -> None:
    """Rollouts 3x longer by the end at 16 slots, cap 512: every slot stays busy, the queue bounded."""
    seen = _closed_loop(AdaptiveLimit(cap=512), sigma, slots=16, n=6_000, growth=2.0)
    late = seen[len(seen) // 2 :]
    assert 16 <= sum(late) / len(late) <= 96, sum(late) / len(late)


@pytest.mark.parametrize("sigma", [0.0, 0.3, 1.0])
def test_a_server_of_16_slots_keeps_the_limit_past_its_slots_but_far_from_the_cap(sigma: float) -> None:
    """16 slots, cap 512: the limit settles above 16 (every slot busy) and far below 512 (queue bounded)."""
    seen = _closed_loop(AdaptiveLimit(cap=512), sigma, slots=16, n=6_000)
    late = seen[len(seen) // 2 :]
    assert 16 <= sum(late) / len(late) <= 64, sum(late) / len(late)


def test_a_waiting_queue_at_the_server_shrinks_and_holds_the_limit() -> None:
    """Requests waiting at the model server cut the limit by as many and stop growth until none waits."""
    limit = AdaptiveLimit(cap=1000, limit=40)
    limit.server_queue(waiting=5)
    assert limit.current == 35
    _window(limit, 0.1)
    _window(limit, 0.1)
    assert limit.current == 35
    limit.server_queue(waiting=0)
    _window(limit, 0.1)
    assert limit.limit > 35


def test_the_limit_never_falls_below_one() -> None:
    """However slow the server gets, one request stays in flight."""
    limit = AdaptiveLimit(cap=10, limit=1)
    for latency in (0.1, *[10.0] * 20):
        _window(limit, latency, in_flight=0)
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
    _window(limit, 0.1)
    assert limit.current == 40
    limit.server_queue(waiting=0, kv_usage=0.5)
    _window(limit, 0.1)
    assert limit.limit > 40


def test_the_load_is_read_from_vllm_or_sglang_metrics_and_replicas_add_up() -> None:
    """Waiting and running requests and the KV cache's fullness (vLLM v1 or v0 names, SGLang's);
    several replicas' loads: waiting and running summed, the fullest cache."""
    from gymslurm.dispatch.calls import ModelLoad, combined_load, parse_model_load

    vllm = (
        'vllm:num_requests_waiting{model_name="a"} 3.0\nvllm:num_requests_running{model_name="a"} 8\n'
        'vllm:kv_cache_usage_perc{model_name="a"} 0.41\n'
    )
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

    base = {
        "input_jsonl_fpath": "in.jsonl",
        "output_jsonl_fpath": "out.jsonl",
        "environment_server_url": "http://127.0.0.1:1",
        "dispatch_adaptive": "metrics",
    }
    settings = CollectSettings.model_validate(
        {**base, "dispatch_model_metrics_url": "http://a:1/metrics, http://b:2/metrics/"}
    )
    assert settings.model_metrics_urls == ["http://a:1/metrics", "http://b:2/metrics"]
    with pytest.raises((ConfigError, ValueError)):
        CollectSettings.model_validate({**base, "dispatch_model_metrics_url": "http://a:1/metrics,ftp://b"})


def test_a_shared_limit_cuts_only_what_is_above_its_share_of_the_full_server() -> None:
    """Sharing a full server of 16 slots by half: a collector holding 14 is cut to its 8, never by
    more than the queue; one holding 4 is not cut, and may still grow."""
    over = AdaptiveLimit(cap=64, share=0.5, limit=14)
    over.server_queue(waiting=2, running=16, in_flight=14)
    assert over.current == 12
    over.server_queue(waiting=10, running=16, in_flight=12)
    assert over.current == 8
    under = AdaptiveLimit(cap=64, share=0.5, limit=4, slow_start=False)
    under.server_queue(waiting=2, running=16, in_flight=4)
    assert under.current == 4 and not under.queue_says_full
    _window(under, 0.1)
    assert under.current > 4


def test_a_shared_limit_alone_at_the_server_is_cut_as_if_unshared() -> None:
    """A collector whose partners ended holds the whole server: the queue cuts it by as many."""
    alone = AdaptiveLimit(cap=64, share=0.2, limit=20)
    alone.server_queue(waiting=4, running=16, in_flight=20)
    assert alone.current == 16 and alone.queue_says_full


def _share_server(shares: tuple[float, float], turns: tuple[int, int], slots: int = 16) -> list[int]:
    """Two collectors, one with rollouts ``turns`` times longer, at a server of ``slots``: each
    second each completes its in-flight share of requests (a rollout of k turns k times slower)
    and the server's queue is polled; their limits after 600 s."""
    limits = [AdaptiveLimit(cap=64, share=share) for share in shares]
    done = [0.0, 0.0]
    for _ in range(600):
        held = [lim.current for lim in limits]
        running, waiting = min(sum(held), slots), max(sum(held) - slots, 0)
        for i, lim in enumerate(limits):
            served = held[i] * running / max(sum(held), 1)  # the slots go to requests in arrival mix
            done[i] += served / turns[i]
            for _ in range(int(done[i])):
                lim.completed(1.0 * turns[i] * max(1.0, sum(held) / slots), held[i] - 1)
            done[i] -= int(done[i])
            lim.server_queue(waiting, running=running, in_flight=held[i])
    return [lim.current for lim in limits]


def test_benchmarks_of_short_and_long_rollouts_sharing_the_server_each_keep_their_half() -> None:
    """Shared by halves, a benchmark of 1-turn rollouts and one of 10-turn rollouts each keep about
    half of the server's 16 slots. Unshared, each cut by the whole queue, the one whose windows
    fill slowly (the long rollouts) grows slowest and is cut to almost nothing."""
    assert all(abs(held - 8) <= 1 for held in _share_server((0.5, 0.5), (1, 10)))
    short, long = _share_server((1.0, 1.0), (1, 10))
    assert long <= 2
    assert short >= 12


def test_a_shared_limit_decides_on_its_share_of_a_window() -> None:
    """A collector with a fifth of the server sees a fifth of its completions: it moves its limit
    every 13 of them, not every 64, so the server's decisions keep their pace."""
    limit = AdaptiveLimit(cap=64, share=0.2, limit=2, slow_start=False)
    for _ in range(13):
        limit.completed(0.1, 1)
    assert limit.current == 3


def test_shares_of_a_server_too_small_for_a_whole_request_each_still_fill_it() -> None:
    """Five collectors with a fifth of a server of 8 slots each (1.6 requests): each keeps 2, so
    the server stays full (2 waiting) instead of 5 requests at 8 slots (each cut to 1)."""
    limits = [AdaptiveLimit(cap=64, share=0.2) for _ in range(5)]
    for _ in range(120):
        held = [lim.current for lim in limits]
        running, waiting = min(sum(held), 8), max(sum(held) - 8, 0)
        for lim, mine in zip(limits, held, strict=True):
            for _ in range(max(1, mine * running // max(sum(held), 1))):
                lim.completed(1.0 * max(1.0, sum(held) / 8), mine - 1)
            lim.server_queue(waiting, running=running, in_flight=mine)
    assert [lim.current for lim in limits] == [2] * 5


def test_a_slower_window_while_the_model_serves_what_was_sent_with_room_is_its_batching() -> None:
    """The model server said nothing waits and it serves every request out: a window twice as slow
    is its batching (a bigger batch per step), so the doubling goes on and nothing is cut."""
    limit = AdaptiveLimit(cap=1000)
    _window(limit, 1.0)
    limit.server_queue(waiting=0, running=16, in_flight=16)
    _window(limit, 3.0)
    assert (limit.current, limit.slow_start) == (32, True)


@pytest.mark.parametrize(
    ("waiting", "running", "in_flight"),
    [(0, 4, 32), (2, 10, 32), (0, None, 32)],
    ids=["most requests elsewhere (the Environment Server full)", "a few at the model", "no running count"],
)
def test_a_slower_window_is_judged_on_latency_unless_the_model_accounts_for_it(
    waiting: int, running: int | None, in_flight: int
) -> None:
    """Latency still cuts when the model server does not account for it: most requests out are not
    at the model, served or waiting (a queue in front of it), or it gives no running count."""
    limit = AdaptiveLimit(cap=1000, limit=40, slow_start=False)
    _window(limit, 1.0)
    limit.server_queue(waiting=waiting, running=running, in_flight=in_flight)
    before = limit.limit
    _window(limit, 3.0)
    assert limit.limit < before


def test_requests_waiting_at_the_model_are_cut_by_the_queue_not_again_by_latency() -> None:
    """40 out, 32 served and 8 waiting: the queue rule cuts the 8, and the slower window that
    follows (the model's queue) cuts no further (cut twice, the limit fell to 17 against vLLM)."""
    limit = AdaptiveLimit(cap=1000, limit=40, slow_start=False)
    _window(limit, 1.0)
    limit.server_queue(waiting=8, running=32, in_flight=40)
    assert limit.current == 32
    _window(limit, 3.0)
    assert limit.current == 32


def test_a_poll_says_room_for_its_own_window_only() -> None:
    """A window with no poll of its own is judged on latency, as without metrics."""
    limit = AdaptiveLimit(cap=1000, limit=40, slow_start=False)
    _window(limit, 1.0)
    limit.server_queue(waiting=0, running=40, in_flight=40)
    _window(limit, 1.0)
    before = limit.limit
    _window(limit, 3.0)
    assert limit.limit < before


def _batching_server(fixed: int | None, *, seqs: int = 32, seconds: int = 900) -> tuple[float, float]:
    """A CPU vLLM as ``bench/adaptive.py --vllm`` measured it: each step computes every running
    request (a step takes 22.5 ms + 7.1 ms per running request), 16 tokens a rollout, ``seqs``
    (``--max-num-seqs``) at once and the rest waiting; its metrics polled each second. The
    throughput (rollouts/s) and the mean limit over the second half, at ``fixed`` or adaptive."""
    limit = AdaptiveLimit(cap=64) if fixed is None else None
    done, rates, held_seen, tick = 0.0, [], [], 0.1
    for step in range(int(seconds / tick)):
        held = fixed if limit is None else limit.current
        running, waiting = min(held, seqs), max(held - seqs, 0)
        rate = running / (16 * (0.0225 + 0.0071 * running))
        done += rate * tick
        if limit is not None:
            for _ in range(int(done)):
                limit.completed(held / rate, held - 1)
            if step % 10 == 0:
                limit.server_queue(waiting, running=running, in_flight=held)
        done -= int(done)
        if step * tick >= seconds / 2:
            rates.append(rate)
            held_seen.append(held)
    return sum(rates) / len(rates), sum(held_seen) / len(held_seen)


def test_against_a_batching_model_server_the_limit_settles_at_its_batch_and_matches_the_best_fixed() -> None:
    """A vLLM whose latency grows with its batch while its throughput still grows: with its metrics
    the limit settles at its ``--max-num-seqs`` (32) and reaches 0.95 of the best fixed setting's
    throughput (judged on latency alone it was cut at about 16: 2x the lowest latency)."""
    best = max(_batching_server(fixed)[0] for fixed in (4, 8, 16, 32, 64))
    rate, mean_limit = _batching_server(None)
    assert rate >= 0.95 * best, (rate, best)
    assert 30 <= mean_limit <= 36, mean_limit


def test_the_same_queue_polled_again_cuts_no_further() -> None:
    """64 out, 32 of them waiting at the server: the limit drops to the 32 served, and the next polls
    of the same queue (a generation outlasts many polls) leave it there (it fell to 2 against vLLM)."""
    limit = AdaptiveLimit(cap=64, limit=64)
    for _ in range(8):
        limit.server_queue(waiting=32, running=32, in_flight=64)
    assert limit.current == 32


@pytest.mark.parametrize(("share", "start"), [(1.0, 8), (0.5, 4), (0.2, 2), (1 / 41, 1)])
def test_a_shared_limit_starts_at_its_share_of_the_start(share: float, start: int) -> None:
    """A suite's collectors start, together, at about what one alone starts at (8), each its share
    rounded up: five at 8 each sent 40 requests at once to a server of 8 slots."""
    assert AdaptiveLimit.shared(64, share).current == start


def test_a_new_share_bounds_what_the_limit_keeps_from_the_next_poll() -> None:
    """A quarter of a full server of 8 slots is 2; told its share is now 1/41, the collector is cut
    to its one request at the next poll (never by more than the queue)."""
    limit = AdaptiveLimit.shared(64, 0.25)
    limit.server_queue(waiting=2, running=8, in_flight=2)
    assert limit.current == 2
    limit.set_share(1 / 41)
    limit.server_queue(waiting=2, running=8, in_flight=2)
    assert limit.current == 1


def _served(shares: list[float], turns: list[int], slots: int = 8) -> list[float]:
    """Collectors whose rollouts take ``turns`` model calls at a server of ``slots``: each second the
    slots go to the requests in flight in their mix, the queue is polled; each one's part of what
    the server served over 600 s."""
    limits = [AdaptiveLimit.shared(64, share) for share in shares]
    done, served = [0.0] * len(limits), [0.0] * len(limits)
    for _ in range(600):
        held = [lim.current for lim in limits]
        running, waiting = min(sum(held), slots), max(sum(held) - slots, 0)
        for i, lim in enumerate(limits):
            served[i] += held[i] * running / max(sum(held), 1)
            done[i] += held[i] * running / max(sum(held), 1) / turns[i]
            for _ in range(int(done[i])):
                lim.completed(1.0 * turns[i] * max(1.0, sum(held) / slots), held[i] - 1)
            done[i] -= int(done[i])
            lim.server_queue(waiting, running=running, in_flight=held[i])
    return [part / sum(served) for part in served]


def test_shares_by_work_left_give_four_short_benchmarks_more_of_the_server_beside_a_long_one() -> None:
    """bench/suite.py's slow neighbour at a server of 8 slots: four benchmarks of one model call a
    rollout and one of ten. By weight alone (a fifth each) the four are served 4/5 of the server,
    so they cannot end sooner than 1.25x their time alone; by work left (10/41 each, 1/41 for the
    long one: suite_rules.load_shares) the long one keeps one request and the four 8/9."""
    turns = [1, 1, 1, 1, 10]
    by_weight = _served([0.2] * 5, turns)
    by_work = _served([10 / 41] * 4 + [1 / 41], turns)
    assert sum(by_weight[:4]) == pytest.approx(0.8, abs=0.01)
    assert sum(by_work[:4]) == pytest.approx(8 / 9, abs=0.01)


def test_a_larger_share_raises_the_limit_at_once_to_its_part_of_the_servers_capacity() -> None:
    """The long benchmark held to 1 request of a full server of 8 slots (share 1/41) is given the
    whole server once the others ended: its limit is 8 at once, not 1 more per 64 completions."""
    limit = AdaptiveLimit.shared(64, 1 / 41)
    limit.server_queue(waiting=4, running=8, in_flight=1)
    assert limit.current == 1
    limit.set_share(1.0)
    assert limit.current == 8
    limit.set_share(0.5)  # a smaller share waits for the next poll of a full server
    assert limit.current == 8


def _revealed(limit: int = 64) -> AdaptiveLimit:
    """A limit past slow start whose queue showed vLLM's batch: 64 out, 32 running, 19 waiting, 13
    elsewhere (the overshoot ``bench/adaptive.py --vllm`` logged); the queue rule cut it to 45."""
    adaptive = AdaptiveLimit(cap=64, limit=limit)
    _window(adaptive, 1.0)
    adaptive.server_queue(waiting=19, running=32, in_flight=64)
    return adaptive


def test_the_queue_reveals_the_batch_and_the_ceiling() -> None:
    """A poll with requests waiting gives the engine's batch (``running``) and the ceiling: that batch
    plus what was out elsewhere (64 out, 32 + 19 at the model: 13 elsewhere)."""
    limit = _revealed()
    assert (limit.capacity, limit.ceiling, limit.current) == (32, 45, 45)


def test_the_limit_does_not_grow_past_the_revealed_batch_and_what_was_out_elsewhere() -> None:
    """Fast windows with none waiting leave the limit at the ceiling (before, it grew one a window
    until the queue cut it again)."""
    limit = _revealed()
    for _ in range(5):
        limit.server_queue(waiting=0, running=32, in_flight=45)
        _window(limit, 1.0)
    assert limit.current == 45


def test_a_later_queue_moves_the_ceiling() -> None:
    """Each poll with requests waiting measures the ceiling again (2 waiting of 40 out, 32 running:
    38), so fewer requests elsewhere lower it and more raise it."""
    limit = _revealed()
    limit.server_queue(waiting=2, running=32, in_flight=40)
    assert (limit.ceiling, limit.current) == (38, 38)


def test_a_latency_cut_stops_at_the_revealed_batch_while_none_waits() -> None:
    """The front ends hold what is out (vLLM: 1 running, none waiting, 40 out) and a window is 3x
    slower: the latency rule cuts, but not below the batch of 32 (it cut to 15-23 against vLLM)."""
    limit = _revealed()
    _window(limit, 1.0)  # the window of the revealing poll: the model held what was out
    limit.server_queue(waiting=0, running=1, in_flight=40)
    _window(limit, 3.0)
    assert limit.current == 32


def test_at_the_revealed_batch_a_slow_window_with_none_waiting_does_not_cut() -> None:
    """A limit at the batch is not cut on latency while the model holds nothing waiting."""
    limit = _revealed()
    limit.limit = 32.0
    _window(limit, 1.0)
    limit.server_queue(waiting=0, running=1, in_flight=32)
    _window(limit, 5.0)
    assert limit.current == 32


def test_without_a_revealed_batch_latency_cuts_as_deep_as_it_says() -> None:
    """No poll ever showed requests waiting: a slow window cuts in proportion (to half), as before."""
    limit = AdaptiveLimit(cap=64, limit=40, slow_start=False)
    _window(limit, 1.0)
    limit.server_queue(waiting=0, running=1, in_flight=40)
    _window(limit, 5.0)
    assert limit.current == 20


def test_a_shared_limit_is_cut_on_latency_to_its_share_of_the_revealed_batch_and_has_no_ceiling() -> None:
    """Sharing the server, the floor is its share of the batch (a half of 32: 16, not the 15 the
    latency asks for); the server's
    ``running`` counts others' requests too, so no ceiling is drawn from it."""
    limit = AdaptiveLimit(cap=64, share=0.5, limit=30, slow_start=False)
    _window(limit, 1.0)
    limit.server_queue(waiting=0, kv_usage=0.97, running=32, in_flight=20)  # full: its batch is 32
    _window(limit, 1.0)
    limit.server_queue(waiting=0, kv_usage=0.1, running=2, in_flight=20)
    _window(limit, 5.0)
    assert (limit.ceiling, limit.current) == (None, 16)


def test_one_poll_of_the_window_finding_the_batch_at_the_model_makes_the_latency_its_own() -> None:
    """A batch of equal generations moves in step: one poll finds all 16 out at the model, the next
    none (they make their round trip through the front ends). The window's slower mean is the
    model's batching, so the doubling goes on (judged on the last poll, it ended at 16)."""
    limit = AdaptiveLimit(cap=64)
    _window(limit, 1.0)
    limit.server_queue(waiting=0, running=16, in_flight=16)
    limit.server_queue(waiting=0, running=0, in_flight=16)
    _window(limit, 3.0)
    assert (limit.current, limit.slow_start) == (32, True)


def _doubled_window(latency_s: float, *, metrics: bool) -> AdaptiveLimit:
    """A window at 8 (1 s), then one at 16 taking ``latency_s``; with ``metrics`` each window has
    a poll finding nothing at the model (the front ends hold what is out)."""
    limit = AdaptiveLimit(cap=64)
    for latency in (1.0, latency_s):
        if metrics:
            limit.server_queue(waiting=0, running=0, in_flight=limit.current)
        _window(limit, latency)
    return limit


def test_in_slow_start_a_slower_window_that_still_gains_throughput_doubles_on() -> None:
    """16 in flight at 1.6 s is 10 a second against 8 at 1 s (1.25x): the doubled limit still pays,
    so the longer latency neither ends the doubling nor counts against it (it ended at 16 against
    CPU vLLM, whose front ends' latency doubled while fixed 32 gave 1.7x fixed 16)."""
    limit = _doubled_window(1.6, metrics=True)
    assert (limit.current, limit.slow_start) == (32, True)


def test_in_slow_start_a_slower_window_gaining_too_little_ends_the_doubling() -> None:
    """16 at 1.8 s is 8.9 a second, under 1.2x the 8 a second before: the doubling ends."""
    limit = _doubled_window(1.8, metrics=True)
    assert (limit.current, limit.slow_start) == (17, False)


def test_without_the_model_servers_metrics_a_climbing_latency_ends_the_doubling() -> None:
    """``latency`` mode (no poll) keeps its rule: 1.6x the lowest mean ends the doubling."""
    limit = _doubled_window(1.6, metrics=False)
    assert (limit.current, limit.slow_start) == (17, False)
