"""Benchmark: a 10,000-shard run on the Slurm sandbox's cluster ``b``, measured as a site admin would.

One run of ``SHARDS`` shards (the stand-in collector, no servers: a link that continues, then one
that finishes; ``slurm.max_running`` bounds the first links), beside a 1-shard run of the same
benchmark made first, in the same minutes. Each figure is printed with the limit it is judged
against, measured in the same run:

- **each link's scheduler calls and rows** (from the links' own logs: ``scheduler calls: N (...),
  rows read: M``): queries (squeue, sacct, scontrol) ≤ 3 and rows ≤ 10 at 10,000 shards, and no
  more than the 1-shard run's links; beside them the rows of the whole-queue ``squeue -u`` a link
  ran before issue 32, counted in the same minutes;
- **slurmctld's RPCs** (``sdiag -M b``, by message type and by user, before and after): the
  submit's, and those of a window of links divided by the links that ended in it (a job's own
  protocol RPCs, sent by slurmd/slurmstepd as root, are listed apart); ``sacct`` goes to slurmdbd,
  which sdiag does not count;
- **status**: ``run_status`` in-process (the run as the window left it) against a bare ``squeue``
  of the run's jobs (the same command line status runs) plus splitting its rows, best of 3 each:
  ≤ 1.5×; the whole CLI (``status --json``) with a bare interpreter's start beside it;
- **submit** (whole CLI, as the user, through timing wrappers of the Slurm commands): ≤ 3 s plus
  the wall time of the real Slurm calls it made (each timed by its wrapper in the same run).

It does not wait for every shard: the per-link figures come from the links that ended in the
window (``--window`` seconds). Then it cancels every job of both runs (``gymslurm cancel``, then an
``scancel`` of any job left with the run's name) and deletes their directories. Heavy: run it once,
on a quiet machine, as root with the sandbox up (docs/slurm-sandbox.md). Exits 1 when a target is
missed.

Run from the repository root: ``python bench/scale_sandbox.py [--shards 10000] [--window 120]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.status import _interpreter  # noqa: E402
from bench.submit import COMMANDS, call_seconds, wrappers  # noqa: E402
from tests.slurm.helpers import SCRATCH_ROOT, TEST_USER, SlurmUser, job_python_for, scenario_user  # noqa: E402

CLUSTER, STEPS, QUERIES = (
    "b",
    [{"exit": 75, "progress": 1}, {"exit": 0, "progress": 1}],
    ("squeue", "sacct", "scontrol"),
)
SUBMIT_LIMIT_S, STATUS_LIMIT, MAX_QUERIES, MAX_ROWS = 3.0, 1.5, 3, 10
USE = re.compile(r"scheduler calls: (\d+) \(([^)]*)\), rows read: (\d+)")
SDIAG_ROW = re.compile(r"^\s+(\S+)\s+\(\s*(\d+)\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)")
SQUEUE_FORMAT = "%i|%j|%T|%r|%E|%M|%l|%S"


def counted_user(folder: str, name: str) -> tuple[Path, SlurmUser, Path, Path]:
    """The test user's job python, its scenario folder under SCRATCH_ROOT/``folder``, and the
    counter file (theirs to append to) and ``bin`` folder of the Slurm commands' timing wrappers."""
    python = job_python_for(TEST_USER, as_root=True, repo=ROOT)
    user = scenario_user(SCRATCH_ROOT / folder, name)
    counter = user.workdir / "calls.txt"
    counter.touch()
    shutil.chown(counter, TEST_USER, TEST_USER)
    bin_dir = user.workdir / "bin"
    wrappers(bin_dir, counter, (*COMMANDS, "sacctmgr"))
    return python, user, counter, bin_dir


def sdiag() -> dict[str, dict[str, tuple[int, int]]]:
    """``sdiag -M b``'s RPC tables: {"type": {name: (count, total µs)}, "user": {...}}."""
    out = subprocess.run(["sdiag", "-M", CLUSTER], capture_output=True, text=True, check=True).stdout
    tables: dict[str, dict[str, tuple[int, int]]] = {"type": {}, "user": {}}
    section = None
    for line in out.splitlines():
        if "statistics by message type" in line:
            section = "type"
        elif "statistics by user" in line:
            section = "user"
        elif "Pending RPC" in line:
            section = None
        elif section and (match := SDIAG_ROW.match(line)):
            tables[section][match.group(1)] = (int(match.group(3)), int(match.group(4)))
    return tables


def rpc_delta(before: dict, after: dict, table: str) -> dict[str, tuple[int, int]]:
    """RPCs (count, µs) between two :func:`sdiag` snapshots, for one table."""
    delta = {}
    for name, (count, total) in after[table].items():
        was = before[table].get(name, (0, 0))
        if count - was[0]:
            delta[name] = (count - was[0], total - was[1])
    return dict(sorted(delta.items(), key=lambda item: -item[1][0]))


def link_use(run: Path) -> list[tuple[int, int, dict[str, int]]]:
    """(queries, rows, calls by command) of every link that ended, from the job logs."""
    found = []
    for log in (run / "logs").glob("shard-*"):
        for match in USE.finditer(log.read_text(errors="replace")):
            calls = {k: int(v) for k, v in (p.split() for p in match.group(2).split(", ") if p != "none")}
            found.append((sum(calls.get(q, 0) for q in QUERIES), int(match.group(3)), calls))
    return found


def benchmark(user: SlurmUser, python: Path, name: str, rows: int) -> Path:
    """The stand-in's benchmark ``name`` on cluster b: no servers, no aggregation, a 5-minute link."""
    standin = user.write("standin.py", (ROOT / "tests/slurm/launcher_standin_collector.py").read_text())
    user.write("steps.json", json.dumps(STEPS), mode=0o644)
    data = "".join(json.dumps({"q": i}) + "\n" for i in range(rows))
    user.write("data.jsonl", data, mode=0o644)
    command = [str(python), str(standin), str(user.workdir / "steps.json")]
    text = (
        f"name: {name}\ndataset: {user.workdir / 'data.jsonl'}\n"
        f"run_root: {user.workdir / 'runs'}\nshards: 1\n"
        f"collector:\n  command: {json.dumps(command)}\naggregation:\n  enabled: false\n"
        f"slurm:\n  python: {python}\n  cluster: {CLUSTER}\n  time: '00:05:00'\n"
    )
    return user.write(f"{name}.yaml", text, mode=0o644)


def submit(
    user: SlurmUser, python: Path, bench: Path, bin_dir: Path, *overrides: str
) -> tuple[Path, float, float]:
    """``gymslurm submit`` as the user with the timing wrappers first on PATH: (run, wall s, CPU s)."""
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        user.command([str(python), "-m", "gymslurm", "submit", str(bench), *overrides]),
        cwd=user.workdir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    match = re.search(r"gymslurm status (\S+)", done.stdout)
    assert match, done.stdout + done.stderr
    return Path(match.group(1)), took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (squeue, sacct)."""
    mine, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + kids.ru_utime + kids.ru_stime


def bare_squeue(names: list[str] | None = None, *, per_task: bool = True) -> tuple[float, float, int]:
    """Wall and CPU seconds of a squeue of the user's jobs on b (``names``: of these job names only,
    the command status runs for a run) plus splitting its rows; its rows (array tasks). ``per_task``
    False: without ``-r`` (an array's pending tasks on one line, as status asks since issue 32's
    compact query), each such line's task ids then made from its list."""
    from gymslurm.site.slurm import SQUEUE_ENV, pending_task_ids

    argv = ["squeue", f"--clusters={CLUSTER}", "-h", "-t", "all", "-o", SQUEUE_FORMAT, "-u", TEST_USER]
    if per_task:
        argv.insert(2, "-r")
    if names:
        argv.append(f"--name={','.join(names)}")
    cpu, t0 = _cpu(), time.perf_counter()
    env = {**os.environ, **SQUEUE_ENV}
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    rows = [line.split("|") for line in out.splitlines() if "|" in line]
    tasks = sum(len(pending_task_ids(row[0]) or [row[0]]) for row in rows)
    return time.perf_counter() - t0, _cpu() - cpu, tasks


def run_names(run: Path) -> list[str]:
    """The job names status asks squeue for (site/job_names.py): an array run's links and aggregation."""
    return [f"gs-{run.name}", f"gs-{run.name}-agg"]


def status_in_process(run: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds of ``run_status`` of the run (as the user's queue), and its scheduler
    queries."""
    from gymslurm.launcher.run_site import run_backend
    from gymslurm.launcher.rundir import RunDir
    from gymslurm.launcher.views.status import read_chains, run_status

    os.environ["USER"] = os.environ["LOGNAME"] = TEST_USER  # status asks the queue of the run's user
    rundir = RunDir(run)
    cpu, t0 = _cpu(), time.perf_counter()
    backend = run_backend(rundir)
    report = run_status(rundir, backend, chains=read_chains(rundir, rundir.read_info().shards))
    return time.perf_counter() - t0, _cpu() - cpu, report.queries


def status_cli(user: SlurmUser, python: Path, run: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``gymslurm status RUN --json`` as the user (its squeue included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        user.command([str(python), "-m", "gymslurm", "status", str(run), "--json"]),
        cwd=user.workdir,
        capture_output=True,
        check=True,
    )
    took, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cleanup(user: SlurmUser, python: Path, runs: list[Path]) -> int:
    """``gymslurm cancel`` each run, ``scancel`` whatever job of theirs is left; delete the
    directories. Returns the jobs left in the queue afterwards (0 expected)."""
    for run in runs:
        subprocess.run(
            user.command([str(python), "-m", "gymslurm", "cancel", str(run)]),
            cwd=user.workdir,
            capture_output=True,
            check=False,
            timeout=300,
        )
    names = [run.name for run in runs]

    def left() -> list[str]:
        out = subprocess.run(
            ["squeue", f"--clusters={CLUSTER}", "-h", "-u", TEST_USER, "-t", "PD,R,CG,S,CF", "-o", "%F|%j"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return sorted(
            {
                line.split("|")[0]
                for line in out.splitlines()
                if "|" in line and any(n in line.split("|")[1] for n in names)
            }
        )

    if stragglers := left():
        subprocess.run(["scancel", f"--clusters={CLUSTER}", *stragglers], check=False)
        time.sleep(5)
    remaining = len(left())
    shutil.rmtree(user.workdir, ignore_errors=True)
    return remaining


def main() -> int:
    """Run both runs, measure, clean up, print; 1 when a target is missed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=120.0, help="seconds of links sampled")
    parser.add_argument("--max-running", type=int, default=10)
    args = parser.parse_args()
    python, user, counter, bin_dir = counted_user("bench-scale", f"scale-{args.shards}")
    runs: list[Path] = []
    f: dict[str, Any] = {"shards": args.shards, "max_running": args.max_running}
    try:
        # 1 shard first: its links' figures are the same-run limit of the large run's
        small, _, _ = submit(user, python, benchmark(user, python, "scale1", 1), bin_dir)
        runs.append(small)
        deadline = time.monotonic() + 300
        while len(link_use(small)) < 2 and time.monotonic() < deadline:
            time.sleep(2)
        f["small_use"] = link_use(small)
        counter.write_text("")
        large = benchmark(user, python, "scale", args.shards)
        f["s0"] = sdiag()
        big, f["submit_s"], f["submit_cpu"] = submit(
            user, python, large, bin_dir, f"slurm.max_running={args.max_running}", f"shards={args.shards}"
        )
        runs.append(big)
        f["s1"] = sdiag()
        f["calls"] = Counter(line.split()[0] for line in counter.read_text().splitlines())
        f["slurm_s"] = call_seconds(counter)
        time.sleep(20)  # the first links start (sched_interval 5 s)
        f["ended0"], f["s2"], t2 = len(link_use(big)), sdiag(), time.monotonic()
        time.sleep(args.window)
        f["ended1"], f["s3"] = len(link_use(big)), sdiag()
        f["window"] = time.monotonic() - t2
        f["s4"] = sdiag()
        f["whole_queue"] = bare_squeue()
        f["bare"] = min(bare_squeue(run_names(big)) for _ in range(3))
        f["s5"] = sdiag()  # the four whole-queue squeues' RPCs: what a link's query was before issue 32
        f["inproc"] = min(status_in_process(big) for _ in range(3))
        f["cli"] = min(status_cli(user, python, big) for _ in range(2))
        f["interp"], _ = _interpreter()
        f["use"] = link_use(big)
    finally:
        f["remaining"] = cleanup(user, python, runs)
    f["load"] = os.getloadavg()[0]
    return report(f)


def _rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {name: round(value, 3) for name, value in seconds.items()}


def report(f: dict[str, Any]) -> int:
    """Print every figure with its limit; 0 when every target is met."""
    use, small_use, shards = f["use"], f["small_use"], f["shards"]
    queries = [q for q, _, _ in use]
    rows = [r for _, r, _ in use]
    if not use or not small_use:  # no link logged its use: nothing to judge
        print(
            f"no link figures: {len(use)} links of the large run, {len(small_use)} of the 1-shard run logged"
        )
        return 1
    small_q, small_r = max(q for q, _, _ in small_use), max(r for _, r, _ in small_use)
    print(
        f"{shards} shards on cluster {CLUSTER} (slurm.max_running {f['max_running']}); load {f['load']:.1f}"
    )
    print(
        f"links that ended and logged their use: {len(use)} of {shards} shards' chains "
        f"(the sample; {f['ended1'] - f['ended0']} in the {f['window']:.0f} s RPC window)"
    )
    print(
        f"  queries per link: max {max(queries)}, median {statistics.median(queries)} "
        f"(limit {MAX_QUERIES}: {max(queries) / MAX_QUERIES:.2f}x; 1-shard run's links max {small_q}: "
        f"{max(queries) / small_q:.2f}x)"
    )
    print(
        f"  rows per link: max {max(rows)}, median {statistics.median(rows)} (limit {MAX_ROWS}: "
        f"{max(rows) / MAX_ROWS:.2f}x; 1-shard run's links max {small_r}: {max(rows) / small_r:.2f}x); "
        f"the whole-queue squeue -u a link ran before issue 32 read {f['whole_queue'][2]} rows now: "
        f"{max(rows) / f['whole_queue'][2]:.5f}x"
    )
    by_command: Counter[str] = Counter()
    for _, _, calls in use:
        by_command.update(calls)
    print(
        f"  calls by command over the sample: {dict(by_command)} ({sum(by_command.values()) / len(use):.2f} "
        f"commands per link, sbatch and scancel included); 1-shard links: {[c for _, _, c in small_use]}"
    )
    links = max(f["ended1"] - f["ended0"], 1)
    for name, (a, b) in (("submit", ("s0", "s1")), ("link window", ("s2", "s3"))):
        by_type, by_user = rpc_delta(f[a], f[b], "type"), rpc_delta(f[a], f[b], "user")
        print(f"  sdiag -M {CLUSTER}, {name}: by type {by_type}; by user {by_user}")
    user_rpcs = rpc_delta(f["s2"], f["s3"], "user").get(TEST_USER, (0, 0))
    print(
        f"  RPCs of {TEST_USER} per link in the window: {user_rpcs[0] / links:.1f} "
        f"({user_rpcs[0]} RPCs, {user_rpcs[1] / 1e3:.0f} ms of slurmctld, {links} links ended)"
    )
    per_rpc = {
        name: f"{total / count / 1e3:.2f} ms"
        for name, (count, total) in rpc_delta(f["s2"], f["s3"], "type").items()
        if name.startswith("REQUEST_JOB") or name == "REQUEST_PARTITION_INFO"
    }
    whole = {
        name: f"{total / count / 1e3:.2f} ms x {count}"
        for name, (count, total) in rpc_delta(f["s4"], f["s5"], "type").items()
        if name != "REQUEST_STATS_INFO"
    }
    print(f"  slurmctld time per RPC in the window: {per_rpc}; the whole-queue squeue -u (4 calls): {whole}")
    bare_s, bare_cpu, bare_rows = f["bare"]
    doc_s, doc_cpu, doc_queries = f["inproc"]
    print(
        f"status in-process: {doc_s:.3f} s wall, {doc_cpu:.3f} s CPU, {doc_queries} queries; bare squeue of "
        f"the run's jobs ({bare_rows} rows) + split {bare_s:.3f} s wall, {bare_cpu:.3f} s CPU: "
        f"{doc_s / bare_s:.2f}x wall, {doc_cpu / bare_cpu:.2f}x CPU (limit {STATUS_LIMIT}x; the verdict's "
        "figure is CPU when the machine is loaded past its CPUs)"
    )
    print(
        f"status --json, whole CLI: {f['cli'][0]:.3f} s wall, {f['cli'][1]:.3f} s CPU (a bare interpreter "
        f"start {f['interp']:.3f} s)"
    )
    slurm_total = sum(f["slurm_s"].values())
    limit = SUBMIT_LIMIT_S + slurm_total
    print(
        f"submit, whole CLI: {f['submit_s']:.3f} s wall, {f['submit_cpu']:.3f} s CPU; Slurm calls "
        f"{dict(f['calls'])} took {slurm_total:.3f} s ({_rounded(f['slurm_s'])}); "
        f"limit {SUBMIT_LIMIT_S:.0f} s + {slurm_total:.3f} s = {limit:.3f} s: {f['submit_s'] / limit:.2f}x"
    )
    # On a machine loaded past its CPUs wall time is mostly the other processes' (bench/status.py):
    # then the submit's own CPU seconds are judged against the 3 s instead.
    loaded = f["load"] > (os.cpu_count() or 1)
    print(
        f"  submit's own CPU {f['submit_cpu']:.3f} s vs the {SUBMIT_LIMIT_S:.0f} s: "
        f"{f['submit_cpu'] / SUBMIT_LIMIT_S:.2f}x (the verdict's figure when the load {f['load']:.1f} "
        f"exceeds the {os.cpu_count()} CPUs: {loaded})"
    )
    print(f"cleanup: {f['remaining']} job(s) of the runs left in the queue; directories deleted")
    ok = (
        max(queries) <= MAX_QUERIES
        and max(rows) <= MAX_ROWS
        and max(queries) <= small_q
        and max(rows) <= small_r
        and (doc_cpu if loaded else doc_s) <= STATUS_LIMIT * (bare_cpu if loaded else bare_s)
        and (f["submit_s"] <= limit or (loaded and f["submit_cpu"] <= SUBMIT_LIMIT_S))
        and f["remaining"] == 0
    )
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
