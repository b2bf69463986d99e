"""Child process for the crash tests: writes through the store forever and prints what it flushed.

Usage: ``python store_writer.py <output> <seed>``. After each durable step it prints one line,
``R <index> <attempt>`` after a reservation and ``O <index> <attempt> <kind>`` after an outcome was
appended, so the parent knows a lower bound of what must survive a SIGKILL.
"""

from __future__ import annotations

import random
import sys

from gymslurm.records import EpisodeFailure, EpisodeId, RolloutFailureRecord
from gymslurm.store import RunPaths, RunStore

BIG = "y" * (256 << 10)  # a large record makes a kill in the middle of its write likely (a torn tail)


def main(output: str, seed: int) -> None:
    rng = random.Random(seed)
    store = RunStore.open(RunPaths.for_output(output))
    store.reconcile()  # validates every saved record
    store.repair_torn_tails()
    ids = store.rollout_ids()
    out = sys.stdout
    while True:
        index = rng.randrange(len(ids))
        attempt = store.reserve(index)
        out.write(f"R {index} {attempt}\n")
        out.flush()
        roll = rng.random()
        if roll < 0.15:
            continue  # interrupted in flight: a reservation without an outcome
        if roll < 0.6:
            response = BIG if rng.random() < 0.05 else "x" * rng.randrange(10, 300)
            store.append_result(index, attempt, {"reward": rng.random(), "response": {"output": response}})
            kind = "result"
        elif roll < 0.9:
            record = RolloutFailureRecord(
                episode_id=EpisodeId(rollout_id=ids[index], attempt=attempt),
                run_id=store.run_id,
                source="collector",
                delivery="possibly_delivered",
                failure=EpisodeFailure(
                    failure_reason="timeout", terminal=False, failure_kind="transport_timeout"
                ),
            )
            diagnostics = {"trace": BIG} if rng.random() < 0.05 else None
            store.append_failure(index, attempt, record, diagnostics=diagnostics)
            kind = "failure"
        else:
            store.append_omission(index, attempt)
            kind = "omission"
        out.write(f"O {index} {attempt} {kind}\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
