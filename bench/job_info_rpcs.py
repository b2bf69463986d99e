"""Benchmark: what slurmctld spends answering a link's questions about its own jobs, as the queue grows.

A link asks about a few jobs of its chain (its lookahead: one-task arrays; a spare: a task of a
1,000-task array). Slurm 22.05 offers two ways to ask by id, and ``sdiag`` (slurmctld's time per
RPC type, before and after) tells what each costs the controller:

- ``squeue -j A,B,C``: one ``REQUEST_JOB_INFO`` (every job record packed, the client filters) and
  one ``REQUEST_PARTITION_INFO``;
- ``scontrol -o`` reading ``show job ID`` lines on its stdin: one process, one
  ``REQUEST_JOB_INFO_SINGLE`` per id (the job's record; for an array task, the array's records).

Each is run ``--calls`` times with the queue holding only the asked jobs, then again after
``--records`` foreign job records are added (held arrays whose every task is split into its own
record by a per-task ``scontrol update``, as started tasks are), as the sandbox's user
(``slurmtest``) on cluster ``b``. Printed: slurmctld µs per call of each way at both sizes and their
ratio (O(1) work: about 1×). Everything it queued is cancelled at the end. Run from the repository
root, as root, the sandbox up: ``python bench/job_info_rpcs.py [--records 5000] [--calls 30]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_sandbox import CLUSTER, rpc_delta, sdiag  # noqa: E402
from tests.slurm.helpers import TEST_USER  # noqa: E402

SCRIPT = Path("/tmp/gymslurm-bench-rpcs.sh")
ARRAY = 1000  # tasks per foreign array (MaxArraySize 1001 on the sandbox)
SQUEUE_FORMAT = "%i|%j|%T|%r|%E|%M|%l|%S"


def as_user(argv: list[str], stdin: str | None = None) -> str:
    """Run a Slurm command on cluster b as the test user; its stdout."""
    full = ["runuser", "-u", TEST_USER, "--", argv[0], f"--clusters={CLUSTER}", *argv[1:]]
    return subprocess.run(full, input=stdin, capture_output=True, text=True, check=False).stdout


def held_array(tasks: str, name: str) -> str:
    """A held array (never runs): its job id."""
    out = as_user(
        ["sbatch", "-H", "--parsable", f"--array={tasks}", "-J", name, "-o", "/dev/null", str(SCRIPT)]
    )
    return out.strip().split(";")[0]


def split(job: str, tasks: int) -> None:
    """Give every task of a pending array its own job record (a per-task update splits it off)."""
    lines = "".join(f"update JobId={job}_{task} TimeLimit=10\n" for task in range(tasks))
    as_user(["scontrol"], stdin=lines)


def measure(ids: list[str], calls: int) -> dict[str, tuple[float, str]]:
    """slurmctld µs per call of each way to ask ``ids`` (and of one id of each kind), with its RPCs."""
    ways = {
        f"squeue -j ({len(ids)} ids)": (
            ["squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT, "-j", ",".join(ids)],
            None,
        ),
        f"scontrol stdin ({len(ids)} ids)": (["scontrol", "-o"], "".join(f"show job {j}\n" for j in ids)),
        "scontrol, a one-task array's task": (["scontrol", "-o", "show", "job", ids[0]], None),
        f"scontrol, a task of a {ARRAY}-task split array": (["scontrol", "-o", "show", "job", ids[1]], None),
        "squeue -u (the user's whole queue)": (
            ["squeue", "-h", "-r", "-t", "all", "-o", SQUEUE_FORMAT, "-u", TEST_USER],
            None,
        ),
    }
    found = {}
    for way, (argv, stdin) in ways.items():
        before = sdiag()
        for _ in range(calls):
            as_user(argv, stdin)
        delta = rpc_delta(before, sdiag(), "type")
        delta.pop("REQUEST_STATS_INFO", None)  # sdiag's own
        total = sum(us for _, us in delta.values())
        rpcs = ", ".join(f"{name} {count / calls:g}" for name, (count, _) in delta.items())
        found[way] = (total / calls, rpcs)
    return found


def main() -> int:
    """Queue the asked jobs, measure, add the foreign records, measure again, cancel, print."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=5000, help="foreign job records added")
    parser.add_argument("--calls", type=int, default=30, help="calls of each way per size")
    args = parser.parse_args()
    SCRIPT.write_text("#!/bin/bash\ntrue\n")
    SCRIPT.chmod(0o755)
    queued: list[str] = []
    try:
        lookahead = [held_array("0", "gs-bench-rpcs") for _ in range(2)]
        spare = held_array(f"0-{ARRAY - 1}", "gs-bench-rpcs")
        queued += [*lookahead, spare]
        split(spare, ARRAY)
        ids = [f"{lookahead[0]}_0", f"{spare}_5", f"{lookahead[1]}_0"]
        small = measure(ids, args.calls)
        for _ in range(-(-args.records // ARRAY)):
            job = held_array(f"0-{ARRAY - 1}", "bench-foreign")
            queued.append(job)
            split(job, ARRAY)
        records = len(as_user(["squeue", "-h", "-t", "all", "-o", "%A"]).split())
        time.sleep(1)
        large = measure(ids, args.calls)
    finally:
        if queued:
            subprocess.run(["scancel", f"--clusters={CLUSTER}", *queued], check=False)
    print(
        f"slurmctld time per call (sdiag -M {CLUSTER}, {args.calls} calls each, load "
        f"{os.getloadavg()[0]:.1f}); the queue: the 3 asked jobs' arrays, then {records} job records"
    )
    for way, (us, rpcs) in small.items():
        big_us, _ = large[way]
        print(
            f"  {way}: {us / 1e3:.2f} ms -> {big_us / 1e3:.2f} ms ({big_us / us:.2f}x); RPCs per call: {rpcs}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
