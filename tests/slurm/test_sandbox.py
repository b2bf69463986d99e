"""The sandbox is a cluster like the users' (issue 18): what launchers/slurm-up.sh must show.

Why: every other Slurm test relies on the sandbox having several nodes (each slurmd in its own
network and UTS namespace), GRES GPUs with device files, slurmdbd accounting, a second cluster
``b`` reached through slurmdbd (``-M``) and a cluster ``n`` without accounting. Each property is
checked here once, as the non-root test user, with the client commands users type. On the
one-node sandbox of before every test here fails.
"""

from __future__ import annotations

import re
import time

import pytest

from .helpers import (
    NO_ACCOUNTING_CLUSTER,
    SECOND_CLUSTER,
    SlurmCluster,
    SlurmUser,
    cluster_env,
    job_nodes,
    parse_sbatch_parsable,
    wait_for_job,
)

pytestmark = pytest.mark.slurm

CROSS_NODE_SCRIPT = """#!/bin/bash
set -u
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
mkdir -p served && echo "from-${nodes[0]}" > served/hello.txt
srun -N1 -n1 -w "${nodes[0]}" --overlap python3 -m http.server 8791 --directory served &
server=$!
srun -N1 -n1 -w "${nodes[1]}" --overlap python3 - "${nodes[0]}" <<'EOF'
import sys, time, urllib.request
for _ in range(120):  # the server needs a while to listen on a loaded machine: wait on the port
    try:
        url = f"http://{sys.argv[1]}:8791/hello.txt"
        print(urllib.request.urlopen(url, timeout=2).read().decode().strip())
        break
    except OSError:
        time.sleep(0.5)
EOF
kill $server
wait
"""


def _sacct_rows(user: SlurmUser, job: int, fields: str, *cluster: str) -> list[str]:
    """``sacct -n -P -X -j JOB -o FIELDS`` once slurmdbd has the job's end (it arrives asynchronously)."""
    rows: list[str] = []
    for _ in range(60):
        out = user.run(["sacct", *cluster, "-n", "-P", "-X", "-j", str(job), "-o", f"State,{fields}"])
        rows = [r for r in out.splitlines() if r.strip()]
        if rows and rows[0].split("|")[0] not in {"PENDING", "RUNNING", "COMPLETING"}:
            return rows
        time.sleep(1.0)
    raise AssertionError(f"sacct {' '.join(cluster)} has no end of job {job} after 60 s: {rows}")


def test_sinfo_lists_at_least_four_nodes_with_distinct_hostnames(slurm_user: SlurmUser) -> None:
    """``sinfo -N`` lists >= 4 nodes, and a job on each node sees that node's name as its hostname."""
    nodes = sorted(set(slurm_user.run(["sinfo", "-h", "-N", "-o", "%N"]).split()))
    assert len(nodes) >= 4, nodes
    # A CPU on every node at once: with the other Slurm groups' jobs running, that can take minutes.
    seen = slurm_user.run(["srun", "-N", str(len(nodes)), "-t", "1", "hostname"], timeout=420).split()
    assert sorted(seen) == nodes


def test_srun_on_two_nodes_prints_two_names(slurm_user: SlurmUser) -> None:
    """``srun -N2 hostname`` prints two different names."""
    names = slurm_user.run(["srun", "-N2", "-t", "1", "hostname"], timeout=120).split()
    assert len(names) == 2 and len(set(names)) == 2, names


def test_a_step_on_one_node_reaches_a_server_in_a_step_on_another(slurm_user: SlurmUser) -> None:
    """In one -N2 job, a client step on the second node fetches HTTP from a server step on the first."""
    job = slurm_user.sbatch(CROSS_NODE_SCRIPT, "-N2", "-t", "2", name="cross-node")
    outcome = wait_for_job(job, timeout=180)
    out = (slurm_user.workdir / f"cross-node-{job}.out").read_text()
    first, second = job_nodes(job)
    assert first != second and f"from-{first}" in out.split(), (outcome, out)


def test_every_node_declares_four_gpus_and_a_job_gets_two(
    slurm_user: SlurmUser, slurm_cluster: SlurmCluster
) -> None:
    """``scontrol show node``: Gres=gpu:4 on every node; a --gres=gpu:2 job gets two of them in
    CUDA_VISIBLE_DEVICES (0,1 on an idle node; others when another job holds some)."""
    text = slurm_user.run(["scontrol", "show", "node"])
    gres = dict(re.findall(r"NodeName=(\S+).*?\n\s+Gres=(\S+)", text, re.S))
    assert gres == {node: "gpu:4" for node in slurm_cluster.nodes}, gres
    out = slurm_user.run(["srun", "--gres=gpu:2", "-t", "1", "printenv", "CUDA_VISIBLE_DEVICES"], timeout=120)
    devices = out.strip().split(",")
    assert len(devices) == 2 and set(devices) <= {"0", "1", "2", "3"} and len(set(devices)) == 2, out


def test_sacct_answers_with_state_exit_code_elapsed_and_gpu_tres(slurm_user: SlurmUser) -> None:
    """slurmdbd accounting: ``sacct -j ID`` gives FAILED, 75:0, an elapsed time and gres/gpu=1 in the TRES."""
    job = slurm_user.sbatch("#!/bin/bash\nsleep 1\nexit 75\n", "--gres=gpu:1", name="acct")
    wait_for_job(job, timeout=120)
    state, code, elapsed, tres = _sacct_rows(slurm_user, job, "ExitCode,Elapsed,AllocTRES")[0].split("|")
    assert (state, code) == ("FAILED", "75:0")
    assert re.fullmatch(r"\d\d:\d\d:\d\d", elapsed) and "gres/gpu=1" in tres.split(","), tres


def test_sacctmgr_lists_the_two_accounted_clusters(slurm_user: SlurmUser) -> None:
    """``sacctmgr list cluster`` lists clusters a and b, each with its own controller port."""
    rows = slurm_user.run(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster,controlport"])
    ports = dict(line.split("|") for line in rows.split())
    assert {"a", SECOND_CLUSTER} <= set(ports) and ports["a"] != ports[SECOND_CLUSTER], ports


def test_a_job_submitted_with_m_b_runs_on_cluster_b_and_every_view_shows_it(slurm_user: SlurmUser) -> None:
    """``sbatch -M b`` runs on a b node; ``squeue -M all`` names both clusters; ``sacct -M b`` has the job."""
    b_nodes = set(slurm_user.run(["sinfo", "-M", SECOND_CLUSTER, "-h", "-N", "-o", "%N"]).split())
    assert len(b_nodes) >= 2, b_nodes
    submit = ["sbatch", "--parsable", "-M", SECOND_CLUSTER, "-o", "on-b-%j.out", "--wrap", "sleep 3;hostname"]
    job = parse_sbatch_parsable(slurm_user.run(submit))
    queue = slurm_user.run(["squeue", "-M", "all", "-t", "all", "-o", "%i"])
    assert "CLUSTER: a" in queue and f"CLUSTER: {SECOND_CLUSTER}" in queue, queue
    assert _sacct_rows(slurm_user, job, "JobID", "-M", SECOND_CLUSTER)[0] == f"COMPLETED|{job}"
    ran_on = (slurm_user.workdir / f"on-b-{job}.out").read_text().strip()
    assert ran_on in b_nodes and job_nodes(job, env=cluster_env(SECOND_CLUSTER)) == [ran_on]


def test_cluster_n_keeps_no_accounting_and_jobcomp_answers(slurm_user: SlurmUser) -> None:
    """On cluster n ``sacct`` says accounting is disabled and ``sacct -c`` (jobcomp) has the job."""
    env = cluster_env(NO_ACCOUNTING_CLUSTER)
    submit = ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "exit 3"]
    job = parse_sbatch_parsable(slurm_user.run(submit, env=env))
    assert wait_for_job(job, timeout=120, env=env).state == "FAILED"
    config = slurm_user.run(["scontrol", "show", "config"], env=env)
    assert re.search(r"^AccountingStorageType\s*=\s*accounting_storage/none$", config, re.M)
    rows = slurm_user.run(["sacct", "-c", "-n", "-P", "-j", str(job), "-o", "jobid,state,exitcode"], env=env)
    assert f"{job}|FAILED|3:0" in rows.split(), rows


def test_partition_low_is_preemptable_by_high(slurm_user: SlurmUser) -> None:
    """Partition low's PreemptMode is the selected one (REQUEUE by default), high has PriorityTier=2."""
    low = slurm_user.run(["scontrol", "show", "partition", "low"])
    high = slurm_user.run(["scontrol", "show", "partition", "high"])
    assert re.search(r"PreemptMode=(REQUEUE|CANCEL)\b", low) and "PriorityTier=2" in high


@pytest.mark.parametrize("cluster", ["a", SECOND_CLUSTER, NO_ACCOUNTING_CLUSTER])
def test_every_cluster_holds_a_ten_thousand_shard_run_with_its_lookahead(
    slurm_user: SlurmUser, cluster: str
) -> None:
    """``scontrol show config`` on a, b and n: MaxJobCount >= 50000 (10,000 shards x a running link and
    two queued ones, every array task a job record, + the aggregation); Slurm's default is 10000."""
    config = slurm_user.run(["scontrol", "show", "config"], env=cluster_env(cluster))
    count = re.search(r"^MaxJobCount\s*=\s*(\d+)$", config, re.M)
    assert count and int(count.group(1)) >= 50000, (cluster, count)
