"""How many requests a collection keeps in flight when the concurrency adapts (pure).

``+concurrency`` stays the cap. The limit moves once per *window* of completions (the limit, at least
:data:`WINDOW`): one request's latency says nothing about load when rollouts differ in length (an
agent's task takes seconds or minutes), but a window's mean does. With ``+dispatch_adaptive=latency``
the limit follows the servers' latency (a Vegas-style AIMD over windows): it doubles per window in
slow start (until a window's mean is :data:`SLOW_START_END` times the lowest window mean seen
lately), then grows by one, while the limit was in use and the mean stays within ``tolerance``
times that lowest mean; past that it is cut in proportion (``tolerance`` × lowest ÷ mean, between
half and ``decrease``), which is when a batching server's slots are full and requests start to
queue. With ``+dispatch_adaptive=metrics`` the model server's own queue decides too (vLLM's
``vllm:num_requests_waiting``, summed over its replicas): requests waiting there mean the limit is
past the server's capacity, and the limit drops by as many; a KV cache nearly full
(``vllm:kv_cache_usage_perc``) holds it. Latency is still watched then: the Environment Server, not
the model, may be what is full (``bench/adaptive.py``: the demo Environment Server slows past 32
requests while the model server's queue stays empty) -- except in a window where the model server
said it holds what was sent (``running`` and ``waiting`` together at least half of this
collection's in-flight requests): then a longer latency is the model's own, its batching (a step
computes every running request) or its queue (which the queue rule cuts, exactly), so latency
neither cuts the limit again nor ends the doubling, and the lowest mean rises to it
(:meth:`AdaptiveLimit.server_queue`). In slow start with the model's metrics, a slower window whose
throughput (the limit over its mean, Little's law) is still 1.2x the window's before is what the
doubled limit costs while it pays: the doubling goes on (:meth:`AdaptiveLimit._gaining`). The queue
also reveals the model's batch: ``running`` at a poll where requests wait (its ``--max-num-seqs``,
or what its KV cache holds). From then on the limit grows no further than that batch plus what was
out elsewhere at that poll (the *ceiling*, measured again at each such poll), and while nothing
waits at the model a latency cut stops at the batch (:meth:`AdaptiveLimit._batch_floor`): requests
held in front of the model (its API server, the Environment Server) are what the latency rule is
for, but not below what a batching server serves best and the front ends once carried.

Why: a real vLLM computes a step for every running request at once, so its latency grows with the
batch while its throughput still grows, up to ``--max-num-seqs``; only past that do requests wait.
Judged on latency, the limit was cut at about half the batch a CPU vLLM serves best (latency 2x
the lowest at 16 of 32) and grew by one per 64 completions from there: 0.60 of the best fixed
concurrency's throughput in ``bench/adaptive.py --vllm``, while vLLM's own queue never filled.

Why a cut is checked: rollouts that get longer as a run goes on (a dataset ordered easy to hard)
raise the latency with no load at all, and cuts cannot bring it down; judged only against the lowest
mean, the limit fell to 1 of 64 (a simulation of rollouts 3x longer by the end, at a server with
no capacity limit). So a cut is judged by its effect: after a window to settle (what was sent
before it), a window whose mean fell by less than half of what the cut predicts (latency in a queue
falls with the in-flight count) says the latency was the work, not the load: the lowest mean is
raised to that window's, and the limit grows again from where the cut left it (not back to where it
was: an Environment Server whose backlog drains slowly after a cut would be overloaded again)
(:meth:`AdaptiveLimit._judge_cut`).

Why windows: with a limit judged per request against the fastest one seen, rollouts of lognormal
length (sigma 0.3) held the limit at 5 of 64 in a simulation of a server with no capacity limit at
all, and at sigma 1.0 at 1 (tests/unit/test_concurrency.py runs those simulations).

Why not a fixed number: the right one depends on the model, the GPUs and the load other jobs put
on a shared server; one report measured 256 connections 23 % slower than 8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

START = 8
WINDOW = 64  # completions per decision at least: a window's mean latency is a load signal, one is not
TOLERANCE = 2.0
SLOW_START_END = 1.3  # a window mean this far past the lowest ends the doubling
DECREASE = 0.9
KV_FULL = 0.95  # a model server's KV cache this full takes no more requests without queuing them
MODEL_HOLDS = 0.5  # the model serves or queues at least this share of what is out: latency is its own
SLOW_START_GAIN = 1.2  # metrics: a doubled limit giving this much more throughput doubles on
BASELINE_DRIFT = 1.002  # per window: the lowest mean seen is forgotten slowly (the server may slow for good)


@dataclass
class _Cut:
    """A cut of the limit waiting for its judgement: the mean that caused it and the cut's factor."""

    mean_s: float
    factor: float
    settled: bool = False


@dataclass
class AdaptiveLimit:
    """The in-flight limit of one collection, moved by what completed requests and the server say."""

    cap: int
    share: float = 1.0  # its share of a model server other collections use too (a suite link's)
    limit: float = START
    tolerance: float = TOLERANCE
    decrease: float = DECREASE
    window: int = WINDOW
    baseline_s: float | None = None  # the lowest window mean latency seen lately
    slow_start: bool = True
    queue_says_full: bool = False
    capacity: int | None = None  # the model server's ``running`` when it was last seen full: its batch
    ceiling: int | None = None  # that batch plus what was out elsewhere then (alone at the server)
    model_reports: bool = False  # a poll gave the model server's running count (``metrics``)
    model_holds: bool = False  # a poll of this window found the model serving or queuing what was sent
    _count: int = 0
    _total_s: float = 0.0
    _busy: int = 0
    _rate: float | None = None  # the last slow-start window's throughput (limit / mean latency)
    _cut: _Cut | None = None  # the last cut, until a window after it has judged it

    def __post_init__(self) -> None:
        self.limit = float(max(1, min(self.cap, self.limit)))

    @classmethod
    def shared(cls, cap: int, share: float) -> AdaptiveLimit:
        """A collection's limit with its ``share`` of the model server, starting at that share of
        :data:`START` (rounded up): the collectors of a suite link start, together, at about what one
        collection alone starts at. Five at :data:`START` each sent 40 requests to a server of 8
        slots at once, and a benchmark of long rollouts then held its 8 for all their model calls
        while the short ones waited behind them (``bench/suite.py``, the slow neighbour)."""
        return cls(cap=cap, share=share, limit=math.ceil(START * share - 1e-9))

    def set_share(self, share: float) -> None:
        """A new share of the model server (a suite link's, as the benchmarks' work left changes).

        A smaller one bounds what this collection keeps from the next poll of a full server on. A
        larger one raises the limit at once to its new part of the server's capacity (``running``
        when it was last seen full): the limit was cut to the old part by the share, not by any
        load, and growing back by one a window is one step per 64 completions, which for rollouts
        of ten model calls left the last benchmark of ``bench/suite.py`` at 1 request of 8 slots
        after the others ended (its end 67 s instead of 42-49 s). What is above the server's
        capacity the queue cuts at the next poll, as it cuts any collection.
        """
        share = min(max(share, 1e-6), 1.0)
        if share > self.share and self.capacity:
            part = math.ceil(share * self.capacity - 1e-9)
            self.limit = min(float(self.cap), max(self.limit, float(part)))
        self.share = share

    @property
    def current(self) -> int:
        """How many requests may be in flight now (1 ≤ current ≤ cap)."""
        return max(1, min(self.cap, int(self.limit)))

    def completed(self, latency_s: float, in_flight: int) -> None:
        """One request completed after ``latency_s`` while ``in_flight`` others were out."""
        self._count += 1
        self._total_s += latency_s
        self._busy += in_flight + 1 >= self.current
        size = max(self.current, round(self.window * self.share))  # a share sees that share of them
        if self._count < size:
            return
        mean, busy = self._total_s / self._count, self._busy * 2 >= self._count
        self._count, self._total_s, self._busy = 0, 0.0, 0
        self.baseline_s = mean if self.baseline_s is None else min(mean, self.baseline_s * BASELINE_DRIFT)
        the_models, self.model_holds = self.model_holds, False  # each window needs a poll of its own
        if self._gaining(mean, busy):  # the doubled limit still pays: a longer latency is the price
            the_models = True
        if the_models:  # the model's own latency (its batch, or a queue the queue rule cuts): neither
            self.baseline_s = max(self.baseline_s, mean / SLOW_START_END)  # a cut nor the doubling's end
            self._cut = None
        if self._cut is not None and not self._judge_cut(mean):
            return
        if mean > self.tolerance * self.baseline_s:  # the further past, the deeper the cut (to half)
            self.slow_start = False
            cut = max(0.5, min(self.decrease, self.tolerance * self.baseline_s / mean))
            lowered = min(self.limit, max(self._batch_floor(), self.limit * cut))
            if lowered < self.limit:
                self._cut = _Cut(mean_s=mean, factor=lowered / self.limit)
                self.limit = lowered
        elif busy and not self.queue_says_full:
            if mean > SLOW_START_END * self.baseline_s:  # latency starts to climb: grow by one from here
                self.slow_start = False
            grown = self.limit * 2 if self.slow_start else self.limit + 1
            self.limit = max(self.limit, min(float(self.cap), float(self.ceiling or self.cap), grown))

    def _gaining(self, mean: float, busy: bool) -> bool:
        """In slow start, with the model server's metrics read: whether this window's throughput,
        the limit over its mean latency (Little's law: no clock needed), is at least
        :data:`SLOW_START_GAIN` times the window's before it. Then its longer latency is what the
        doubled limit costs while it still pays, and it neither ends the doubling nor cuts.

        Against CPU vLLM the front ends (the Environment Server, vLLM's API server: Python on the 2
        cores vLLM's worker shares) doubled the latency between 8 and 32 in flight while fixed 32
        gave 1.7x the throughput of fixed 16; judged on latency, the doubling ended at 16 and the
        limit was cut to 12-15 with nothing waiting at the model: 0.66 of fixed 32
        (``bench/adaptive.py --vllm --trace``). Without metrics (``latency``) this does not apply.
        """
        rate, before = self.current / mean, self._rate
        self._rate = rate if busy and self.slow_start else None
        if not (self.slow_start and busy and self.model_reports) or before is None:
            return False
        return rate >= SLOW_START_GAIN * before

    def _batch_floor(self) -> float:
        """The lowest a latency cut takes the limit: the model's batch as its queue revealed it (this
        collection's share of it), while the model server holds nothing waiting; else 1.

        The front ends (the Environment Server, the model's API server) carried that batch and the
        queue behind it to the model when it was revealed, and a fixed concurrency of the batch is
        what a batching server serves best. A window made slow by requests held in front of the
        model (vLLM on CPU reported 0-1 running with 33-45 out for 4-10 s after an overshoot to 64,
        the front ends sharing its 2 cores) cut the limit to 15-23, half the batch, and it grew back
        by one request per window: 0.82 of the best fixed concurrency (``bench/adaptive.py
        --vllm``). Requests waiting at the model are cut by the queue rule, exactly, below it too.
        """
        if self.capacity is None or self.queue_says_full:
            return 1.0
        return float(max(1, math.ceil(self.share * self.capacity - 1e-9)))

    def _judge_cut(self, mean: float) -> bool:
        """Judge the last cut by a window's mean; False when the window is spent on it.

        The first window after a cut only settles (its requests were mostly sent before the cut).
        The next one: latency that fell by less than half of what the cut predicts was not load.
        The lowest mean becomes this window's (over the slow-start margin, so growth goes on by
        one from the next window), and nothing else moves this window.
        """
        cut = self._cut
        assert cut is not None
        if not cut.settled:
            cut.settled = True
            return False
        self._cut = None
        if mean <= (1 - (1 - cut.factor) / 2) * cut.mean_s:
            return True  # it was the load: the usual rule goes on
        self.baseline_s = mean / SLOW_START_END
        return False

    def server_queue(
        self, waiting: int, kv_usage: float | None = None, running: int | None = None, in_flight: int = 0
    ) -> None:
        """The model server's own count of requests waiting for a slot (a metrics poll), how full
        its KV cache is (0..1, where it says), how many it serves (``running``) and how many of
        this collection's requests are out (``in_flight``).

        Requests waiting there are exactly the excess over the server's capacity: the limit drops
        to what is out less that many (not by a fraction), so it settles where every slot is busy
        and none waits. Less what is *out*, not less the limit: polls come faster than a queue of
        generations drains, and the same waiting requests cut again and again drove the limit from
        64 to 2 against a real vLLM (``bench/adaptive.py --vllm``). A
        KV cache at :data:`KV_FULL` or more holds the limit where it is: the next requests would
        wait (or preempt others) though none waits yet.

        Shared (``share`` < 1, the server's ``running`` known): the server is full, so ``running``
        is its capacity and this collection's fair part is ``share × running``. Only the part of
        its own requests above that is cut (never more than ``waiting``), and below its part it
        still grows: the collections settle at their shares of the server (weighted fairness),
        and one that holds less than its share (no work, slow rollouts) leaves the rest to others.
        The part is rounded up to a whole request: five collectors with a fifth of a server of 8
        slots each keep 2 (10 in flight, the server full, 2 waiting); rounded down (the limit's
        whole part) each kept 1, and 3 of the 8 slots stayed idle (``bench/suite.py``'s adaptive
        throughput was 0.80 of the best fixed concurrency).

        The server serving or queuing (``running`` + ``waiting``) at least half of this
        collection's requests out: what is out is mostly at the model, so the latency of this
        window is the model's (:meth:`completed`): its batching, or its queue, which the rule above
        cuts by exactly what waits. Cut on latency too, the same queue cut the limit twice
        (``bench/adaptive.py --vllm``, 3,000 episodes: up to 30 waiting, the limit ending at 17).
        One poll of the window that finds this is enough: requests of equal length enter vLLM's
        batch together and leave it together, so a poll finds the whole batch at the model or none
        of it (16 out: 16 running at one poll, 0-1 at the next). Judged on the window's last poll,
        the doubling ended at 16 on such a coin toss and the limit took 60 s to grow by one a
        window to vLLM's 32 (``bench/adaptive.py --vllm --trace``).
        """
        full = waiting > 0 or (kv_usage is not None and kv_usage >= KV_FULL)
        if full and running:
            self.capacity = running
            if self.share >= 1.0 and in_flight > 0:  # alone: its requests are the batch, the queue, the rest
                self.ceiling = running + max(0, in_flight - running - waiting)
        excess = float(waiting)
        if self.share < 1.0 and running is not None and full:
            fair = float(math.ceil(self.share * max(running, 1) - 1e-9))  # whole requests, rounded up
            excess = min(float(waiting), max(0.0, max(in_flight, self.limit) - fair))
            full = max(in_flight, self.limit) >= fair
        self.queue_says_full = full
        at_model = (running or 0) + waiting
        self.model_reports = self.model_reports or running is not None
        holds = running is not None and in_flight > 0 and at_model >= MODEL_HOLDS * in_flight
        self.model_holds = self.model_holds or holds  # any poll of the window: a batch moves in step
        if excess > 0:  # what is out less what waits: the same queue polled again cuts no further
            self.slow_start = False
            held = float(in_flight) if in_flight > 0 else self.limit
            self.limit = max(1.0, min(self.limit, held - excess))
