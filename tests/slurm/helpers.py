"""Helpers for tests against the real Slurm sandbox (launchers/slurm-up.sh).

Why: the launcher's Slurm e2e tests and the smoke test need the same three things — a cluster
that answers, a non-root user to submit as, and a way to wait for a job's final state. They
live here (pure parsing apart from the subprocess calls) and are exposed as fixtures by
``tests/slurm/conftest.py``; import them with ``from .helpers import ...`` from a test module
in this package.

Trade-offs: jobs are observed with ``scontrol show job -o`` (Slurm 22.05's JSON outputs ignore
filters or carry wrong exit codes, see RECIPE.md), which forgets a job ``MinJobAge`` (600 s)
after it ends — long enough for any test. Polling is used instead of ``sbatch --wait``, which
polls every ~10 s.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]
SLURM_UP = REPO_ROOT / "launchers" / "slurm-up.sh"
TEST_USER = os.environ.get("GYMSLURM_TEST_USER", "slurmtest")
SCRATCH_ROOT = Path("/tmp/gymslurm-slurmtests")
SYSTEM_PYTHON = Path(os.environ.get("GYMSLURM_JOB_PYTHON_BASE", "/usr/bin/python3"))

FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "CANCELLED",
        "PREEMPTED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
UP_NODE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})

_FIELD = re.compile(r"(?:^|\s)(JobState|ExitCode|Reason|Restarts)=(\S+)")
_SUBMITTED = re.compile(r"^(\d+)(?:;\S+)?$")


class SlurmTestError(RuntimeError):
    """A Slurm command in a test helper failed or printed something unexpected."""


@dataclass(frozen=True)
class JobOutcome:
    """What ``scontrol show job -o`` says about a job: its state and ``ExitCode=code:signal``."""

    job_id: int | str  # an array task is ARRAY_TASK (162_7)
    state: str
    exit_code: int
    signal: int
    reason: str
    restarts: int
    raw: str

    @property
    def is_final(self) -> bool:
        """True once the job reached a state it will not leave by itself."""
        return self.state in FINAL_STATES


def parse_scontrol_job(job_id: int | str, text: str) -> JobOutcome:
    """Parse one-line ``scontrol show job -o ID`` output into a JobOutcome.

    For an array job the first line (the first task) is used. Raises SlurmTestError quoting the
    text if JobState or ExitCode is missing.
    """
    line = text.strip().splitlines()[0] if text.strip() else ""
    fields = dict(_FIELD.findall(line))
    if "JobState" not in fields or "ExitCode" not in fields:
        raise SlurmTestError(f"no JobState/ExitCode in `scontrol show job -o {job_id}` output: {text!r}")
    code, _, signal = fields["ExitCode"].partition(":")
    return JobOutcome(
        job_id=job_id,
        state=fields["JobState"],
        exit_code=int(code),
        signal=int(signal or 0),
        reason=fields.get("Reason", ""),
        restarts=int(fields.get("Restarts", "0")),
        raw=line,
    )


def parse_sbatch_parsable(text: str) -> int:
    """Parse ``sbatch --parsable`` output (``ID`` or ``ID;cluster``) into the job id."""
    match = _SUBMITTED.match(text.strip())
    if match is None:
        raise SlurmTestError(f"unexpected `sbatch --parsable` output: {text!r}")
    return int(match.group(1))


def run(
    args: Sequence[str], *, timeout: float = 60, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> str:
    """Run a command, return stdout; raise SlurmTestError with command, rc and stderr on failure.

    ``env``: variables added to this process's environment (e.g. ``SLURM_CONF`` of another cluster).
    """
    full_env = None if env is None else {**os.environ, **env}
    proc = subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env, check=False
    )
    if proc.returncode != 0:
        raise SlurmTestError(
            f"`{shlex.join(args)}` exited {proc.returncode}\nstdout: {proc.stdout.strip()}\n"
            f"stderr: {proc.stderr.strip()}"
        )
    return proc.stdout


@dataclass(frozen=True)
class SlurmCluster:
    """The sandbox cluster as ``sinfo`` sees it: its first node, the partitions, every node.

    ``node`` is the first node (the one node of the one-node sandbox of before); ``nodes`` all of
    them, sorted; ``partitions`` has the default partition first.
    """

    node: str
    partitions: tuple[str, ...]
    nodes: tuple[str, ...] = ()


def describe_cluster() -> SlurmCluster:
    """Ask ``sinfo`` for the nodes and partitions (default partition first, without its ``*``)."""
    nodes = tuple(sorted(set(run(["sinfo", "-h", "-N", "-o", "%N"]).split())))
    names = run(["sinfo", "-h", "-o", "%P"]).split()
    ordered = sorted(names, key=lambda n: not n.endswith("*"))
    return SlurmCluster(node=nodes[0], partitions=tuple(n.rstrip("*") for n in ordered), nodes=nodes)


# The sandbox's clusters (launchers/slurm-up.sh): `a` is the default (SLURM_CONF or
# /etc/slurm/slurm.conf), `b` a second one reached with `-M b` through slurmdbd, `n` one node
# without accounting (jobcomp only), reached only through its own config.
SECOND_CLUSTER = "b"
NO_ACCOUNTING_CLUSTER = "n"


def cluster_conf(name: str) -> Path:
    """The slurm.conf of one of the sandbox's clusters (`a`: the default config; else cluster-NAME/)."""
    default = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    return default if name == "a" else default.parent / f"cluster-{name}" / "slurm.conf"


def cluster_env(name: str) -> dict[str, str]:
    """The environment that points Slurm's commands at cluster ``name``'s own slurmctld."""
    return {"SLURM_CONF": str(cluster_conf(name))}


def hostnames(nodelist: str, env: Mapping[str, str] | None = None) -> list[str]:
    """``scontrol show hostnames NODELIST``: ``a[1-2]`` becomes ``["a1", "a2"]``."""
    return run(["scontrol", "show", "hostnames", nodelist], env=env).split()


def job_nodes(job_id: int | str, env: Mapping[str, str] | None = None) -> list[str]:
    """The nodes a job runs (or ran) on, from ``scontrol show job -o`` (empty while pending)."""
    line = run(["scontrol", "show", "job", "-o", str(job_id)], env=env)
    match = re.search(r"(?:^|\s)NodeList=(\S+)", line)
    if match is None or match.group(1) == "(null)":
        return []
    return hostnames(match.group(1), env=env)


def cluster_problem() -> str | None:
    """None if ``sinfo`` reports the sandbox node up, else a sentence saying what is wrong."""
    if shutil.which("sinfo") is None:
        return "`sinfo` is not installed (the Slurm client packages are missing)"
    try:
        out = run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=30)
    except (SlurmTestError, subprocess.TimeoutExpired) as exc:
        return f"the Slurm controller does not answer: {exc}"
    states = [line.split()[-1] for line in out.splitlines() if line.strip()]
    if not any(state in UP_NODE_STATES for state in states):
        return f"no node is up (sinfo says {states or 'no nodes'})"
    return None


def start_cluster() -> str:
    """Run launchers/slurm-up.sh (needs root); return its combined output, raise on failure."""
    proc = subprocess.run(["bash", str(SLURM_UP)], capture_output=True, text=True, timeout=600, check=False)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SlurmTestError(f"{SLURM_UP} exited {proc.returncode}:\n{output}")
    return output


def wait_for_job(
    job_id: int | str, *, timeout: float = 120, poll: float = 0.5, env: Mapping[str, str] | None = None
) -> JobOutcome:
    """Poll ``scontrol show job -o ID`` until the job is in a final state; return the outcome.

    ``env``: e.g. :func:`cluster_env` for a job of another cluster. Raises SlurmTestError with the
    last seen line (state, reason) when ``timeout`` seconds pass.
    """
    deadline = time.monotonic() + timeout
    while True:
        outcome = parse_scontrol_job(job_id, run(["scontrol", "show", "job", "-o", str(job_id)], env=env))
        if outcome.is_final:
            return outcome
        if time.monotonic() >= deadline:
            raise SlurmTestError(
                f"job {job_id} still {outcome.state} (Reason={outcome.reason}) after {timeout}s; "
                f"last `scontrol show job -o {job_id}`: {outcome.raw}\n"
                "look at `squeue -t all` and the slurmctld logs under /var/lib/gymslurm-sandbox/*/log"
            )
        time.sleep(poll)


@dataclass
class SlurmUser:
    """The user tests submit jobs as, with a scratch directory that user owns.

    As root this is the non-root ``slurmtest`` (commands go through ``runuser -u``); as any other
    user it is that user itself. ``submitted`` collects job ids so the fixture can cancel what a
    test leaves behind.
    """

    name: str
    workdir: Path
    as_root: bool
    submitted: list[int] = field(default_factory=list)

    def command(self, args: Sequence[str]) -> list[str]:
        """The argv that runs ``args`` as this user."""
        return ["runuser", "-u", self.name, "--", *args] if self.as_root else list(args)

    def run(self, args: Sequence[str], *, timeout: float = 60, env: Mapping[str, str] | None = None) -> str:
        """Run ``args`` as this user in ``workdir``; return stdout, raise SlurmTestError on failure.

        ``env`` adds variables (``runuser`` keeps the environment), e.g. :func:`cluster_env`.
        """
        return run(self.command(args), timeout=timeout, cwd=self.workdir, env=env)

    def write(self, name: str, text: str, *, mode: int = 0o755) -> Path:
        """Write a file into ``workdir`` owned by this user; return its path."""
        path = self.workdir / name
        path.write_text(text)
        path.chmod(mode)
        if self.as_root:
            shutil.chown(path, self.name, self.name)
        return path

    def sbatch(self, script: str, *args: str, name: str = "gymslurm-test") -> int:
        """Write ``script`` to workdir and submit it with ``sbatch --parsable``; return the job id.

        Output goes to ``workdir/NAME-%j.out``; ``args`` are extra sbatch options.
        """
        path = self.write(f"{name}.sbatch", script)
        out = self.run(["sbatch", "--parsable", "-J", name, "-o", f"{name}-%j.out", *args, str(path)])
        job_id = parse_sbatch_parsable(out)
        self.submitted.append(job_id)
        return job_id

    def cancel_leftovers(self) -> None:
        """Cancel this user's submitted jobs that have not finished (best effort)."""
        if self.submitted:
            subprocess.run(
                ["scancel", *map(str, self.submitted)], capture_output=True, timeout=30, check=False
            )


def ensure_test_user(name: str = TEST_USER) -> None:
    """Create the non-root test user (``useradd -m``) if missing; needs root."""
    if subprocess.run(["id", "-u", name], capture_output=True, check=False).returncode != 0:
        run(["useradd", "-m", "-s", "/bin/bash", name])


def make_user_dir(root: Path, label: str, owner: str | None) -> Path:
    """Create a fresh directory under ``root`` named after ``label``, owned by ``owner`` if given.

    ``root`` is world-traversable (0755) so the test user can reach its own directory.
    """
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    root.chmod(0o755)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[-80:]
    path = root / f"{safe}-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir(mode=0o755)
    if owner is not None:
        shutil.chown(path, owner, owner)
    return path


def scenario_user(session_dir: Path, label: str) -> SlurmUser:
    """The non-root test user (created if missing; needs root) with a fresh directory for ``label``."""
    ensure_test_user(TEST_USER)
    return SlurmUser(TEST_USER, make_user_dir(session_dir, label, owner=TEST_USER), as_root=True)


class Cancellable(Protocol):
    def cancel(self) -> None:
        """Cancel what was submitted (best effort)."""


Spec = TypeVar("Spec")
Submitted = TypeVar("Submitted", bound=Cancellable)


def submitted_up_front(
    session_dir: Path,
    label: str,
    scenarios: Mapping[str, Spec],
    submit: Callable[[SlurmUser, Spec], Submitted],
) -> Iterator[dict[str, Submitted]]:
    """Submit every scenario first, so their Slurm waits overlap; yield them by name; cancel all at the end.

    Why: Slurm's limit checks tick every ~30 s and requeues wait ~12 s, so a module that waits for
    its scenarios one by one takes the sum of their waits; submitted together it takes about as long
    as the slowest. Each scenario runs as the test user in its own directory ``LABEL-NAME``. Use it
    in a module fixture::

        @pytest.fixture(scope="module")
        def chains(slurm_cluster, slurm_python, slurm_session_dir):
            yield from submitted_up_front(slurm_session_dir, "launcher", SCENARIOS,
                                          lambda user, spec: Chain(user, slurm_python, **spec).submit())

    What was submitted is cancelled also when a later submission fails.
    """
    submitted: dict[str, Submitted] = {}
    try:
        for name, spec in scenarios.items():
            submitted[name] = submit(scenario_user(session_dir, f"{label}-{name}"), spec)
        yield submitted
    finally:
        for chain in submitted.values():
            chain.cancel()


def prune_old_sessions(root: Path, max_age_s: float = 24 * 3600) -> None:
    """Delete ``session-*`` directories under ``root`` untouched for ``max_age_s`` seconds.

    Age, not count, decides, so a pytest session running in parallel never loses its directory.
    """
    if not root.is_dir():
        return
    cutoff = time.time() - max_age_s
    for old in root.glob("session-*"):
        if old.is_dir() and old.stat().st_mtime < cutoff:
            shutil.rmtree(old, ignore_errors=True)


def project_dependencies(pyproject: Path) -> list[str]:
    """The ``[project].dependencies`` requirement strings of a pyproject.toml, and its router extra's
    (the replica tests' jobs start vllm-router)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return [*project["dependencies"], *project.get("optional-dependencies", {}).get("router", [])]


def build_job_python(venv: Path, repo: Path, *, base_python: Path = SYSTEM_PYTHON) -> Path:
    """A venv other users can run, holding ``repo``'s dependencies and a copy of ``repo``'s package.

    Why: as root, pytest's interpreter often lives under /root (mode 0700 here: pyenv), which the
    test user cannot execute, so a job script run as that user needs its own interpreter. The
    package is installed non-editable (the checkout may be unreadable for the user) and
    reinstalled whenever its source differs from the installed copy (a content stamp), so jobs
    run the code under test. Never on every call: xdist workers each call this at their own
    session start, and a forced reinstall under another worker's running jobs made them fail
    with ``No module named gymslurm.launcher`` mid-uninstall (the CI run of stop 24).
    Dependencies are installed once per set of requirements (a stamp file). A file lock
    serialises parallel pytest sessions. Returns the venv's ``bin/python``.
    """
    venv.parent.mkdir(parents=True, exist_ok=True)
    venv.parent.chmod(0o755)
    with (venv.parent / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = venv / "bin" / "python"
        if not python.exists():
            run([str(base_python), "-m", "venv", str(venv)], timeout=300)
        deps = sorted([*project_dependencies(repo / "pyproject.toml"), "hatchling"])
        stamp = venv / "gymslurm-deps.txt"
        if not stamp.exists() or stamp.read_text() != "\n".join(deps):
            _pip_install(python, *deps)
            stamp.write_text("\n".join(deps))
        source = venv / "gymslurm-source.txt"
        digest = package_digest(repo)
        if not source.exists() or source.read_text() != digest:
            _pip_install(python, "--no-deps", "--no-build-isolation", "--force-reinstall", str(repo))
            source.write_text(digest)
        return python


def package_digest(repo: Path) -> str:
    """A hash of everything a non-editable install of ``repo`` copies (pyproject's wheel targets)."""
    digest = hashlib.sha256((repo / "pyproject.toml").read_bytes())
    shipped = ("gymslurm", "configs", "sbatch_templates")
    for path in sorted(p for folder in shipped for p in (repo / folder).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _pip_install(python: Path, *args: str) -> None:
    run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args], timeout=600)


def job_python_for(user: str, as_root: bool, repo: Path = REPO_ROOT) -> Path:
    """The interpreter a job of ``user`` should run gymslurm with (see build_job_python).

    Not root: the current interpreter (the user can run it). Root: a venv under SCRATCH_ROOT
    keyed by the checkout's path, so two worktrees never share one.
    """
    if not as_root:
        return Path(sys.executable)
    key = hashlib.sha1(str(repo).encode()).hexdigest()[:10]
    python = build_job_python(SCRATCH_ROOT / "venvs" / key, repo)
    probe = ["runuser", "-u", user, "--", str(python), "-c", "import gymslurm"]
    run(probe, cwd=Path("/"))
    return python
