"""The canary suite's real-Slurm submit: no secret in the run's files, the job logs, or any ``ps``.

Why here: on a real cluster the collector and the Environment Server run under slurmstepd, their
logs are written by Slurm, and ``sbatch`` exports the submitting environment; the local backend
cannot show that. One shard of the real collector and demo server, submitted as the non-root test
user, carries every canary at once: a few in the collector's overrides (a credential-named key, a
Bearer header, a URL password...) and in the server's ``env``, and the whole corpus of
tests/canary_corpus.py (issue 20: 66 forms) three times over — as ``collector.env`` values and as
collector overrides in the benchmark file, and as ``collector.env`` values typed on ``submit``'s
command line. While it runs every ``/proc/*/cmdline`` is sampled (the test runs as root, so it
sees every user's processes, as ``ps`` would on a node without hidepid), and the ``/proc/*/environ``
of the demo servers, the collector and the aggregation (each may hold its own secrets only: a
server its ``env``, the collector its ``env`` and overrides, the aggregation none).
Afterwards the run directory (scripts, Slurm's job logs, ledgers, outputs), the output of
``submit``, ``status``, ``logs`` and ``health``, the sampled command lines and environments hold
none of them, and the run directory is 0700. Cost: one link and one aggregation job (~90 s).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.canary_corpus import FORMS

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
        "+environment_config={judge: {api_key: "
        + CANARIES["credential-named key"]
        + ", headers: {Authorization: 'Bearer "
        + CANARIES["Bearer header"]
        + "'}}}",
        "+environment_config.policy.base_url='http://h/v1?api_key="
        + CANARIES["nested override (issue 20)"]
        + "'",
        "+environment_config.judge2.header='Authorization: Token "
        + CANARIES["Authorization Token (issue 20)"]
        + "'",
        "+environment_config.mirror='https://" + CANARIES["URL user as token (issue 20)"] + "@git.example/x'",
    ],
    slurm="  time: '00:05:00'\n",
    # The server's key comes from the submitting environment (${oc.env:...}, resolved in the job);
    # tasks 0 and 1 get it echoed back in their first attempt's failure (demo fault rejected_key).
    server_yaml=f"    env: {{HF_TOKEN: {CANARIES['server env']}, "
    "DEMO_API_KEY: '${oc.env:GS_SLURM_SERVER_VALUE}'}\n",
    task_fields={i: {"_demo_fault": "rejected_key", "_demo_fault_attempts": 1} for i in (0, 1)},
)
# Exported where the user runs submit (sbatch hands them to the job), named by ${oc.env:...} only.
EXPORTED = {
    "GS_SLURM_SERVER_VALUE": "GS-SLURM-SERVER-KEY-51d2a7",
    "GS_SLURM_COLLECTOR_VALUE": "GS-SLURM-COLL-KEY-0b9e33",
}


def _hydra_quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# The corpus: in the file as collector.env values and overrides, and typed as collector.env values.
SPEC["collector"] += [  # type: ignore[operator]
    f"+environment_config.corpus.f{i:02d}={_hydra_quoted(form.text)}" for i, form in enumerate(FORMS)
]
_COLLECTOR_ENV = {f"CORPUS_{i:02d}": f.text for i, f in enumerate(FORMS)}
_COLLECTOR_ENV["JUDGE_API_KEY"] = "${oc.env:GS_SLURM_COLLECTOR_VALUE}"
SPEC["collector_yaml"] = f"  env: {json.dumps(_COLLECTOR_ENV)}\n"
TYPED = [f"++collector.env.TYPED_{i:02d}={_hydra_quoted(f.text)}" for i, f in enumerate(FORMS)]
NEEDLES = {
    **CANARIES,
    **{f"corpus {form.label!r}": form.needle for form in FORMS},
    **{f"${{oc.env:{name}}}": value for name, value in EXPORTED.items()},
}
# Processes whose environment is read: each holds its own secrets only (a server its env: s03; the
# collector its env and overrides: everything else), the aggregation none.
UNTOLD = (" demo-server ", " -m gymslurm aggregate ", " -m gymslurm collect")


def _command_lines(stop: threading.Event, seen: set[str], environs: dict[str, str]) -> None:
    """Every distinct command line until ``stop``; the environment of each server or aggregation seen."""
    while not stop.is_set():
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    seen.add(line)
                    if any(part in line for part in UNTOLD):
                        environs[f"environ of {line[:120]} ({entry.name})"] = (
                            (entry / "environ").read_bytes().decode(errors="replace")
                        )
                except OSError:
                    continue
        time.sleep(0.05)


def _outputs(chain: RealChain) -> dict[str, str]:
    """stdout and stderr of ``status``, ``logs RUN 0`` and ``health`` of the merged results, as the user."""
    assert chain.run is not None
    merged = chain.output(None)
    texts: dict[str, str] = {}
    commands = {"status": [str(chain.run)], "logs": [str(chain.run), "0"], "health": [str(merged)]}
    for name, args in commands.items():
        argv, cwd = chain.user.command([str(chain.python), "-m", "gymslurm", name, *args]), chain.user.workdir
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)
        texts[f"{name} stdout"], texts[f"{name} stderr"] = done.stdout, done.stderr
    return texts


@pytest.fixture(scope="module")
def watched_run(
    slurm_cluster: SlurmCluster, slurm_python: Path, slurm_session_dir: Path
) -> Iterator[tuple[RealChain, set[str], dict]]:
    """The canary run submitted and watched to its end; what it left on every channel."""
    ensure_test_user(TEST_USER)
    user = SlurmUser(TEST_USER, make_user_dir(slurm_session_dir, "secrets", owner=TEST_USER), as_root=True)
    seen: set[str] = set()
    environs: dict[str, str] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_command_lines, args=(stop, seen, environs), daemon=True)
    watcher.start()
    chain = RealChain(user, slurm_python, SPEC)
    chain.overrides = TYPED
    chain.env = dict(EXPORTED)
    try:
        chain.submit()
        report = chain.finished(timeout=300)
        texts = _outputs(chain)
        stop.set()
        watcher.join()
        yield chain, seen, {"report": report, "texts": texts, "environs": environs}
    finally:
        stop.set()
        chain.cancel()


def test_a_real_slurm_run_leaks_no_canary_to_files_logs_streams_command_lines_or_environments(
    watched_run: tuple[RealChain, set[str], dict],
) -> None:
    """Every canary and corpus form: 0 in scripts, Slurm's job logs, ledgers, outputs, the commands'
    stdout/stderr, every process's argv (but the user's own ``submit``) and the servers' environ."""
    chain, seen, found = watched_run
    report = found["report"]
    assert [row["verdict"] for row in report["shards"]] == ["DONE"], report
    assert chain.run is not None
    assert any("gymslurm collect" in line for line in seen), "the watcher saw the collector run"
    assert any(" demo-server " in where for where in found["environs"]), "the watcher read a server's environ"
    assert any(" gymslurm collect" in where for where in found["environs"]), "... and the collector's"
    bench = chain.user.workdir / "bench.yaml"  # what the user wrote
    texts = {
        str(p): p.read_bytes().decode(errors="replace")
        for p in chain.user.workdir.rglob("*")
        if p.is_file() and p != bench
    }
    assert any("/logs/shard-000-" in path for path in texts), "Slurm wrote the link's log"
    texts["submit stdout"] = chain.submit_output
    texts.update(found["texts"])
    typed = {line for line in seen if " -m gymslurm submit " in line}  # the user's own command line
    texts.update({f"cmdline {i}": line for i, line in enumerate(sorted(seen - typed))})
    leaks = [
        f"{form} in {where}"
        for form, needle in NEEDLES.items()
        for where, text in texts.items()
        if needle in text
    ]
    server_own = {CANARIES["server env"], EXPORTED["GS_SLURM_SERVER_VALUE"]}

    def own(needle: str, where: str) -> bool:  # in this process's environment by design
        if " demo-server " in where:
            return needle in server_own
        return " -m gymslurm collect" in where and needle not in server_own

    environs: dict[str, str] = found["environs"]
    leaks += [
        f"{form} in {where}"
        for form, needle in NEEDLES.items()
        for where, text in environs.items()
        if needle in text and not own(needle, where)
    ]
    assert not leaks, f"{len(leaks)} leaks:\n" + "\n".join(leaks)


def test_a_real_slurm_collector_carries_no_configuration_on_its_command_line(
    watched_run: tuple[RealChain, set[str], dict],
) -> None:
    """Under slurmstepd too, the collector's argv is its command alone (issue 20): no path, no override."""
    chain, seen, _ = watched_run
    mine = f"{chain.python} -m gymslurm collect"  # the job's interpreter: not another test's typed collect
    collectors = [line.split() for line in seen if line.startswith(mine)]
    assert collectors and all(argv[1:] == ["-m", "gymslurm", "collect"] for argv in collectors), collectors


def test_a_real_slurm_chain_step_carries_only_its_run_directory_and_shard(
    watched_run: tuple[RealChain, set[str], dict],
) -> None:
    """Under slurmstepd the chain step's argv is ``--run-dir RUN`` and ``--shard 0`` or ``--aggregate``."""
    chain, seen, _ = watched_run
    steps = [line.split() for line in seen if " -m gymslurm chain-step " in line and str(chain.run) in line]
    head = ["-m", "gymslurm", "chain-step", "--run-dir", str(chain.run)]
    allowed = ({"--shard", "0"}, {"--aggregate"})
    assert steps and all(argv[1:6] == head and set(argv[6:]) in allowed for argv in steps), steps


def test_a_real_slurm_run_directory_is_private(watched_run: tuple[RealChain, set[str], dict]) -> None:
    """The run directory Slurm's jobs wrote into is 0700: other users cannot list or read it."""
    chain, _, _ = watched_run
    assert chain.run is not None
    assert chain.run.stat().st_mode & 0o777 == 0o700


def test_a_real_slurm_server_gets_its_key_from_the_submitting_environment_and_its_echo_is_redacted(
    watched_run: tuple[RealChain, set[str], dict],
) -> None:
    """``DEMO_API_KEY: ${oc.env:GS_SLURM_SERVER_VALUE}``, resolved in the job: the server held the value
    (its environ) and echoed it in two refusals, which are saved with the key replaced."""
    chain, _, found = watched_run
    value = EXPORTED["GS_SLURM_SERVER_VALUE"]
    servers = [text for where, text in found["environs"].items() if " demo-server " in where]
    assert any(f"DEMO_API_KEY={value}" in text for text in servers), "the server received the value"
    sidecar = chain.output(0).with_name("rollouts_failures.jsonl").read_text()
    assert sidecar.count("Incorrect API key provided: <redacted>") >= 2, sidecar[:2000]
