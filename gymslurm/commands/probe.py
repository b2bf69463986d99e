"""``gymslurm doctor --probe RUN_ROOT``: what a compute node sees, from a tiny job.

The login side takes an exclusive ``flock`` on ``RUN_ROOT/.gymslurm-doctor/probe.lock`` and
submits one short job running ``<python> -m gymslurm.commands.probe inside LOCK OUT`` with the
Python the benchmark's jobs run (``slurm.python``). The job reports its Python and gymslurm
versions, its host and clock, and whether its own non-blocking ``flock`` of the same file was
refused, as it must be while the login side holds it: the spec requires flock to work across
nodes on the run root, and Lustre's ``localflock`` grants it on every node (``noflock`` refuses
it with an error). The report is one JSON file, written whole (temporary file + rename).

Why not submitit (a declared dependency, made for "run a function on a compute node and bring
back the result"): it runs the *login* node's interpreter and unpickles the function there, so it
cannot tell which Python and gymslurm the configured ``slurm.python`` gives a job, which is the
question asked here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path

from gymslurm.errors import SlurmError
from gymslurm.site.findings import Finding, Level
from gymslurm.site.slurm import SlurmClient
from gymslurm.store.flock import lock_fd

PROBE_TIMEOUT_S = 180.0
MAX_CLOCK_SKEW_S = 10.0


def inside(lock: Path, out: Path) -> int:
    """The job's side: report versions, host, clock and whether flock excluded us; 0 always."""
    from gymslurm.version import __version__

    try:
        fd = os.open(lock, os.O_RDWR)
        try:
            # granted: the login side holds it, so the lock is not coherent across nodes
            flock = "granted" if lock_fd(fd, wait=False) else "refused"
        finally:
            os.close(fd)
    except OSError as error:
        flock = f"error: {error}"
    report = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "gymslurm": __version__,
        "host": socket.gethostname(),
        "time": time.time(),
        "flock": flock,
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report))
    os.replace(tmp, out)
    return 0


def findings_of(report: dict[str, object], login_time: float, login_version: str) -> list[Finding]:
    """The probe's report as findings (pure): flock, versions, clock."""
    found = []
    flock = str(report.get("flock"))
    if flock == "refused":
        found.append(
            Finding(
                "ok",
                "flock on the run root",
                flock,
                "a lock taken on the login node excludes a compute node: run locks and ledgers are safe",
            )
        )
    else:
        found.append(
            Finding(
                "error",
                "flock on the run root",
                flock,
                "a lock taken on the login node did not exclude the compute node (Lustre localflock or "
                "noflock?): two links or two collectors could write the same shard",
                "put run_root on a file system with coherent flock (Lustre 'flock' mount option, NFSv4)",
            )
        )
    version = str(report.get("gymslurm"))
    same = version == login_version
    found.append(
        Finding(
            "ok" if same else "warning",
            "gymslurm on the compute node",
            f"{version} (Python {report.get('python')}, {report.get('executable')})",
            "the job runs the same gymslurm as this login node"
            if same
            else f"this login node has gymslurm {login_version}: jobs would run another version",
            "" if same else "install the same gymslurm for slurm.python, or set slurm.python / env_setup",
        )
    )
    skew = float(report.get("time", 0.0)) - login_time  # type: ignore[arg-type]
    level: Level = "ok" if abs(skew) <= MAX_CLOCK_SKEW_S else "warning"
    found.append(
        Finding(
            level,
            "clock of the compute node",
            f"{skew:+.1f} s against this node",
            "ledger times and walltime from start records compare clocks of different nodes",
            "" if level == "ok" else "synchronise the clocks (NTP/chrony)",
        )
    )
    return found


def probe_findings(client: SlurmClient, root: str, partition: str | None, python: str) -> list[Finding]:
    """Run the probe job under ``root`` and turn its report into findings."""
    from gymslurm.version import __version__

    folder = Path(root) / ".gymslurm-doctor"
    folder.mkdir(parents=True, exist_ok=True)
    lock, out = folder / "probe.lock", folder / f"probe-{os.getpid()}.json"
    log = folder / f"probe-{os.getpid()}.log"
    command = shlex.join([python, "-m", "gymslurm.commands.probe", "inside", str(lock), str(out)])
    argv = [
        "sbatch",
        "--parsable",
        "--job-name=gymslurm-doctor",
        f"--output={log}",
        "--time=5",
        "--wrap",
        command,
    ]
    if partition:
        argv.insert(2, f"--partition={partition}")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    job = ""
    try:
        lock_fd(fd)
        job = client.run(argv).stdout.strip().split(";")[0]
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while not out.exists():
            if time.monotonic() > deadline or _ended(client, job):
                time.sleep(1.0)  # the report may land just after the job left the queue
                if out.exists():
                    break
                text = log.read_text()[-2000:] if log.exists() else "(no output)"
                return [
                    Finding(
                        "error",
                        "probe job",
                        f"job {job}",
                        f"the probe job ended without a report; its output ({log}):\n{text}",
                        f"check that '{python} -m gymslurm' works in a job (slurm.python, env_setup)",
                    )
                ]
            time.sleep(0.5)
        login_time = time.time()
        return findings_of(json.loads(out.read_text()), login_time, __version__)
    except SlurmError as error:
        return [Finding("error", "probe job", "not submitted", str(error), "check sbatch works from here")]
    finally:
        os.close(fd)
        if job:
            client.cancel([job])
        for path in (out, log):
            with contextlib.suppress(OSError):
                path.unlink()


def _ended(client: SlurmClient, job: str) -> bool:
    alive = ("PENDING", "RUNNING", "CONFIGURING")
    return job not in {row.job_id for row in client.queue() if row.state in alive}


if __name__ == "__main__":  # the job's side: python -m gymslurm.commands.probe inside LOCK OUT
    if len(sys.argv) != 4 or sys.argv[1] != "inside":
        raise SystemExit("usage: python -m gymslurm.commands.probe inside LOCK OUT")
    raise SystemExit(inside(Path(sys.argv[2]), Path(sys.argv[3])))
