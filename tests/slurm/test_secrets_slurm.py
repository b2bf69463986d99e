"""The canary suite's real-Slurm submit: no secret in the run's files, the job logs, or any ``ps``.

Why here: on a real cluster the collector and the Environment Server run under slurmstepd, their
logs are written by Slurm, and ``sbatch`` exports the submitting environment; the local backend
cannot show that. One shard of the real collector and demo server, with canaries in the
collector's overrides (a credential-named key, a Bearer header, a URL password) and in the
server's ``env``; while it runs every ``/proc/*/cmdline`` of the node is sampled (the test runs as
root, so it sees every user's processes, as ``ps`` would on a node without hidepid). Afterwards
the run directory (scripts, logs, ledgers, outputs), ``status`` and the sampled command lines hold
none of them, and the run directory is 0700. Cost: one link and one aggregation job (~30-60 s).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import TEST_USER, SlurmCluster, SlurmUser, ensure_test_user, make_user_dir
from .launcher_real import RealChain

pytestmark = pytest.mark.slurm

CANARIES = {
    "credential-named key": "CNRY-SLURM-KEY-s01",
    "Bearer header": "CNRY-SLURM-BEARER-s02",
    "server env": "CNRY-SLURM-SRVENV-s03",
    "nested override (issue 20)": "CNRY-SLURM-NESTED-s04",
    "Authorization Token (issue 20)": "CNRY-SLURM-TOKEN-s05",
    "URL user as token (issue 20)": "CNRY-SLURM-URLUSER-s06",
}
SPEC = dict(
    tasks=6,
    shards=1,
    server_flags=[],
    collector=[
        "+environment_config={judge: {api_key: " + CANARIES["credential-named key"]
        + ", headers: {Authorization: 'Bearer " + CANARIES["Bearer header"] + "'}}}",
        "+environment_config.policy.base_url='http://h/v1?api_key="
        + CANARIES["nested override (issue 20)"] + "'",
        "+environment_config.judge2.header='Authorization: Token "
        + CANARIES["Authorization Token (issue 20)"] + "'",
        "+environment_config.mirror='https://" + CANARIES["URL user as token (issue 20)"] + "@git.example/x'",
    ],
    slurm="  time: '00:05:00'\n",
    server_yaml=f"    env: {{HF_TOKEN: {CANARIES['server env']}}}\n",
)  # fmt: skip


def _command_lines(stop: threading.Event, seen: set[str]) -> None:
    while not stop.is_set():
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    seen.add((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    continue
        time.sleep(0.05)


@pytest.fixture(scope="module")
def watched_run(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> Iterator[tuple[RealChain, set[str], dict]]:
    """The canary run submitted and watched to its end."""
    ensure_test_user(TEST_USER)
    user = SlurmUser(TEST_USER, make_user_dir(slurm_session_dir, "secrets", owner=TEST_USER), as_root=True)
    seen: set[str] = set()
    stop = threading.Event()
    watcher = threading.Thread(target=_command_lines, args=(stop, seen), daemon=True)
    watcher.start()
    chain = RealChain(user, slurm_python, SPEC)
    try:
        chain.submit()
        report = chain.finished(timeout=300)
        stop.set()
        watcher.join()
        yield chain, seen, report
    finally:
        stop.set()
        chain.cancel()


def test_a_real_slurm_run_leaks_no_canary_to_files_logs_or_command_lines(
    watched_run: tuple[RealChain, set[str], dict],
) -> None:
    """Scripts, Slurm's job logs, ledgers, outputs, status and every process's argv: 0 canaries."""
    chain, seen, report = watched_run
    assert [row["verdict"] for row in report["shards"]] == ["DONE"], report
    assert chain.run is not None
    assert any("gymslurm collect" in line for line in seen), "the watcher saw the collector run"
    texts = {str(p): p.read_bytes().decode(errors="replace") for p in chain.run.rglob("*") if p.is_file()}
    assert any("/logs/shard-000-" in path for path in texts), "Slurm wrote the link's log"
    texts["status"] = chain.gymslurm("status", str(chain.run))
    texts.update({f"cmdline {i}": line for i, line in enumerate(sorted(seen))})
    leaks = [f"{form} in {where}" for form, canary in CANARIES.items() for where, text in texts.items()
             if canary in text]  # fmt: skip
    assert not leaks, "\n".join(leaks)


def test_a_real_slurm_collector_carries_no_configuration_on_its_command_line(
    watched_run: tuple[RealChain, set[str], dict],
) -> None:
    """Under slurmstepd too, the collector's argv is its command alone (issue 20): no path, no override."""
    chain, seen, _ = watched_run
    mine = f"{chain.python} -m gymslurm collect"  # the job's interpreter: not another test's typed collect
    collectors = [line.split() for line in seen if line.startswith(mine)]
    assert collectors and all(argv[1:] == ["-m", "gymslurm", "collect"] for argv in collectors), collectors


def test_a_real_slurm_run_directory_is_private(watched_run: tuple[RealChain, set[str], dict]) -> None:
    """The run directory Slurm's jobs wrote into is 0700: other users cannot list or read it."""
    chain, _, _ = watched_run
    assert chain.run is not None
    assert chain.run.stat().st_mode & 0o777 == 0o700
