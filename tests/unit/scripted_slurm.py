"""The one scripted Slurm of the unit tests (and bench/): the real client, its subprocess seam answered.

:class:`ScriptedSlurm` is a :class:`SlurmClient` whose one seam (:meth:`SlurmClient.execute`)
answers each command from a script of replies, when the test gives one (``replies``: the text a
command prints, a :func:`reply`, or a list of those in turn), else from an in-memory queue:
``sbatch``, ``squeue``, ``sacct``, ``scontrol show job`` and ``scancel`` in the exact text Slurm
22.05 prints. Everything else is the client's own: its parsers, its exit-code check, its counts of
calls and rows (``calls``, ``rows``), so a link's scheduler calls are counted at any run size.
:func:`array_run` makes an array run of any number of shards whose first links and spares are
queued in that queue, as ``submit`` leaves it, without writing a ledger per shard.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gymslurm.launcher.rundir import ArrayPart, ArrayRecord, RunDir, atomic_write
from gymslurm.launcher.settings import BenchmarkSettings, load_benchmark
from gymslurm.site.slurm import SlurmClient
from tests.run_info import run_info

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "tests" / "slurm" / "launcher_standin_collector.py"
CHUNK = 1000  # first links per job array (Slurm's MaxArraySize is 1001)
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}


Reply = str | subprocess.CompletedProcess[str]


def reply(stdout: str = "", stderr: str = "", code: int = 0) -> subprocess.CompletedProcess[str]:
    """A command's scripted answer: its output and exit code."""
    return subprocess.CompletedProcess([], code, stdout, stderr)


class ScriptedSlurm(SlurmClient):
    """Slurm's answers from a script of replies, else from an in-memory queue of job id -> state
    (array tasks as ``ARRAY_TASK``). A command neither answers fails the test, naming it."""

    def __init__(self, replies: Mapping[str, Reply | list[Reply]] | None = None) -> None:
        super().__init__()
        self.states: dict[str, str] = {}
        self.next_id = 100
        self.log: list[list[str]] = []  # each command as run (``calls`` counts them by name)
        self.envs: list[dict[str, str] | None] = []  # the environment each ran with
        self.stdins: list[str | None] = []  # the input each read (scontrol's show job lines)
        self.replies = {
            name: list(given) if isinstance(given, list) else [given]
            for name, given in (replies or {}).items()
        }

    def add_array(self, tasks: Sequence[int], after: str | None = None) -> str:
        """Queue one array of these task ids (pending), as ``sbatch --array`` would: its job id."""
        job, self.next_id = str(self.next_id), self.next_id + 1
        for task in tasks:
            self.states[f"{job}_{task}"] = "PENDING"
        return job

    def execute(
        self, argv: list[str], env: dict[str, str] | None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The scripted reply of ``argv[0]``, else the queue's answer; the command (and its input) is
        recorded."""
        self.log.append(list(argv))
        self.envs.append(env)
        self.stdins.append(stdin)
        script = self.replies.get(argv[0])
        if script is not None:
            given = script.pop(0) if len(script) > 1 else script[0]
            done = reply(given) if isinstance(given, str) else given
            return subprocess.CompletedProcess(argv, done.returncode, done.stdout, done.stderr)
        answer = getattr(self, f"_{argv[0]}", None)
        assert answer is not None, f"unscripted Slurm command: {' '.join(argv)}"
        code, stdout, stderr = answer(argv, stdin) if argv[0] == "scontrol" else answer(argv)
        return subprocess.CompletedProcess(argv, code, stdout, stderr)

    def _sbatch(self, argv: list[str]) -> tuple[int, str, str]:
        array = next((a.split("=", 1)[1] for a in argv if a.startswith("--array=")), None)
        if array is None:
            job, self.next_id = str(self.next_id), self.next_id + 1
            self.states[job] = "PENDING"
        else:
            job = self.add_array([int(t) for t in array.split("%")[0].split(",")])
        return 0, f"{job}\n", ""

    def _squeue(self, argv: list[str]) -> tuple[int, str, str]:
        wanted = argv[argv.index("-j") + 1].split(",") if "-j" in argv else list(self.states)
        rows = [
            f"{job}|gs|{self.states[job]}|None|(null)|0:00|5:00|N/A\n" for job in wanted if job in self.states
        ]
        if "-j" in argv and len(wanted) == 1 and not rows:
            return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
        return 0, "".join(rows), ""

    def _sacct(self, argv: list[str]) -> tuple[int, str, str]:
        wanted = argv[argv.index("-j") + 1].split(",")
        rows = [f"{job}|gs|{self.states[job]}|0:0|t|t|10|billing=1\n" for job in wanted if job in self.states]
        return 0, "".join(rows), ""

    def _scontrol(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        if stdin is None:  # scontrol show job -o ID
            return self._show_job(argv[-1])
        out, err = [], []  # scontrol -o reading "show job ID" lines, as 22.05 (with readline) prints
        for command in stdin.splitlines():
            _, stdout, stderr = self._show_job(command.split()[-1])
            out.append(f"scontrol: {command}\n{stdout}")
            err.append(stderr)
        return (1 if any(err) else 0), "".join(out) + "scontrol: \n", "".join(err)

    def _show_job(self, job: str) -> tuple[int, str, str]:
        if job not in self.states:
            return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
        array, _, task = job.partition("_")
        fields = f"JobId={job} ArrayJobId={array} ArrayTaskId={task} JobState={self.states[job]} Restarts=0"
        return 0, fields + "\n", ""

    def _scancel(self, argv: list[str]) -> tuple[int, str, str]:
        for job in argv[1:]:
            for known in [k for k in self.states if k == job or k.startswith(f"{job}_")]:
                if self.states[known] not in FINAL_STATES:
                    self.states[known] = "CANCELLED"
        return 0, "", ""


def array_run(tmp: Path, shards: int, client: ScriptedSlurm, steps: list[dict[str, object]]) -> RunDir:
    """An array run of ``shards`` shards as ``submit`` leaves it: run.json, array.json (an array of
    first links per 1,000 shards, each with its spare array), both queued in ``client``."""
    run = RunDir(tmp / "runs" / "r")
    info = run_info(shards=shards, workdir=str(tmp), accounting=True, array=True)
    atomic_write(run.info_path, info.model_dump_json().encode())
    parts = []
    for base in range(0, shards, CHUNK):
        size = min(CHUNK, shards - base)
        first = client.add_array(range(size))
        spare = client.add_array(range(size), after=first)
        parts.append(ArrayPart(job_id=first, base=base, size=size, spares=[spare]))
    record = ArrayRecord(
        job_id=parts[0].job_id, shards=shards, max_running=None, at="t", chunk=CHUNK, parts=parts
    )
    atomic_write(run.array_path, record.model_dump_json().encode())
    (tmp / "steps.json").write_text(json.dumps(steps))
    return run


def benchmark(tmp: Path, shards: int, extra: str = "") -> BenchmarkSettings:
    """The run's settings: the stand-in collector (tests/slurm/launcher_standin_collector.py)."""
    (tmp / "data.jsonl").write_text('{"q": 1}\n')
    path = tmp / "bench.yaml"
    path.write_text(
        f"dataset: {tmp / 'data.jsonl'}\nrun_root: {tmp / 'runs'}\nshards: {shards}\n"
        f"collector:\n  command: [{sys.executable}, {STANDIN}, {tmp / 'steps.json'}]\n{extra}"
    )
    return load_benchmark(str(path), [])[0]
