"""Kill trials on the real Slurm (issue 19): array runs whose jobs are SIGKILLed at random instants
finish by themselves, each row answered exactly once, with no human command.

Each trial is one run of the kill harness's resumable collector (``tests/e2e/kill_collector.py``:
6 rows, 2 per link, so 3 links) and its merge (``kill_merge.py``, behind a 3 s sleep so the
aggregation can be hit), one shard, submitted as the test user. Every job's batch shell sleeps
``SETUP_S`` in ``slurm.env_setup`` before any gymslurm code runs, so a kill within that window
of a job seen RUNNING lands **before its first act** for sure (the batch shell dies; whether the
job acted is checked from the ledger afterwards, not assumed). A killer thread polls ``squeue``
for every trial at once and, by each trial's plan (seeded), sends ``scancel --signal=KILL``
(``--full``: every process of the job, or ``--batch``: the batch shell only) to the n-th link or
the aggregation of that run, a random delay after it was first seen RUNNING. The plans keep to the
documented bound (lookahead 2: never two consecutive jobs of a chain killed before their act).

What must hold per trial: the shard DONE and the aggregation DONE, the merged output holding each
row's answer exactly once, and — where the first link (an array task) was killed before its first
act — its spare array task (``array.json`` parts[0].spares) having carried the chain on.

All trials run at once (``TRIALS``, default 10; ``GYMSLURM_KILL_TRIALS`` / ``GYMSLURM_KILL_SEED``
to run more, as the issue-19 note's bench figures did); their Slurm waits overlap, about 3–5
minutes in all on the sandbox.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .helpers import SlurmCluster, SlurmUser, scenario_user
from .launcher_chains import Chain

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("GYMSLURM_KILL_TRIALS", "10"))
SEED = int(os.environ.get("GYMSLURM_KILL_SEED", "19"))
ROWS, PER_LINK, ROW_S, SETUP_S = 6, 2, 1.5, 3


@dataclass
class Kill:
    """Kill the ``nth`` link (or aggregation) job of a run seen RUNNING, ``delay_s`` after it was seen."""

    target: str  # "link" or "aggregation"
    nth: int
    how: str  # scancel --full or --batch
    delay_s: float

    @property
    def early(self) -> bool:
        """Planned inside the job's env_setup sleep: before any gymslurm code runs."""
        return self.delay_s < SETUP_S - 1.0


@dataclass
class Trial:
    """One run and what the killer did to it."""

    chain: Chain
    plan: list[Kill]  # kills still to come
    planned: list[Kill]
    name: str | None = None  # the run's name, known once submit created its folder
    killed: list[tuple[Kill, str, float]] = field(default_factory=list)  # kill, job, seconds seen before


def plan_for(index: int, rng: random.Random) -> list[Kill]:
    """The trial's kills: first links before their act, links mid-collection, the aggregation, or two
    kills with a job between them (the bound: never two consecutive pre-act deaths)."""
    how = rng.choice(["full", "batch"])
    early, late = rng.uniform(0.0, SETUP_S - 1.5), rng.uniform(SETUP_S + 0.5, SETUP_S + 2.5)
    # An early kill is a SIGKILL of the batch shell: Slurm turns a KILL of the whole job (--full)
    # into its cancel sequence (TERM, then KILL after KillWait), which the script's first-line trap
    # hands to the chain step, so the job still acts (seen: "received SIGTERM before the collector
    # started", its lookahead queued after Slurm had ended the job).
    return [
        [Kill("link", 1, "batch", early)],
        [Kill("link", 1, how, late)],
        [Kill("link", 2, "batch", early)],
        [Kill("aggregation", 1, how, rng.choice([early, late]))],
        [Kill("link", 1, "batch", early), Kill("link", 3, how, late)],
    ][index % 5]


def _bench(user: SlurmUser, python: Path) -> Path:
    """The trial's benchmark, with copies of the harness's collector and merge the job user can read."""
    work = user.workdir
    for name in (
        "tests/__init__.py",
        "tests/slurm/__init__.py",
        "tests/slurm/launcher_standin_collector.py",
        "tests/e2e/kill_collector.py",
        "tests/e2e/kill_merge.py",
    ):
        (work / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        source = REPO / name
        (work / "repo" / name).write_text(source.read_text() if source.exists() else "")
    subprocess.run(["chown", "-R", f"{user.name}:{user.name}", str(work / "repo")], check=True)
    user.write("data.jsonl", "".join(json.dumps({"q": i}) + "\n" for i in range(ROWS)), mode=0o644)
    collector = [str(python), str(work / "repo/tests/e2e/kill_collector.py"), str(ROW_S), str(PER_LINK)]
    merge = [
        "bash",
        "-c",
        'sleep 3; exec "$0" "$@"',
        str(python),
        str(work / "repo/tests/e2e/kill_merge.py"),
        "{inputs_glob}",
        "{output}",
    ]
    return user.write(
        "bench.yaml",
        f"dataset: {work / 'data.jsonl'}\nrun_root: {work / 'runs'}\nshards: 1\n"
        f"collector:\n  command: {json.dumps(collector)}\n"
        f"aggregation:\n  command: {json.dumps(merge)}\n"
        f"slurm:\n  python: {python}\n  time: '00:05:00'\n  infra_retry_limit: 10\n"
        f"  max_links_without_progress: null\n  env_setup: ['sleep {SETUP_S}']\n",
        mode=0o644,
    )


def _submit(chain: Chain) -> Chain:
    out = chain.gymslurm("submit", str(_bench(chain.user, chain.python)))
    match = re.search(r"gymslurm status (\S+)", out)
    assert match, out
    chain.run = Path(match.group(1))
    return chain


def _running() -> dict[str, str]:
    """Every RUNNING job (array tasks one by one) by id, with its name: one squeue."""
    out = subprocess.run(
        ["squeue", "-h", "-r", "-t", "R", "-o", "%i|%j"], capture_output=True, text=True, check=False
    ).stdout
    return dict(line.split("|", 1) for line in out.split() if "|" in line)


class Killer:
    """A thread that kills by every trial's plan (the n-th job of its target seen RUNNING, after its
    delay), started before the first trial is submitted: a trial's first link may start at once."""

    def __init__(self) -> None:
        self.trials: list[Trial] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.seen: list[dict[str, list[tuple[str, float]]]] = []

    def add(self, trial: Trial) -> None:
        """Watch ``trial`` from now on."""
        self.seen.append({"link": [], "aggregation": []})
        self.trials.append(trial)

    def _run(self) -> None:
        while not self.stop.is_set():
            now, running = time.monotonic(), _running()
            for trial, seen in zip(list(self.trials), list(self.seen), strict=False):
                self._step(trial, seen, running, now)
            time.sleep(0.1)

    @staticmethod
    def _step(
        trial: Trial,
        seen: dict[str, list[tuple[str, float]]],
        running: dict[str, str],
        now: float,
    ) -> None:
        if trial.name is None:  # submit creates the run folder before its first sbatch
            runs = trial.chain.user.workdir / "runs"
            found = [p.name for p in runs.iterdir() if p.is_dir()] if runs.exists() else []
            if not found:
                return
            trial.name = found[0]
        name = f"gs-{trial.name}"
        for job, job_name in running.items():
            target = "aggregation" if job_name == f"{name}-agg" else "link" if job_name == name else None
            if target and job not in [j for j, _ in seen[target]]:
                seen[target].append((job, now))
        if not trial.plan:
            return
        kill = trial.plan[0]
        if len(seen[kill.target]) < kill.nth:
            return
        job, at = seen[kill.target][kill.nth - 1]
        if now >= at + kill.delay_s:
            argv = ["scancel", "--signal=KILL", f"--{kill.how}", job]
            subprocess.run(argv, capture_output=True, check=False)
            trial.killed.append((kill, job, now - at))
            trial.plan.pop(0)


def _acted(chain: Chain, job: str, aggregation: bool) -> bool:
    """Whether ``job`` did its first act: a start record, or a job it queued, in its chain's ledger."""
    records = chain.ledger(None if aggregation else 0)
    return any((r.get("job_id") == job and r["kind"] == "start") or r.get("by") == job for r in records)


@pytest.fixture(scope="module")
def trials(slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path) -> Iterator[list[Trial]]:
    """Every trial submitted up front (their Slurm waits overlap), each with its seeded plan, under a
    killer that watches each from its submission on."""
    rng, killer = random.Random(SEED), Killer()
    killer.thread.start()
    try:
        for index in range(TRIALS):
            plan = plan_for(index, rng)
            chain = Chain(scenario_user(slurm_session_dir, f"kill-{SEED}-{index}"), slurm_python, steps=[])
            killer.add(Trial(chain, plan, planned=list(plan)))  # watched before its first job can start
            _submit(chain)
        yield killer.trials
    finally:
        killer.stop.set()
        killer.thread.join(timeout=10)
        for trial in killer.trials:
            trial.chain.cancel()


def _merged(chain: Chain) -> list[dict[str, Any]] | None:
    assert chain.run is not None
    found = list((chain.run / "output/merged").glob("*.jsonl"))
    return [json.loads(line) for line in found[0].read_text().splitlines()] if found else None


def test_array_runs_killed_at_random_instants_finish_by_themselves(trials: list[Trial]) -> None:
    """Every trial ends DONE and aggregated with each row merged once; a first link killed before its
    first act is carried on by its spare array task; every planned kill landed."""
    reports = [trial.chain.wait(timeout=900) for trial in trials]
    lines, problems = [], []
    for index, (trial, report) in enumerate(zip(trials, reports, strict=True)):
        plan = trial.planned
        chain = trial.chain
        assert chain.run is not None
        acted = [_acted(chain, job, kill.target == "aggregation") for kill, job, _ in trial.killed]
        kills = [
            f"{k.target}#{k.nth} {job} --{k.how} +{s:.1f}s{'' if a else ' (before its first act)'}"
            for (k, job, s), a in zip(trial.killed, acted, strict=True)
        ]
        verdict = (report["shards"][0]["verdict"], report["aggregation"]["state"].split()[0].rstrip(":"))
        lines.append(f"trial {index}: {verdict} {'; '.join(kills) or 'no kill'}")
        if verdict != ("DONE", "DONE") or _merged(chain) != [{"q": i, "a": 2 * i} for i in range(ROWS)]:
            problems.append(f"trial {index} {chain.run}: {verdict}, merged {_merged(chain)}")
        if len(trial.killed) != len(plan):
            problems.append(f"trial {index}: {len(trial.killed)} of {len(plan)} planned kills landed")
        first = json.loads((chain.run / "array.json").read_text())["parts"][0]
        pre_act = [k for (k, _, _), a in zip(trial.killed, acted, strict=True) if not a]
        if any(k.target == "link" and k.nth == 1 for k in pre_act):
            spare = f"{first['spares'][0]}_0"
            if not any(r["kind"] == "start" and r["job_id"] == spare for r in chain.ledger(0)):
                problems.append(f"trial {index}: first link killed before its act; spare {spare} never ran")
    summary = "\n".join(lines)
    print(summary)
    assert not problems, "\n".join(problems) + "\n" + summary
    early_first = sum(
        1
        for t in trials
        for k, job, _ in t.killed
        if k.target == "link" and k.nth == 1 and not _acted(t.chain, job, False)
    )
    assert early_first >= 2 * TRIALS // 5, f"{early_first} first links killed before their act\n{summary}"
