"""Benchmark: ``status`` of a run on the Slurm sandbox beside a large foreign queue, and a large submit.

Issue 32's target: ``status`` ≤ 1.5× a bare ``squeue`` of the run's jobs plus parsing, whatever else
the user has queued. On cluster ``b``, as the sandbox's user:

1. a foreign queue: ``--foreign`` held array tasks of another job name (``bench-foreign``, arrays
   of 1,000; they never run), which ``squeue -r`` lists one line each;
2. a run of ``--shards`` shards (the stand-in collector of bench/scale_sandbox.py; its links run);
   once its first links started, ``run_status`` in-process (best of 3, wall and CPU, its squeue
   included) against the bare command status runs, ``squeue -u USER -r -t all --name=gs-R,gs-R-agg``,
   plus splitting its rows (best of 3); beside them the user's whole-queue ``squeue -u`` plus
   splitting, which status ran before;
3. ``--large`` shards submitted held (``--hold``: nothing runs) through timing wrappers of the
   Slurm commands: submit's wall and CPU against 3 s plus the real Slurm calls it made; then the
   large run's own status against its bare squeue, and the small run's again (the large run is
   foreign to it now).

Everything is cancelled and the directories deleted at the end. On a machine loaded past its CPUs
the verdict's figure is CPU (wall time is then mostly the other processes'). Heavy: run it alone
(``flock /work/heavy.lock``), as root with the sandbox up, from the repository root:
``python bench/status_foreign.py [--foreign 15000] [--shards 20] [--large 10000]`` (``--large 0``:
no large submit; ``--profile DIR``: each run's status once more under cProfile, CPU time, its
statistics written to DIR and printed). MaxJobCount (50,000 on the sandbox) counts pending array
tasks and jobs ended less than MinJobAge ago: foreign + 3 × large + recent jobs must stay below it.
Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale_sandbox import (  # noqa: E402
    CLUSTER,
    STATUS_LIMIT,
    SUBMIT_LIMIT_S,
    bare_squeue,
    benchmark,
    cleanup,
    counted_user,
    link_use,
    run_names,
    status_cli,
    status_in_process,
    submit,
)
from bench.status import _interpreter  # noqa: E402
from bench.submit import call_seconds  # noqa: E402
from tests.slurm.helpers import SlurmUser  # noqa: E402

ARRAY = 1000  # tasks per foreign array (the sandbox's MaxArraySize is 1001)


def foreign_queue(user: SlurmUser, tasks: int, jobs: list[str]) -> None:
    """Held arrays of ``tasks`` tasks in all, named ``bench-foreign``, each id appended to ``jobs`` as it
    is queued (a failure midway leaves the caller every array to cancel)."""
    script = user.write("foreign.sh", "#!/bin/bash\ntrue\n")
    for first in range(0, tasks, ARRAY):
        last = min(first + ARRAY, tasks) - 1
        argv = ["sbatch", f"--clusters={CLUSTER}", "-H", "--parsable", f"--array=0-{last - first}"]
        out = user.run([*argv, "-J", "bench-foreign", "-o", "/dev/null", str(script)], timeout=300)
        jobs.append(out.strip().split(";")[0])


def status_pair(run: Path, profile: Path | None = None) -> dict[str, Any]:
    """The run's status in-process and its bare squeue (and the user's whole queue), best of 3 each;
    ``profile``: then one more status under cProfile (CPU time), its statistics written there."""
    gc.disable()  # as `gymslurm status` runs (commands/status.py), and bench/status_held.py measures
    try:
        status = min(status_in_process(run) for _ in range(3))
    finally:
        gc.enable()
    pair = {
        "status": status,
        "bare": min(bare_squeue(run_names(run)) for _ in range(3)),
        "whole": min(bare_squeue(None) for _ in range(3)),
    }
    if profile is not None:
        profiler = cProfile.Profile(time.process_time)
        profiler.runcall(status_in_process, run)
        profiler.dump_stats(profile)
    return pair


def held_benchmark(user: SlurmUser, python: Path, shards: int) -> Path:
    """The stand-in's benchmark, its jobs held (``--hold``: none runs)."""
    path = benchmark(user, python, "large", shards)
    text = path.read_text().replace(
        "  time: '00:05:00'\n", "  time: '00:05:00'\n  extra_directives: ['--hold']\n"
    )
    return user.write(path.name, text, mode=0o644)


def arguments() -> tuple[argparse.Namespace, dict[str, Path | None]]:
    """The command line, and where each run's status profile goes (None: not profiled)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--foreign", type=int, default=15_000, help="held foreign array tasks")
    parser.add_argument("--shards", type=int, default=20, help="shards of the run whose status is measured")
    parser.add_argument("--large", type=int, default=10_000, help="shards of the held large run (0: none)")
    parser.add_argument("--profile", type=Path, help="a folder: each run's status profiled into it, printed")
    args = parser.parse_args()
    profiles: dict[str, Path | None] = dict.fromkeys(("small", "large", "small_again"))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        profiles = {key: args.profile / f"{key}.pstats" for key in profiles}
    return args, profiles


def main() -> int:
    """Queue the foreign arrays, run, measure, submit the large run, measure, clean up, print."""
    args, profiles = arguments()
    python, user, counter, bin_dir = counted_user("bench-status", "status-foreign")
    runs: list[Path] = []
    foreign: list[str] = []
    f: dict[str, Any] = {}
    try:
        foreign_queue(user, args.foreign, foreign)
        small_bench = benchmark(user, python, "small", args.shards)
        small, _, _ = submit(user, python, small_bench, bin_dir, f"shards={args.shards}")
        runs.append(small)
        deadline = time.monotonic() + 120
        while not link_use(small) and time.monotonic() < deadline:  # its first links ran
            time.sleep(2)
        f["small"] = status_pair(small, profiles["small"])
        f["small_cli"] = min(status_cli(user, python, small) for _ in range(3))  # imports included
        f["small_links"] = link_use(small)  # its links asked by id with scontrol (no squeue)
        if args.large:
            counter.write_text("")
            try:
                large, f["submit_s"], f["submit_cpu"] = submit(
                    user, python, held_benchmark(user, python, args.large), bin_dir, f"shards={args.large}"
                )
            except subprocess.CalledProcessError as error:  # e.g. MaxJobCount: the small run's figures stand
                print(f"the large submit failed: {error.stderr}", file=sys.stderr)
                if "temporarily unavailable" in (error.stderr or ""):
                    print(
                        "(MaxJobCount: an earlier run's ended tasks count until MinJobAge passes, 600 s on "
                        "cluster b; run the bench again then)",
                        file=sys.stderr,
                    )
                runs += sorted((user.workdir / "runs").glob("large-*"))  # what it queued is cancelled
                f["large_failed"] = True
            else:
                runs.append(large)
                f["calls"] = Counter(line.split()[0] for line in counter.read_text().splitlines())
                f["slurm_s"] = call_seconds(counter)
                f["large"] = status_pair(large, profiles["large"])
                f["small_again"] = status_pair(small, profiles["small_again"])
    finally:
        if foreign:
            subprocess.run(["scancel", f"--clusters={CLUSTER}", *foreign], check=False)
        f["remaining"] = cleanup(user, python, runs)
    f["load"] = os.getloadavg()
    f["interp"], _ = _interpreter()
    print_profiles(profiles)
    return report(f, args)


def print_profiles(profiles: dict[str, Path | None]) -> None:
    """Each profiled status's functions with the most own CPU time."""
    for key, path in profiles.items():
        if path is not None and path.exists():
            print(f"--- {key}: status in-process under cProfile (CPU seconds), by own time")
            pstats.Stats(str(path)).sort_stats("tottime").print_stats(18)


def judged(pair: dict[str, Any], loaded: bool) -> tuple[str, bool]:
    """One status figure against its bare squeue: the line and whether it meets 1.5×."""
    (doc_s, doc_cpu, queries), (bare_s, bare_cpu, rows), (whole_s, whole_cpu, whole_rows) = (
        pair["status"],
        pair["bare"],
        pair["whole"],
    )
    ok = (doc_cpu if loaded else doc_s) <= STATUS_LIMIT * (bare_cpu if loaded else bare_s)
    line = (
        f"status {doc_s:.3f} s wall, {doc_cpu:.3f} s CPU ({queries} queries); bare squeue of the run's jobs "
        f"({rows} rows) + split {bare_s:.3f} s wall, {bare_cpu:.3f} s CPU: {doc_s / bare_s:.2f}x wall, "
        f"{doc_cpu / bare_cpu:.2f}x CPU (limit {STATUS_LIMIT}x); the user's whole queue ({whole_rows} rows) "
        f"+ split {whole_s:.3f} s wall, {whole_cpu:.3f} s CPU"
    )
    return line, ok


def report(f: dict[str, Any], args: argparse.Namespace) -> int:
    """Print every figure with its limit; 0 when every target is met."""
    load = f.get("load") or os.getloadavg()
    loaded = load[0] > (os.cpu_count() or 1)
    print(
        f"cluster {CLUSTER}; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs "
        f"(verdicts on {'CPU' if loaded else 'wall'}); foreign queue: {args.foreign} held array tasks"
    )
    oks = []
    for key, title in (
        ("small", f"{args.shards}-shard run beside the foreign queue"),
        ("large", f"{args.large}-shard held run (its own rows)"),
        ("small_again", f"{args.shards}-shard run beside the foreign queue and the {args.large}-shard run"),
    ):
        if key in f:
            line, ok = judged(f[key], loaded)
            oks.append(ok)
            print(f"{title}: {line}")
    if "small_cli" in f:
        print(
            f"  the {args.shards}-shard run's status --json, whole CLI (start-up and imports included): "
            f"{f['small_cli'][0]:.3f} s wall, {f['small_cli'][1]:.3f} s CPU (a bare interpreter's start "
            f"{f['interp']:.3f} s wall)"
        )
    if "submit_s" in f:
        slurm_total = sum(f["slurm_s"].values())
        limit = SUBMIT_LIMIT_S + slurm_total
        seconds = {name: round(value, 3) for name, value in f["slurm_s"].items()}
        ok = f["submit_s"] <= limit or (loaded and f["submit_cpu"] <= SUBMIT_LIMIT_S)
        oks.append(ok)
        print(
            f"submit of {args.large} shards, whole CLI: {f['submit_s']:.3f} s wall, "
            f"{f['submit_cpu']:.3f} s CPU; its {f['calls'].total()} Slurm calls {dict(f['calls'])} took "
            f"{slurm_total:.3f} s "
            f"({seconds}); limit {SUBMIT_LIMIT_S:.0f} s + {slurm_total:.3f} s = {limit:.3f} s: "
            f"{f['submit_s'] / limit:.2f}x wall; own CPU vs {SUBMIT_LIMIT_S:.0f} s: "
            f"{f['submit_cpu'] / SUBMIT_LIMIT_S:.2f}x"
        )
        rest = f["submit_s"] - slurm_total - f["interp"]
        print(
            f"  where submit's wall time goes: Slurm calls {slurm_total:.3f} s, a bare interpreter's start "
            f"{f['interp']:.3f} s, the rest (imports, planning, files, waiting for a CPU) {rest:.3f} s"
        )
    if links := f.get("small_links"):
        calls: dict[str, int] = {}
        for _, _, by_command in links:
            for name, n in by_command.items():
                calls[name] = calls.get(name, 0) + n
        print(
            f"the {args.shards}-shard run's links that logged their use: {len(links)}, queries max "
            f"{max(q for q, _, _ in links)}, rows max {max(r for _, r, _ in links)}; calls in all {calls}"
        )
    print(f"cleanup: {f['remaining']} job(s) of the runs left in the queue; directories deleted")
    if f.get("large_failed"):
        print(f"the {args.large}-shard submit failed (above): its figures are missing")
    ok = all(oks) and f["remaining"] == 0 and not f.get("large_failed")
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
