"""A scripted Slurm for counting a link's scheduler calls at any run size (tests and bench/).

:class:`ScriptedSlurm` is a :class:`SlurmClient` whose one seam (``run``) answers ``sbatch``,
``squeue``, ``sacct``, ``scontrol show job`` and ``scancel`` from an in-memory queue, in the exact
text Slurm 22.05 prints (the client's own parsers read it), so a link's calls and the rows they
return are counted by the client itself (``calls``, ``rows``). :func:`array_run` makes an array
run of any number of shards whose first links and spares are queued in that queue, as ``submit``
leaves it, without writing a ledger per shard.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gymslurm.errors import SlurmError
from gymslurm.launcher.rundir import ArrayPart, ArrayRecord, RunDir, RunInfo, atomic_write
from gymslurm.launcher.settings import BenchmarkSettings, load_benchmark
from gymslurm.site.slurm import SlurmClient

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "tests" / "slurm" / "launcher_standin_collector.py"
CHUNK = 1000  # first links per job array (Slurm's MaxArraySize is 1001)
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}


class ScriptedSlurm(SlurmClient):
    """Slurm's answers from an in-memory queue of job id -> state (array tasks as ``ARRAY_TASK``)."""

    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, str] = {}
        self.next_id = 100
        self.log: list[list[str]] = []

    def add_array(self, tasks: Sequence[int], after: str | None = None) -> str:
        """Queue one array of these task ids (pending), as ``sbatch --array`` would: its job id."""
        job, self.next_id = str(self.next_id), self.next_id + 1
        for task in tasks:
            self.states[f"{job}_{task}"] = "PENDING"
        return job

    def run(
        self, argv: Sequence[str], check: bool = True, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        self.queries += 1
        self.calls[argv[0]] += 1
        self.log.append(list(argv))
        code, stdout, stderr = getattr(self, f"_{argv[0]}")(list(argv))
        if check and code != 0:  # as SlurmClient.run says a failed command
            raise SlurmError(f"{' '.join(argv)} exited {code}\nstdout: {stdout}\nstderr: {stderr}")
        return subprocess.CompletedProcess(list(argv), code, stdout, stderr)

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

    def _scontrol(self, argv: list[str]) -> tuple[int, str, str]:
        job = argv[-1]
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
    info = RunInfo(
        name="r",
        benchmark="b",
        overrides=[],
        created_at="t",
        backend="slurm",
        shards=shards,
        workdir=str(tmp),
        output_stem="rollouts",
        infra_retry_limit=3,
        max_walltime_s=None,
        accounting=True,
        array=True,
    )
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
