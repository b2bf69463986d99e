"""The sandbox's generated slurm.conf (``launchers/slurm-up.sh --print-config``), read without a cluster.

Why: what the real-Slurm tests see depends on choices the start script makes from its environment
(preemption mode, accounting switch, node count); those choices are checked here from the config
it would write, which needs neither root nor a running cluster.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

SLURM_UP = Path(__file__).resolve().parents[2] / "launchers" / "slurm-up.sh"


def _print_config(cluster: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``slurm-up.sh --print-config CLUSTER``, pointed away from the machine's real sandbox paths."""
    away = {"GYMSLURM_ETC": "/nonexistent/gymslurm-etc", "GYMSLURM_SANDBOX_DIR": "/nonexistent/gymslurm-dir"}
    return subprocess.run(
        ["bash", str(SLURM_UP), "--print-config", cluster],
        env={**os.environ, **away, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _config(cluster: str = "a", **env: str) -> str:
    done = _print_config(cluster, env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _partition(config: str, name: str) -> str:
    match = re.search(rf"^PartitionName={name} .*$", config, re.M)
    assert match, config
    return match.group(0)


def test_cancel_mode_makes_preemption_cancel_low_jobs() -> None:
    """GYMSLURM_PREEMPT_MODE=CANCEL: partition low (and the cluster) preempt by cancelling."""
    config = _config(GYMSLURM_PREEMPT_MODE="CANCEL")
    assert "PreemptMode=CANCEL" in _partition(config, "low").split()
    assert re.search(r"^PreemptMode=CANCEL$", config, re.M)


def test_requeue_is_the_default_preemption_mode() -> None:
    """Without the variable partition low's jobs are requeued when preempted."""
    assert "PreemptMode=REQUEUE" in _partition(_config(), "low").split()


def test_an_unknown_preemption_mode_is_refused_before_anything_is_written() -> None:
    """GYMSLURM_PREEMPT_MODE=SUSPEND is refused with a message naming the allowed modes."""
    done = _print_config("a", {"GYMSLURM_PREEMPT_MODE": "SUSPEND"})
    assert done.returncode == 1 and "REQUEUE or CANCEL" in done.stderr


def test_the_default_cluster_has_four_gpu_nodes_on_the_bridge_and_slurmdbd() -> None:
    """Cluster a: nodes a1..a4 with their own bridge addresses, gpu:4 each, accounting in slurmdbd."""
    config = _config()
    assert re.findall(r"^NodeName=(a\d) NodeAddr=(\S+)$", config, re.M) == [
        (f"a{i}", f"10.77.0.1{i}") for i in range(1, 5)
    ]
    assert "Gres=gpu:4" in re.search(r"^NodeName=DEFAULT .*$", config, re.M).group(0).split()  # type: ignore[union-attr]
    assert "AccountingStorageType=accounting_storage/slurmdbd" in config.splitlines()


def test_the_no_accounting_switch_keeps_jobcomp_and_drops_the_second_cluster() -> None:
    """GYMSLURM_ACCOUNTING=0: cluster a keeps no accounting (jobcomp only) and there is no cluster b."""
    config = _config(GYMSLURM_ACCOUNTING="0").splitlines()
    assert "AccountingStorageType=accounting_storage/none" in config
    assert "JobCompType=jobcomp/filetxt" in config
    done = _print_config("b", {"GYMSLURM_ACCOUNTING": "0"})
    assert done.returncode == 1 and "no cluster 'b'" in done.stderr


def test_cluster_b_has_its_own_controller_port_and_two_nodes() -> None:
    """Cluster b: ClusterName=b, a controller port other than a's, nodes b1 and b2."""
    a, b = _config("a"), _config("b")
    port = re.compile(r"^SlurmctldPort=(\d+)$", re.M)
    assert "ClusterName=b" in b.splitlines() and port.findall(a) != port.findall(b)
    assert re.findall(r"^NodeName=(b\d) ", b, re.M) == ["b1", "b2"]


def test_what_slurm_up_starts_does_not_inherit_a_callers_lock(tmp_path: Path) -> None:
    """Under ``flock LOCK slurm-up.sh`` a process the script leaves running does not hold LOCK."""
    lock, script = tmp_path / "lock", tmp_path / "probe.sh"
    script.write_text(
        "set -euo pipefail\n"
        f"eval \"$(sed -n '/^close_inherited_fds() {{/,/^}}/p' {SLURM_UP})\"\n"
        "close_inherited_fds\n"
        "sleep 60 </dev/null >/dev/null 2>&1 &\n"
        "echo $!\n"
    )
    probe = ["flock", str(lock), "bash", str(script)]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=True)
    daemon = int(done.stdout)
    try:
        free = ["flock", "-n", str(lock), "true"]
        again = subprocess.run(free, capture_output=True, timeout=30, check=False)
        assert again.returncode == 0, "the lock is still held by the process the script started"
    finally:
        os.kill(daemon, signal.SIGKILL)


def test_every_cluster_holds_a_ten_thousand_shard_run_with_its_lookahead() -> None:
    """MaxJobCount >= 50000 on a, b and n (10,000 shards x 3 job records each + the aggregation);
    MaxArraySize stays Slurm's 1001, so such a run spans several arrays as on most sites."""
    for cluster in ("a", "b", "n"):
        config = _config(cluster)
        count = re.search(r"^MaxJobCount=(\d+)$", config, re.M)
        assert count and int(count.group(1)) >= 50000, cluster
        assert re.search(r"^MaxArraySize=1001$", config, re.M), cluster
