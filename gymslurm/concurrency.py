"""How many requests a collection keeps in flight when the concurrency adapts (pure).

``+concurrency`` stays the cap. With ``+dispatch_adaptive=latency`` the limit follows the servers'
latency (a Vegas-style AIMD): it grows while a completed request took at most ``tolerance`` times
the fastest one seen lately, and shrinks by ``decrease`` (at most once per window of ``limit``
completions) when one took longer, which is when a batching server's slots are full and requests
start to queue. With ``+dispatch_adaptive=metrics`` the model server's own queue decides (vLLM's
``vllm:num_requests_waiting``, summed over its replicas): requests waiting there mean the limit is
past the server's capacity, and the limit drops by as many; a KV cache nearly full
(``vllm:kv_cache_usage_perc``) holds it; none waiting while the limit is in use lets it grow.
Latency is still watched then, so a server whose metrics stop answering is not driven blind.

Why not a fixed number: the right one depends on the model, the GPUs and the load other jobs put
on a shared server; one report measured 256 connections 23 % slower than 8.
"""

from __future__ import annotations

from dataclasses import dataclass

START = 8
TOLERANCE = 2.0
DECREASE = 0.9
KV_FULL = 0.95  # a model server's KV cache this full takes no more requests without queuing them
BASELINE_DRIFT = 1.01  # the fastest latency seen is forgotten slowly: the server may get slower for good


@dataclass
class AdaptiveLimit:
    """The in-flight limit of one collection, moved by what completed requests and the server say."""

    cap: int
    limit: float = START
    tolerance: float = TOLERANCE
    decrease: float = DECREASE
    baseline_s: float | None = None
    slow_start: bool = True
    since_decrease: int = 0
    queue_says_full: bool = False

    def __post_init__(self) -> None:
        self.limit = float(max(1, min(self.cap, self.limit)))

    @property
    def current(self) -> int:
        """How many requests may be in flight now (1 ≤ current ≤ cap)."""
        return max(1, min(self.cap, int(self.limit)))

    def completed(self, latency_s: float, in_flight: int) -> None:
        """One request completed after ``latency_s`` while ``in_flight`` others were out."""
        self.since_decrease += 1
        if self.baseline_s is None or latency_s < self.baseline_s:
            self.baseline_s = latency_s
        else:
            self.baseline_s *= BASELINE_DRIFT ** (1 / max(self.limit, 1.0))
        if latency_s > self.tolerance * self.baseline_s:
            self._shrink()
        elif not self.queue_says_full and in_flight + 1 >= self.current:
            self._grow()

    def server_queue(self, waiting: int, kv_usage: float | None = None) -> None:
        """The model server's own count of requests waiting for a slot (a metrics poll), and how full
        its KV cache is (0..1, where it says).

        Requests waiting there are exactly the excess over the server's capacity: the limit drops
        by that many (not by a fraction), so it settles where every slot is busy and none waits. A
        KV cache at :data:`KV_FULL` or more holds the limit where it is: the next requests would
        wait (or preempt others) though none waits yet.
        """
        self.queue_says_full = waiting > 0 or (kv_usage is not None and kv_usage >= KV_FULL)
        if waiting > 0:
            self.slow_start = False
            self.since_decrease = 0
            self.limit = max(1.0, self.limit - waiting)

    def _grow(self) -> None:
        step = 1.0 if self.slow_start else 1.0 / self.limit  # doubling per window, then +1 per window
        self.limit = min(float(self.cap), self.limit + step)

    def _shrink(self) -> None:
        if self.since_decrease < self.current and not self.slow_start:
            return  # one decrease per window: the requests already out saw the old load
        self.slow_start = False
        self.since_decrease = 0
        self.limit = max(1.0, self.limit * self.decrease)
