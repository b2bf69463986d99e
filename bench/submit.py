"""Benchmark: ``gymslurm submit`` of 1,000 shards on the real Slurm sandbox.

Builds a benchmark of ``SHARDS`` shards over a ``SHARDS``-row dataset, puts counting wrappers of
``sbatch``/``squeue``/``sacct``/``scontrol``/``scancel`` on PATH (each logs its name, then runs the
real command), and measures ``submit`` in-process and as the whole CLI (Python start-up
included). The jobs are submitted held (``--hold``) and cancelled at once, so the bench runs no
job. Targets (issue 14): submit ≤ 2 s (in-process wall time; for the whole CLI its CPU time, since
on a shared 2-core machine the wall time of a fresh Python mostly measures the other users), and a
Slurm call count that does not grow with shards (measured at 10 and at ``SHARDS`` shards).
Prints the figures with the limit; exits 1 when a target is missed.

Run from the repository root on a machine with the sandbox up: ``python bench/submit.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gymslurm.launcher.submit import submit

SHARDS, SMALL, LIMIT_S = 1000, 10, 2.0
COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "scancel")


def wrappers(bin_dir: Path, counter: Path) -> None:
    """Counting wrappers of the Slurm commands, in ``bin_dir``."""
    bin_dir.mkdir()
    for name in COMMANDS:
        real = shutil.which(name)
        assert real, f"{name} is not on PATH: is the Slurm sandbox installed? (docs/slurm-sandbox.md)"
        script = bin_dir / name
        script.write_text(f'#!/bin/bash\necho {name} >> {counter}\nexec {real} "$@"\n')
        script.chmod(0o755)


def benchmark(root: Path, shards: int) -> Path:
    """A benchmark YAML of ``shards`` shards whose jobs are held (they never run)."""
    (root / "data.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(shards)))
    path = root / f"bench-{shards}.yaml"
    path.write_text(
        f"name: bench{shards}\ndataset: {root / 'data.jsonl'}\nrun_root: {root / 'runs'}\nshards: {shards}\n"
        "collector:\n  command: [/bin/true]\naggregation:\n  enabled: false\n"
        "slurm:\n  time: '00:05:00'\n  array: true\n  extra_directives: ['--hold']\n"
    )
    return path


def cancel_run(root: Path, shards: int) -> None:
    """Cancel the held array of the run just submitted."""
    for array in (root / "runs").glob(f"bench{shards}-*/array.json"):
        subprocess.run(["scancel", json.loads(array.read_text())["job_id"]], check=False)


def measure(root: Path, shards: int, counter: Path, cli: bool) -> tuple[float, int, float]:
    """Wall seconds, Slurm calls and CPU seconds of one submit of ``shards`` shards.

    CPU seconds are the CLI process's own (user + system), which the load of a shared machine
    does not inflate the way it inflates wall time; in-process, they are this process's.
    """
    bench = benchmark(root, shards)
    counter.write_text("")
    before = resource.getrusage(resource.RUSAGE_CHILDREN if cli else resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if cli:
        subprocess.run([sys.executable, "-m", "gymslurm", "submit", str(bench)], check=True, cwd=root,
                       capture_output=True)  # fmt: skip
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            assert submit(str(bench), [], "slurm", False) == 0
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN if cli else resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    calls = len(counter.read_text().splitlines())
    cancel_run(root, shards)
    shutil.rmtree(root / "runs")
    return took, calls, cpu


def main() -> int:
    """Measure and print; 1 when a target is missed."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        counter = root / "calls.txt"
        wrappers(root / "bin", counter)
        os.environ["PATH"] = f"{root / 'bin'}:{os.environ['PATH']}"
        os.chdir(root)
        measure(root, SMALL, counter, cli=False)  # warm: imports and Hydra's first compose
        small_s, small_calls, _ = measure(root, SMALL, counter, cli=False)
        big_s, big_calls, big_cpu = measure(root, SHARDS, counter, cli=False)
        cli_s, cli_calls, cli_cpu = measure(root, SHARDS, counter, cli=True)
    load = os.getloadavg()[0]
    print(
        f"submit of {SHARDS} shards on the Slurm sandbox (first links as one held job array); load {load:.1f}"
    )
    print(f"  in-process: {big_s:.3f} s wall ({big_s / LIMIT_S:.2f} of the {LIMIT_S:.0f} s limit), "
          f"{big_cpu:.3f} s CPU, {big_calls} Slurm calls")  # fmt: skip
    print(f"  whole CLI:  {cli_s:.3f} s wall, {cli_cpu:.3f} s CPU ({cli_cpu / LIMIT_S:.2f} of the limit; "
          f"Python start-up and imports included), {cli_calls} Slurm calls")  # fmt: skip
    print(
        f"  {SMALL} shards: {small_s:.3f} s, {small_calls} Slurm calls (the count does not grow with shards)"
    )
    ok = big_s <= LIMIT_S and cli_cpu <= LIMIT_S and big_calls == small_calls == cli_calls
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
