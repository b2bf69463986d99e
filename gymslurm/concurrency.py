"""How many requests a collection keeps in flight when the concurrency adapts (pure).

``+concurrency`` stays the cap. The limit moves once per *window* of completions (the limit, at least
:data:`WINDOW`): one request's latency says nothing about load when rollouts differ in length (an
agent's task takes seconds or minutes), but a window's mean does. With ``+dispatch_adaptive=latency``
the limit follows the servers' latency (a Vegas-style AIMD over windows): it doubles per window in
slow start, then grows by one, while the window's mean latency stays within ``tolerance`` times the
lowest window mean seen lately and the limit was in use; past that it shrinks by ``decrease``, which
is when a batching server's slots are full and requests start to queue. With
``+dispatch_adaptive=metrics`` the model server's own queue decides (vLLM's
``vllm:num_requests_waiting``, summed over its replicas): requests waiting there mean the limit is
past the server's capacity, and the limit drops by as many; a KV cache nearly full
(``vllm:kv_cache_usage_perc``) holds it; none waiting while the limit is in use lets it grow. The
latency rule then applies only while the metrics stop answering (no poll for two windows), so a
server whose metrics fail is not driven blind.

Why windows: with a limit judged per request against the fastest one seen, rollouts of lognormal
length (sigma 0.3) held the limit at 5 of 64 in a simulation of a server with no capacity limit at
all, and at sigma 1.0 at 1 (tests/unit/test_concurrency.py runs those simulations).

Why not a fixed number: the right one depends on the model, the GPUs and the load other jobs put
on a shared server; one report measured 256 connections 23 % slower than 8.
"""

from __future__ import annotations

from dataclasses import dataclass

START = 8
WINDOW = 64  # completions per decision at least: a window's mean latency is a load signal, one is not
TOLERANCE = 2.0
DECREASE = 0.9
KV_FULL = 0.95  # a model server's KV cache this full takes no more requests without queuing them
BASELINE_DRIFT = 1.002  # per window: the lowest mean seen is forgotten slowly (the server may slow for good)


@dataclass
class AdaptiveLimit:
    """The in-flight limit of one collection, moved by what completed requests and the server say."""

    cap: int
    limit: float = START
    tolerance: float = TOLERANCE
    decrease: float = DECREASE
    window: int = WINDOW
    baseline_s: float | None = None  # the lowest window mean latency seen lately
    slow_start: bool = True
    queue_says_full: bool = False
    queue_heard: bool = False  # a metrics poll answered within the last two windows
    _count: int = 0
    _total_s: float = 0.0
    _busy: int = 0
    _quiet_windows: int = 0  # windows ended since the last metrics poll answered

    def __post_init__(self) -> None:
        self.limit = float(max(1, min(self.cap, self.limit)))

    @property
    def current(self) -> int:
        """How many requests may be in flight now (1 ≤ current ≤ cap)."""
        return max(1, min(self.cap, int(self.limit)))

    def completed(self, latency_s: float, in_flight: int) -> None:
        """One request completed after ``latency_s`` while ``in_flight`` others were out."""
        self._count += 1
        self._total_s += latency_s
        self._busy += in_flight + 1 >= self.current
        size = max(self.current, self.window)
        if self._count < size:
            return
        mean, busy = self._total_s / self._count, self._busy * 2 >= self._count
        self._count, self._total_s, self._busy = 0, 0.0, 0
        self._quiet_windows += 1
        if self._quiet_windows > 2:
            self.queue_heard = False
        self.baseline_s = mean if self.baseline_s is None else min(mean, self.baseline_s * BASELINE_DRIFT)
        if not self.queue_heard and mean > self.tolerance * self.baseline_s:
            self.slow_start = False
            self.limit = max(1.0, self.limit * self.decrease)
        elif busy and not self.queue_says_full:
            self.limit = min(float(self.cap), self.limit * 2 if self.slow_start else self.limit + 1)

    def server_queue(self, waiting: int, kv_usage: float | None = None) -> None:
        """The model server's own count of requests waiting for a slot (a metrics poll), and how full
        its KV cache is (0..1, where it says).

        Requests waiting there are exactly the excess over the server's capacity: the limit drops
        by that many (not by a fraction), so it settles where every slot is busy and none waits. A
        KV cache at :data:`KV_FULL` or more holds the limit where it is: the next requests would
        wait (or preempt others) though none waits yet.
        """
        self.queue_heard, self._quiet_windows = True, 0
        self.queue_says_full = waiting > 0 or (kv_usage is not None and kv_usage >= KV_FULL)
        if waiting > 0:
            self.slow_start = False
            self.limit = max(1.0, self.limit - waiting)
