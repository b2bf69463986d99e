"""The collector's side of the supervision channel (gymslurm/collector/watch.py), over a real pipe."""

from __future__ import annotations

import asyncio
import os
import time

from gymslurm.collector.watch import Supervised
from gymslurm.concurrency import AdaptiveLimit
from gymslurm.supervision import ServerEvent


async def _after_events(*events: ServerEvent) -> tuple[Supervised, asyncio.Task[None]]:
    read_fd, write_fd = os.pipe()
    watch = Supervised(read_fd, on_gave_up=lambda _why: None, say=lambda _line: None)
    await watch.start()
    for event in events:
        os.write(write_fd, event.encode())
    while watch.timeline.stopping_at is None and not watch.closed:  # the reader folds them in
        await asyncio.sleep(0.01)
    waiting = asyncio.create_task(watch.wait_dispatchable())
    for _ in range(20):
        await asyncio.sleep(0)
    os.close(write_fd)
    return watch, waiting


def test_a_stopping_job_dispatches_nothing_more() -> None:
    """Once the link says the job is stopping (its signal reached the link first), the dispatch
    loop is held until its own stop cancels it: no further row is reserved and sent to a dying
    server (a pause re-sent two rows per link before)."""

    async def scenario() -> bool:
        watch, waiting = await _after_events(ServerEvent("stopping", time.monotonic()))
        held = not waiting.done()
        waiting.cancel()
        await watch.close()
        return held

    assert asyncio.run(scenario())


def test_a_server_said_down_before_the_collector_started_holds_its_first_request() -> None:
    """A suite link starts its collectors while the shared model server still loads and writes
    ``down`` into the channel first: the collector applies it before its first request (not when
    its reader task gets to it), and dispatches once ``up`` comes."""

    async def scenario() -> tuple[bool, bool, bool]:
        read_fd, write_fd = os.pipe()
        os.write(write_fd, ServerEvent("down", time.monotonic(), server="policy", cause="loading").encode())
        watch = Supervised(read_fd, on_gave_up=lambda _why: None, say=lambda _line: None)
        await watch.start()
        held_at_once = watch.timeline.down  # no await between start() and the first request's check
        waiting = asyncio.create_task(watch.wait_dispatchable())
        for _ in range(20):
            await asyncio.sleep(0)
        held = not waiting.done()
        os.write(write_fd, ServerEvent("up", time.monotonic(), server="policy").encode())
        await asyncio.wait_for(waiting, 5.0)
        os.close(write_fd)
        await watch.close()
        return held_at_once, held, waiting.done()

    assert asyncio.run(scenario()) == (True, True, True)


def test_a_new_share_from_the_link_reaches_the_adaptive_limit() -> None:
    """A suite link's ``share`` event (its benchmark's work left changed) is handed to the limit:
    the first one written before the collector started, the next while it dispatches."""

    async def scenario() -> list[float]:
        read_fd, write_fd = os.pipe()
        os.write(write_fd, ServerEvent("share", time.monotonic(), share=0.5).encode())
        watch = Supervised(read_fd, on_gave_up=lambda _why: None, say=lambda _line: None)
        limit = AdaptiveLimit(cap=64, share=1.0)
        watch.on_share = limit.set_share
        await watch.start()
        seen = [limit.share]
        os.write(write_fd, ServerEvent("share", time.monotonic(), share=0.02).encode())
        for _ in range(200):
            if limit.share != seen[-1]:
                break
            await asyncio.sleep(0.01)
        seen.append(limit.share)
        os.close(write_fd)
        await watch.close()
        return seen

    assert asyncio.run(scenario()) == [0.5, 0.02]
