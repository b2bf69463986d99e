"""The kill harness: local-backend runs whose jobs are SIGKILLed at random instants, nobody helping.

One :func:`run_trial` submits a small run with ``gymslurm submit --wait`` (the collector is
``kill_collector.py``, the aggregation ``kill_merge.py``), and meanwhile a killer watches the local
queue (``local/jobs/*.json``) every 10 ms: the jobs of a :class:`Plan` are killed as they start,
each after its delay (``early``: within the job's first 100 ms), either its batch shell (the job's
process) or its chain step (the shell's child; the shell itself when it has none yet). A plan kills
a link, its successor (the next job of the chain to start), or the aggregation. The trial passes
when ``submit --wait`` exits 0 and the merged output holds every row's answer exactly once: no
human command at all. Used by tests/e2e/test_kill_harness.py (CI) and bench/kill_chains.py.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
EARLY_S = 0.1


@dataclass(frozen=True)
class Kill:
    """Kill the ``nth`` job of ``target`` ("link" or "aggregation") to start after the previous kill."""

    target: str
    what: str  # "shell" (the batch shell: the job) or "step" (the chain step inside it)
    delay_s: float
    nth: int = 1  # 1: the very next one (for a link after a kill: its successor)


@dataclass
class Plan:
    """The kills of one trial, in order."""

    kills: list[Kill]
    lookahead: int = 2
    bounded: bool = True  # kill within the bound (False: every kill as planned, e.g. to show lookahead 1)


@dataclass
class Trial:
    """What happened in one trial."""

    seed: int
    plan: Plan
    exit_code: int | None = None
    last_line: str = ""
    killed: list[str] = field(default_factory=list)
    merged_ok: bool = False
    seconds: float = 0.0
    problem: str = ""

    @property
    def passed(self) -> bool:
        """``submit --wait`` said done and the merged output is exactly right."""
        return self.exit_code == 0 and self.merged_ok and not self.problem


def random_plan(rng: random.Random) -> Plan:
    """1-3 kills of links, successors and the aggregation, a third of them in a job's first 100 ms."""
    kills: list[Kill] = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        target = "aggregation" if rng.random() < 0.3 else "link"
        early = rng.random() < 0.35
        delay = rng.uniform(0.0, EARLY_S) if early else rng.uniform(EARLY_S, 3.0)
        kills.append(Kill(target, rng.choice(["shell", "step"]), delay, nth=rng.choice([1, 1, 2])))
    kills.sort(key=lambda k: k.target == "aggregation")  # links first: aggregation comes last
    return Plan(kills, lookahead=rng.choice([2, 2, 3]))


def write_benchmark(folder: Path, shards: int, rows: int, lookahead: int) -> Path:
    """The trial's benchmark: rows answered 2 per link at 0.3 s each, generous retry budgets."""
    (folder / "data.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(rows)))
    path = folder / "bench.yaml"
    path.write_text(
        f"dataset: {folder / 'data.jsonl'}\nrun_root: {folder / 'runs'}\nshards: {shards}\n"
        f"collector:\n  command: [{sys.executable}, {HERE / 'kill_collector.py'}, '0.3', '2']\n"
        f"aggregation:\n  command: [{sys.executable}, {HERE / 'kill_merge.py'}, "
        "'{inputs_glob}', '{output}']\n"
        f"slurm:\n  infra_retry_limit: 20\n  max_links_without_progress: null\n  lookahead: {lookahead}\n"
        "  time: '00:05:00'\n"
    )
    return path


class _JobFiles:
    """The local queue's job files in job order, each parsed again only when it was replaced: the
    killers (15 threads at once in CI) read them every 10 ms for the whole trial, and parsing every
    file each time was most of the harness's own CPU."""

    def __init__(self, local: Path) -> None:
        self.folder = local / "jobs"
        self.parsed: dict[str, tuple[tuple[int, int, int], dict[str, object]]] = {}

    def jobs(self) -> list[dict[str, object]]:
        found = []
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return []
        for entry in entries:
            if not (entry.name.startswith("local-") and entry.name.endswith(".json")):
                continue
            try:
                stat = entry.stat()
                version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # written whole, by rename
                known = self.parsed.get(entry.name)
                if known is None or known[0] != version:
                    known = self.parsed[entry.name] = (version, json.loads(Path(entry.path).read_text()))
            except (OSError, ValueError):
                continue
            found.append((int(entry.name[len("local-") : -len(".json")]), known[1]))
        return [job for _, job in sorted(found, key=lambda pair: pair[0])]


def _kill(job: dict[str, object], what: str) -> str:
    pid = int(str(job["pid"]))
    victim = pid
    if what == "step":
        try:
            children = psutil.Process(pid).children()
        except psutil.Error:
            children = []
        victim = children[0].pid if children else pid
    try:
        os.kill(victim, signal.SIGKILL)
    except ProcessLookupError:
        return f"{job['id']} ({what}: already gone)"
    return f"{job['id']} ({'shell' if victim == pid else 'step'} pid {victim})"


def _acted(run: Path, job: dict[str, object]) -> bool:
    """Whether the job did its first act: its chain's ledger shows a job it queued (or its decision)."""
    ledger = run / ("aggregate" if str(job["script"]).endswith("aggregate.sbatch") else "shards/000")
    try:
        text = (ledger / "ledger.jsonl").read_text()
    except OSError:
        return False
    return f'"by":"{job["id"]}"' in text or f'"accounted_by":"{job["id"]}"' in text


def _killer(local: Path, plan: Plan, trial: Trial, done: list[bool]) -> None:
    """Kill by the plan, within the documented bound: at most ``lookahead - 1`` consecutive jobs
    of a chain killed before their first act (a job that has not acted yet is let act first)."""
    seen: set[str] = set()
    files = _JobFiles(local)
    pending = list(plan.kills)
    countdown = pending[0].nth if pending else 0
    before_act = {"link": 0, "aggregation": 0}
    while pending and not done:
        for job in files.jobs():
            if job["id"] in seen or job["state"] != "RUNNING":
                continue
            seen.add(str(job["id"]))
            target = "aggregation" if str(job["script"]).endswith("aggregate.sbatch") else "link"
            if pending[0].target != target:
                continue
            countdown -= 1
            if countdown > 0:
                continue
            kill = pending.pop(0)
            started = float(str(job["started_at"]))
            if plan.bounded and before_act[target] >= plan.lookahead - 1:
                while not _acted(local.parent, job) and not done and _running(local, job):
                    time.sleep(0.01)
                started = time.time()
            time.sleep(max(0.0, started + kill.delay_s - time.time()))
            acted = _acted(local.parent, job)
            since = time.time() - float(str(job["started_at"]))
            note = "" if acted else " (before its first act)"
            trial.killed.append(f"{target} {_kill(job, kill.what)} at +{since:.3f}s{note}")
            before_act[target] = 0 if acted else before_act[target] + 1
            countdown = pending[0].nth if pending else 0
            break
        time.sleep(0.01)


def _running(local: Path, job: dict[str, object]) -> bool:
    try:
        return json.loads((local / "jobs" / f"{job['id']}.json").read_text())["state"] == "RUNNING"
    except (OSError, ValueError):
        return True


def run_trial(
    folder: Path,
    seed: int,
    *,
    shards: int = 1,
    rows: int = 4,
    timeout_s: float = 600,
    plan: Plan | None = None,
) -> Trial:
    """One trial in ``folder`` (created): submit --wait, kill by the seed's plan, check the merge."""
    import threading

    plan = plan or random_plan(random.Random(seed))
    trial = Trial(seed, plan)
    folder.mkdir(parents=True, exist_ok=True)
    bench = write_benchmark(folder, shards, rows, plan.lookahead)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gymslurm", "submit", str(bench), "--backend", "local", "--wait"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    done: list[bool] = []
    while not list((folder / "runs").glob("*/local")) and proc.poll() is None:
        time.sleep(0.01)
    locals_ = list((folder / "runs").glob("*/local"))
    thread = None
    if locals_:
        thread = threading.Thread(target=_killer, args=(locals_[0], plan, trial, done), daemon=True)
        thread.start()
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        trial.problem = f"submit --wait did not return in {timeout_s:.0f}s"
    done.append(True)
    if thread is not None:
        thread.join(timeout=5)
    trial.seconds = time.monotonic() - t0
    trial.exit_code = proc.returncode
    lines = [line for line in out.splitlines() if line.strip()]
    trial.last_line = lines[-1] if lines else ""
    merged = list((folder / "runs").glob("*/output/merged/*.jsonl"))
    want = [{"q": i, "a": 2 * i} for i in range(rows)]
    got = [json.loads(line) for line in merged[0].read_text().splitlines()] if merged else None
    trial.merged_ok = got == want
    if not trial.passed and not trial.problem:
        trial.problem = f"exit {trial.exit_code}, merged {'ok' if trial.merged_ok else got}:\n{out[-3000:]}"
    return trial
