"""Benchmark: ``gymslurm submit`` and ``gymslurm cancel`` of 10,000 shards on the real Slurm sandbox.

Builds a benchmark of ``SHARDS`` shards over a ``SHARDS``-row dataset, puts counting wrappers of
``sbatch``/``squeue``/``sacct``/``scontrol``/``scancel`` on PATH (each logs its name, then runs the
real command), and measures ``submit`` of 10 shards in-process and of 10,000 as the whole CLI
(Python start-up included), then ``gymslurm cancel`` of that run as a whole CLI (spare arrays
included). The jobs are submitted held (``--hold``), so the bench runs no job. Targets (issue 19):
the whole-CLI submit ≤ 3 s and cancel ≤ 2 s, each also given as a ratio to a bare loop measured in
the same run (a shell that makes the same Slurm calls: ``scontrol show config`` and one ``sbatch
--array`` per array and per spare array; one ``squeue`` and one ``scancel`` of them all); Slurm
calls ≤ one per array (spare arrays counted: ``slurm.lookahead`` per MaxArraySize shards) plus one
and not growing with shards (10 shards: lookahead + 1); the queue footprint right after submit
(``squeue`` job records, arrays collapsed as Slurm keeps them) ≤ throttle + arrays, spares counted;
none left after cancel. Prints the figures with the limits; exits 1 when a target is missed.

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

from gymslurm.commands.submit import submit
from gymslurm.site.slurm import parse_config, site_limits

SHARDS, SMALL, LIMIT_S, CANCEL_LIMIT_S = 10_000, 10, 3.0, 2.0
COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "scancel")


def wrappers(bin_dir: Path, counter: Path, commands: tuple[str, ...] = COMMANDS) -> None:
    """Counting wrappers of the Slurm commands, in ``bin_dir``: each call appends ``NAME START END``
    (bash's ``$EPOCHREALTIME`` around the real command, no fork) to ``counter``, so a caller knows
    how many calls were made and how long the real commands took. Calls from inside a Slurm job
    (``SLURM_JOB_ID`` set: a job inherits the submitter's PATH) run the real command uncounted."""
    bin_dir.mkdir()
    for name in commands:
        real = shutil.which(name)
        assert real, f"{name} is not on PATH: is the Slurm sandbox installed? (docs/slurm-sandbox.md)"
        script = bin_dir / name
        script.write_text(
            f'#!/bin/bash\n[ -n "$SLURM_JOB_ID" ] && exec {real} "$@"\n'
            f'start=$EPOCHREALTIME; {real} "$@"; rc=$?\necho "{name} $start $EPOCHREALTIME" >> {counter}\n'
            "exit $rc\n"
        )
        script.chmod(0o755)


def call_seconds(counter: Path) -> dict[str, float]:
    """Wall seconds the real Slurm commands took, by command, from a :func:`wrappers` counter."""
    took: dict[str, float] = {}
    for line in counter.read_text().splitlines():
        name, start, end = line.split()
        took[name] = took.get(name, 0.0) + float(end) - float(start)
    return took


def benchmark(root: Path, shards: int) -> Path:
    """A benchmark YAML of ``shards`` shards whose jobs are held (they never run)."""
    (root / "data.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(shards)))
    path = root / f"bench-{shards}.yaml"
    path.write_text(
        f"name: bench{shards}\ndataset: {root / 'data.jsonl'}\nrun_root: {root / 'runs'}\nshards: {shards}\n"
        "collector:\n  command: [/bin/true]\naggregation:\n  enabled: false\n"
        "slurm:\n  time: '00:05:00'\n  extra_directives: ['--hold']\n"
    )
    return path


def arrays_of(root: Path, shards: int) -> list[str]:
    """The job arrays of the run just submitted (array.json): each part's array and its spare
    arrays (``slurm.lookahead - 1`` per part, the first links' lookahead)."""
    found = []
    for path in (root / "runs").glob(f"bench{shards}-*/array.json"):
        record = json.loads(path.read_text())
        for part in record.get("parts") or [{"job_id": record["job_id"]}]:
            found += [part["job_id"], *(part.get("spares") or [])]
    return found


def cancel_run(root: Path, shards: int) -> None:
    """Cancel every held array of the run just submitted, spares included."""
    subprocess.run(["scancel", *arrays_of(root, shards)], check=False)


def footprint(arrays: list[str], live: bool = False) -> int:
    """Job records of these arrays in the queue (``squeue`` without ``-r``: a pending array is one).
    ``live``: only pending, running or suspended ones (not those cancelled and kept for MinJobAge)."""
    states = ["-t", "PD,R,S,CF"] if live else []
    out = subprocess.run(
        ["squeue", "-h", "-j", ",".join(arrays), *states, "-o", "%i"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(out.split())


def measure(
    root: Path, shards: int, counter: Path, cli: bool, keep: bool = False
) -> tuple[float, int, float]:
    """Wall seconds, Slurm calls and CPU seconds of one submit of ``shards`` shards.

    CPU seconds are the CLI process's own (user + system), which the load of a shared machine
    does not inflate the way it inflates wall time; in-process, they are this process's.
    ``keep``: leave the run (held) for the cancel measurement.
    """
    bench = benchmark(root, shards)
    counter.write_text("")
    before = resource.getrusage(resource.RUSAGE_CHILDREN if cli else resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if cli:
        subprocess.run(
            [sys.executable, "-m", "gymslurm", "submit", str(bench)],
            check=True,
            cwd=root,
            capture_output=True,
        )
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            assert submit(str(bench), [], "slurm", False) == 0
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN if cli else resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    calls = len(counter.read_text().splitlines())
    if not keep:
        cancel_run(root, shards)
        shutil.rmtree(root / "runs")
    return took, calls, cpu


def cli_cancel(root: Path, shards: int, counter: Path) -> tuple[float, int]:
    """Wall seconds and Slurm calls of ``gymslurm cancel`` of the held run just submitted."""
    (run,) = (root / "runs").glob(f"bench{shards}-*/run.json")
    counter.write_text("")
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "gymslurm", "cancel", str(run.parent), "--run-root", str(root / "runs")]
    subprocess.run(argv, check=True, cwd=root, capture_output=True)
    return time.perf_counter() - t0, len(counter.read_text().splitlines())


def bare_loop(root: Path, shards: int, chunk: int, lookahead: int) -> tuple[float, float]:
    """The same Slurm calls from a plain shell: config, one held sbatch --array per array and
    ``lookahead - 1`` spare arrays after it (each ``afterany`` the one before); then one squeue and
    one scancel of them all. Wall seconds of the submit part and of the cancel part."""
    script = root / "bare.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --time=00:05:00\n#SBATCH --output=/dev/null\ntrue\n")
    ranges = " ".join(f"0-{min(chunk, shards - base) - 1}" for base in range(0, shards, chunk))
    spares = (
        f"for s in $(seq {lookahead - 1}); do j=$(sbatch --parsable --hold --array=$r "
        f"--dependency=afterany:$j {script}); echo $j; done; "
    )
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            "bash",
            "-c",
            f"scontrol show config >/dev/null; for r in {ranges}; do j=$(sbatch --parsable --hold "
            f"--array=$r {script}); echo $j; {spares}done",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    ).stdout.split()
    submit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", f"squeue -h -r >/dev/null; scancel {' '.join(out)}"], check=True)
    return submit_s, time.perf_counter() - t0


def main() -> int:
    """Measure and print; 1 when a target is missed."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    limits = site_limits(parse_config(config))
    chunk = limits["MaxArraySize"]
    # Each array's first links have ``lookahead - 1`` spare arrays (issue 19): one sbatch each.
    from gymslurm.launcher.settings import SlurmSettings

    lookahead = SlurmSettings().lookahead
    global SHARDS  # noqa: PLW0603
    # MaxJobCount counts every array task, spares included, and a cancelled task keeps its record
    # for MinJobAge: the two big submits (the CLI's and the bare loop's, lookahead x shards tasks
    # each) must fit in 80 % of it, so the bench takes the largest round number that does (10,000
    # at the sandbox's 50,000 and lookahead 2) and measures no third big submit in-process.
    SHARDS = min(SHARDS, (limits["MaxJobCount"] * 8 // 10 // (2 * lookahead)) // 1000 * 1000)
    arrays = -(-SHARDS // chunk)
    sbatches = arrays * lookahead
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        counter = root / "calls.txt"
        wrappers(root / "bin", counter)
        os.environ["PATH"] = f"{root / 'bin'}:{os.environ['PATH']}"
        os.chdir(root)
        try:
            measure(root, SMALL, counter, cli=False)  # warm: imports and Hydra's first compose
            small_s, small_calls, _ = measure(root, SMALL, counter, cli=False)
            cli_s, cli_calls, cli_cpu = measure(root, SHARDS, counter, cli=True, keep=True)
            held = footprint(arrays_of(root, SHARDS))
            cancel_s, cancel_calls = cli_cancel(root, SHARDS, counter)
            left = footprint(arrays_of(root, SHARDS), live=True)
            bare_submit, bare_cancel = bare_loop(root, SHARDS, chunk, lookahead)
        finally:  # whatever failed, nothing the bench submitted stays queued
            cancel_run(root, SHARDS)
    load = os.getloadavg()[0]
    print(
        f"submit of {SHARDS} shards on the Slurm sandbox (MaxArraySize {chunk}: {arrays} held job "
        f"arrays, each with {lookahead - 1} spare array(s) at lookahead {lookahead}: {sbatches} sbatch); "
        f"load {load:.1f}"
    )
    print(
        f"  whole CLI:  {cli_s:.3f} s wall ({cli_s / LIMIT_S:.2f} of the {LIMIT_S:.0f} s limit), "
        f"{cli_cpu:.3f} s CPU, {cli_calls} Slurm calls (limit {sbatches + 1}: one per array "
        f"and spare array, plus one); bare loop of the same Slurm "
        f"calls {bare_submit:.3f} s: {cli_s / bare_submit:.2f}x"
    )
    print(f"  {SMALL} shards: {small_s:.3f} s, {small_calls} Slurm calls")
    print(
        f"  queue footprint after submit: {held} job records (limit: throttle 0 + {sbatches} arrays, "
        "spares included)"
    )
    print(
        f"  cancel, whole CLI: {cancel_s:.3f} s wall ({cancel_s / CANCEL_LIMIT_S:.2f} of the "
        f"{CANCEL_LIMIT_S:.0f} s limit), {cancel_calls} Slurm calls, {left} job records left; "
        f"bare squeue + scancel "
        f"{bare_cancel:.3f} s: {cancel_s / bare_cancel:.2f}x"
    )
    ok = (
        cli_s <= LIMIT_S
        and cancel_s <= CANCEL_LIMIT_S
        and cli_calls <= sbatches + 1
        and left == 0
        and small_calls <= lookahead + 1
        and held <= sbatches
    )
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
