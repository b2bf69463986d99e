#!/usr/bin/env bash
# Start (or confirm) the multi-node Slurm sandbox on this machine: a cluster like the users'.
#
# Why: gymslurm's Slurm tests and demos need a real Slurm, and what users run on has many nodes,
# slurmdbd accounting, GRES GPUs, preemption between partitions and often a second cluster. This
# script turns a Debian 12 machine (root, no systemd, 2 cores) into, by default:
#   - cluster `a` (the default one, config /etc/slurm/slurm.conf): nodes a1..a4, each slurmd in its
#     own network + UTS namespace (its own hostname and address 10.77.0.1N on the bridge gsbr0),
#     GRES gpu:4 per node (character device files under $DIR/dev), partitions debug (default),
#     low (preemptable, GYMSLURM_PREEMPT_MODE) and high;
#   - cluster `b` (its own slurmctld, nodes b1..b2), reached with `sbatch -M b`, `squeue -M all`;
#   - slurmdbd on a local MariaDB (socket only) recording both clusters (`sacct`, `sacct -M b`);
#   - cluster `n`: one node without accounting (jobcomp only), for the no-accounting fallback tests
#     (SLURM_CONF=/etc/slurm/cluster-n/slurm.conf).
# GYMSLURM_ACCOUNTING=0 brings up cluster `a` alone without accounting (jobcomp only; `-M` needs
# slurmdbd, so no `b` and no `n`). Facts: /work/shared/slurm/RECIPE.md and MULTINODE.md.
# Idempotent: run it again while the cluster is up and it only checks. `--print-config [C]` prints
# cluster C's slurm.conf as it would be written (changes nothing; no root needed).
#
# What it changes: installs slurmctld slurmd slurm-client munge iproute2 (+ slurmdbd mariadb-server)
# if missing (apt); writes /etc/slurm/{slurm.conf,gres.conf,slurmdbd.conf,cluster-*/} only if
# absent or carrying the marker line below; creates the bridge gsbr0 (10.77.0.1/24), the network
# namespaces gs-<node>, a marked block of node names in /etc/hosts, /run/munge, /run/mysqld, the
# scratch dir ($GYMSLURM_SANDBOX_DIR, default /var/lib/gymslurm-sandbox) and the user `slurmtest`.
# slurm-down.sh removes the bridge, the namespaces and the /etc/hosts block again.
# Trade-off: SlurmUser=root and world-writable jobcomp files: fine for a sandbox, not for a site.
#
# Environment: GYMSLURM_SANDBOX_DIR, GYMSLURM_ACCOUNTING (1: slurmdbd, default; 0: jobcomp only),
# GYMSLURM_NODES (nodes of cluster a, default 4, at most 9), GYMSLURM_NODES_B (default 2),
# GYMSLURM_PREEMPT_MODE (REQUEUE, default, or CANCEL: what preemption does to `low` jobs),
# GYMSLURM_UP_TIMEOUT (seconds to wait for the nodes, default 90), GYMSLURM_APT_TIMEOUT (default
# 900), GYMSLURM_TEST_USER (default slurmtest).
set -euo pipefail

MARKER="# gymslurm-sandbox: written by launchers/slurm-up.sh (safe to overwrite; delete this line to keep edits)"
DIR="${GYMSLURM_SANDBOX_DIR:-/var/lib/gymslurm-sandbox}"
ACCOUNTING="${GYMSLURM_ACCOUNTING:-1}"
NODES="${GYMSLURM_NODES:-4}"
NODES_B="${GYMSLURM_NODES_B:-2}"
PREEMPT_MODE="${GYMSLURM_PREEMPT_MODE:-REQUEUE}"
UP_TIMEOUT="${GYMSLURM_UP_TIMEOUT:-90}"
APT_TIMEOUT="${GYMSLURM_APT_TIMEOUT:-900}"
TEST_USER="${GYMSLURM_TEST_USER:-slurmtest}"
# Job records slurmctld holds (every array task counts): 10,000 shards x (running link + lookahead 2)
# + the aggregation's chain is ~30,000; Slurm's default 10000 refuses such a run.
MAX_JOB_COUNT=50000
# Slurm's default, kept: a run of more than 1001 shards spans several arrays, as on most sites.
MAX_ARRAY_SIZE=1001
ETC="${GYMSLURM_ETC:-/etc/slurm}"
DBD_CONF="$ETC/slurmdbd.conf"
BRIDGE=gsbr0
NET=10.77.0
HOST_ADDR="$NET.1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
T0="$(date +%s.%N)"

log() { printf 'slurm-up: %s\n' "$*"; }
die() {
    printf 'slurm-up: ERROR: %s\n' "$*" >&2
    exit 1
}
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# --- the layout: clusters, nodes, addresses, ports (slurm-down.sh derives the same) -------------

clusters() { if [[ "$ACCOUNTING" == 1 ]]; then echo a b n; else echo a; fi; }
cluster_conf() { if [[ "$1" == a ]]; then echo "$ETC/slurm.conf"; else echo "$ETC/cluster-$1/slurm.conf"; fi; }
cluster_dir() { echo "$DIR/$1"; }
cluster_port() { case "$1" in a) echo 6817 ;; b) echo 6827 ;; n) echo 6837 ;; esac }
cluster_accounting() { case "$1" in a) echo "$ACCOUNTING" ;; b) echo 1 ;; n) echo 0 ;; esac }
cluster_nodes() { # cluster_nodes C: node names, one per line
    local count i
    case "$1" in a) count="$NODES" ;; b) count="$NODES_B" ;; n) count=1 ;; esac
    for ((i = 1; i <= count; i++)); do echo "$1$i"; done
}
node_addr() { # a3 -> 10.77.0.13, b1 -> 10.77.0.21, n1 -> 10.77.0.31
    local base
    case "${1:0:1}" in a) base=1 ;; b) base=2 ;; n) base=3 ;; esac
    echo "$NET.$base${1:1}"
}
accounted_clusters() {
    local c
    for c in $(clusters); do
        if [[ "$(cluster_accounting "$c")" == 1 ]]; then echo "$c"; fi
    done
}
all_nodes() { local c; for c in $(clusters); do cluster_nodes "$c"; done; }
slurm_at() { # slurm_at C CMD...: a Slurm client command against cluster C's own slurmctld
    local c="$1"
    shift
    SLURM_CONF="$(cluster_conf "$c")" timeout 20 "$@"
}

# --- packages ---------------------------------------------------------------------------------

pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

ensure_packages() {
    local missing=() pkg
    for pkg in "$@"; do pkg_installed "$pkg" || missing+=("$pkg"); done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    log "installing ${missing[*]} (apt)"
    local own_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        # Debian postinsts would start munge/mariadb with their default settings; block that.
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=1
    fi
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive timeout "$APT_TIMEOUT" apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive timeout "$APT_TIMEOUT" apt-get install -y -qq \
                --no-install-recommends -o DPkg::Lock::Timeout=120 "${missing[@]}"
    } >>"$DIR/log/apt.log" 2>&1 || rc=$?
    [[ $own_policy -eq 1 ]] && rm -f /usr/sbin/policy-rc.d
    if [[ $rc -ne 0 ]]; then
        tail -n 20 "$DIR/log/apt.log" >&2
        die "apt-get install ${missing[*]} failed (rc=$rc, 124 = timed out after ${APT_TIMEOUT}s); full log: $DIR/log/apt.log"
    fi
}

# --- daemons ----------------------------------------------------------------------------------

# True if the pid file names a live process whose /proc/PID/comm is $2 (RECIPE pitfall 7:
# starting a second slurmctld/slurmd/slurmdbd kills the running one).
running() {
    local pidfile="$1" comm="$2" pid
    [[ -r "$pidfile" ]] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [[ -n "$pid" && -r "/proc/$pid/comm" ]] || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]]
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    local limit="$1" what="$2" i
    shift 2
    for ((i = 0; i < limit * 10; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "$what did not come up within ${limit}s"
}

start_munged() {
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    install -d -o munge -g munge -m 0755 /run/munge
    if running /run/munge/munged.pid munged; then return 0; fi
    runuser -u munge -- /usr/sbin/munged
    STARTED+=(munged)
    wait_for 10 "munged (self-test 'munge -n | unmunge'; log /var/log/munge/munged.log)" \
        bash -c 'munge -n | unmunge'
}

# --- network: a bridge, one namespace per node ---------------------------------------------------

ensure_bridge() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge || die "cannot create the bridge $BRIDGE (ip link add ... type bridge)"
    fi
    ip -4 addr show dev "$BRIDGE" | grep -q "inet $HOST_ADDR/" || ip addr add "$HOST_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
}

ensure_netns() { # ensure_netns NODE: namespace gs-NODE with lo up and eth0 = NODE's address
    local node="$1" ns="gs-$1" veth="gsv-$1" addr
    addr="$(node_addr "$node")"
    [[ -e "/var/run/netns/$ns" ]] || ip netns add "$ns" || die "cannot create the network namespace $ns"
    if ! ip link show "$veth" >/dev/null 2>&1; then
        ip link add "$veth" type veth peer name eth0 netns "$ns" || die "cannot create the veth pair $veth"
    fi
    ip link set "$veth" master "$BRIDGE" up
    nsenter --net="/var/run/netns/$ns" sh -c "
        ip link set lo up && ip link set eth0 up &&
        { ip -4 addr show dev eth0 | grep -q 'inet $addr/' || ip addr add $addr/24 dev eth0; }" ||
        die "cannot configure $ns (lo, eth0 $addr)"
}

HOSTS_BEGIN="# gymslurm-sandbox nodes: begin (launchers/slurm-up.sh; slurm-down.sh removes this block)"
HOSTS_END="# gymslurm-sandbox nodes: end"

ensure_hosts_block() {
    # Jobs on one node reach another by its name (a server in a step on a1, a client on a2).
    local want node current
    want="$(printf '%s\n%s' "$HOSTS_BEGIN" "$HOST_ADDR"; for c in $(clusters); do printf ' ctl-%s' "$c"; done; echo; for node in $(all_nodes); do printf '%s %s\n' "$(node_addr "$node")" "$node"; done; printf '%s\n' "$HOSTS_END")"
    current="$(awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b { on = 1 } on { print } $0 == e { on = 0 }' /etc/hosts)"
    [[ "$current" == "$want" ]] && return 0
    local rest
    rest="$(awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b { skip = 1 } !skip { print } $0 == e { skip = 0 }' /etc/hosts)"
    printf '%s\n%s\n' "$rest" "$want" >/etc/hosts
}

ensure_gpu_devices() {
    # Slurm 22.05 drops GPUs without a device file (MULTINODE.md): null's numbers, four per node.
    install -d -m 0755 "$DIR/dev"
    local k
    for k in 0 1 2 3; do
        [[ -c "$DIR/dev/gpu$k" ]] || { rm -f "$DIR/dev/gpu$k"; mknod -m 666 "$DIR/dev/gpu$k" c 1 3; }
    done
}

# --- config -----------------------------------------------------------------------------------

# Seconds a finished job stays visible to scontrol/squeue. Cluster n keeps no accounting, so this is
# all it knows of an ended job. 180 there: tests/slurm/test_launcher_hostile.py waits that long (plus
# up to a minute: slurmctld purges once a minute) for a dead link Slurm forgot, and its crash loop on
# n needs each successor to ask scontrol within it (at CI's load of ~40 a link takes tens of seconds
# to start: 180 keeps three times a minute). Slurm's default 300 cost ~2 min more of waiting. The
# others keep 600.
cluster_min_job_age() { if [[ "$1" == n ]]; then echo 180; else echo 600; fi; }

render_slurm_conf() { # render_slurm_conf C
    local c="$1" d acct_lines node
    d="$(cluster_dir "$c")"
    if [[ "$(cluster_accounting "$c")" == 1 ]]; then
        acct_lines="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$HOST_ADDR
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
    else
        acct_lines="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
    fi
    cat <<EOF
$MARKER
# Cluster $c of the gymslurm sandbox (see docs/slurm-sandbox.md). Scratch dir: $d
ClusterName=$c
SlurmctldHost=ctl-$c($HOST_ADDR)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
CommunicationParameters=NoCtldInAddrAny
SlurmctldPort=$(cluster_port "$c")
SlurmdPort=6818
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool-%n
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd-%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5
ReturnToService=2
KillWait=10
MinJobAge=$(cluster_min_job_age "$c")
MaxJobCount=$MAX_JOB_COUNT
MaxArraySize=$MAX_ARRAY_SIZE
MailProg=/bin/true
JobCompType=jobcomp/filetxt
JobCompLoc=$d/log/jobcomp.txt
GresTypes=gpu
$acct_lines
PreemptType=preempt/partition_prio
PreemptMode=$PREEMPT_MODE
NodeName=DEFAULT CPUs=8 RealMemory=4096 Gres=gpu:4 State=UNKNOWN
EOF
    for node in $(cluster_nodes "$c"); do echo "NodeName=$node NodeAddr=$(node_addr "$node")"; done
    # LLN: jobs go to the least loaded node, so shards spread over the nodes as on a busy site.
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PreemptMode=OFF LLN=YES"
    if [[ "$c" == a ]]; then
        echo "PartitionName=low Nodes=ALL MaxTime=INFINITE State=UP PreemptMode=$PREEMPT_MODE GraceTime=5 LLN=YES"
        # Both preemption modes at once: what a site's CANCEL partition does to a chain is tested too.
        echo "PartitionName=lowcancel Nodes=ALL MaxTime=INFINITE State=UP PreemptMode=CANCEL GraceTime=5 LLN=YES"
        echo "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF LLN=YES"
    fi
}

render_gres_conf() {
    printf '%s\nAutoDetect=off\nName=gpu File=%s/dev/gpu[0-3]\n' "$MARKER" "$DIR"
}

render_dbd_conf() {
    cat <<EOF
$MARKER
AuthType=auth/munge
DbdAddr=127.0.0.1
DbdHost=localhost
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageUser=root
StorageLoc=slurm_acct_db
StorageHost=localhost
StoragePort=3306
EOF
}

# write_owned_file PATH MODE: stdin -> PATH, only if PATH is absent or carries $MARKER.
write_owned_file() {
    local path="$1" mode="$2" new
    new="$(cat)"
    if [[ -e "$path" ]] && ! grep -qxF "$MARKER" "$path"; then
        log "keeping $path: it lacks the marker line, so it is not ours (delete it to let this script write it)" >&2
        return 0
    fi
    if [[ -e "$path" && "$(cat "$path")" == "$new" ]]; then return 0; fi
    install -d -m 0755 "$(dirname "$path")"
    printf '%s\n' "$new" >"$path.tmp.$$"
    chmod "$mode" "$path.tmp.$$"
    mv -f "$path.tmp.$$" "$path"
}

conf_value() { sed -n "s/^$2=//p" "$1" | tail -n 1; }

# True if a file we own would change (then the daemons restart with --keep-jobs).
config_changes() {
    local c conf
    for c in $(clusters); do
        conf="$(cluster_conf "$c")"
        if [[ -e "$conf" ]] && grep -qxF "$MARKER" "$conf"; then
            [[ "$(cat "$conf")" == "$(render_slurm_conf "$c")" ]] || return 0
        fi
    done
    # Cluster a without accounting (GYMSLURM_ACCOUNTING=0) while b or n still run.
    for c in b n; do
        [[ " $(clusters) " == *" $c "* ]] && continue
        conf="$(cluster_conf "$c")"
        [[ -r "$conf" ]] && running "$(conf_value "$conf" SlurmctldPidFile)" slurmctld && return 0
    done
    return 1
}

restart_if_config_changes() {
    local legacy=0
    # The one-node sandbox of before (daemons' pid files directly under $DIR/run).
    running "$DIR/run/slurmctld.pid" slurmctld && legacy=1
    if [[ $legacy -eq 0 ]] && ! config_changes; then return 0; fi
    log "the sandbox's configuration changes while it runs: restarting the daemons (jobs are kept)"
    bash "$HERE/slurm-down.sh" --keep-jobs
}

write_configs() {
    local c
    for c in $(clusters); do
        render_slurm_conf "$c" | write_owned_file "$(cluster_conf "$c")" 0644
        render_gres_conf | write_owned_file "$(dirname "$(cluster_conf "$c")")/gres.conf" 0644
    done
}

make_dirs() {
    local c d node
    install -d -m 0755 "$DIR" "$DIR/run" "$DIR/log"
    for c in $(clusters); do
        d="$(cluster_dir "$c")"
        install -d -m 0755 "$d" "$d/state" "$d/run" "$d/log"
        for node in $(cluster_nodes "$c"); do install -d -m 0755 "$d/spool-$node"; done
    done
}

# --- accounting -------------------------------------------------------------------------------

start_accounting() {
    install -d -o mysql -g mysql -m 0755 /run/mysqld
    install -d -o mysql -g mysql -m 0750 "$DIR/db"
    if [[ ! -d "$DIR/db/data/mysql" ]]; then
        log "initialising MariaDB datadir $DIR/db/data"
        timeout 120 mariadb-install-db --user=mysql --datadir="$DIR/db/data" \
            --auth-root-authentication-method=socket >"$DIR/log/mariadb-install.log" 2>&1 ||
            die "mariadb-install-db failed; see $DIR/log/mariadb-install.log"
    fi
    if ! running "$DIR/db/mariadbd.pid" mariadbd; then
        # --skip-networking: no TCP at all, socket only. Pid and log live in the mysql-owned db dir.
        nohup /usr/sbin/mariadbd --user=mysql --datadir="$DIR/db/data" --skip-networking \
            --socket=/run/mysqld/mysqld.sock --pid-file="$DIR/db/mariadbd.pid" \
            --log-error="$DIR/db/mariadbd.log" >/dev/null 2>&1 &
        wait_for 60 "mariadbd (log $DIR/db/mariadbd.log)" \
            mariadb --socket=/run/mysqld/mysqld.sock -e 'SELECT 1'
        STARTED+=(mariadbd)
    fi
    render_dbd_conf | write_owned_file "$DBD_CONF" 0600
    # slurmdbd connects over the default socket path when StorageHost=localhost.
    if ! running "$DIR/run/slurmdbd.pid" slurmdbd; then
        /usr/sbin/slurmdbd >>"$DIR/log/slurmdbd.start.log" 2>&1 ||
            die "slurmdbd exited at start-up; see $DIR/log/slurmdbd.log"
        STARTED+=(slurmdbd)
        wait_for 60 "slurmdbd (log $DIR/log/slurmdbd.log)" timeout 10 sacctmgr -n list cluster
    fi
    # Both clusters, one account, the test user and root in it (as at a site: associations exist).
    local known c want=() acct_clusters
    known="$(timeout 20 sacctmgr -n -P list cluster format=cluster)"
    for c in $(accounted_clusters); do grep -qx "$c" <<<"$known" || want+=("$c"); done
    if [[ ${#want[@]} -gt 0 ]]; then timeout 20 sacctmgr -i add cluster "${want[@]}" >/dev/null; fi
    acct_clusters="$(accounted_clusters | paste -sd,)"
    if ! timeout 20 sacctmgr -n -P list assoc format=cluster,account,user | grep -q "|sandbox|$TEST_USER\$"; then
        timeout 20 sacctmgr -i add account sandbox cluster="$acct_clusters" Description=gymslurm-sandbox \
            Organization=gymslurm >/dev/null 2>&1 || true
        timeout 20 sacctmgr -i add user "$TEST_USER" account=sandbox cluster="$acct_clusters" >/dev/null 2>&1 || true
        timeout 20 sacctmgr -i add user root account=sandbox cluster="$acct_clusters" >/dev/null 2>&1 || true
    fi
}

# --- slurmctld, slurmd ------------------------------------------------------------------------

start_slurmctld() { # start_slurmctld C
    local c="$1" conf pidfile
    conf="$(cluster_conf "$c")"
    pidfile="$(conf_value "$conf" SlurmctldPidFile)"
    running "$pidfile" slurmctld && return 0
    # A drained/INVAL node state survives restarts even after the config is fixed (pitfall 2);
    # jobs are kept (job_state is not touched).
    rm -f "$(conf_value "$conf" StateSaveLocation)"/node_state*
    # Its own UTS namespace: gethostname() must be the SlurmctldHost name ctl-C, which resolves to
    # the bridge address, so NoCtldInAddrAny binds it there (never 0.0.0.0, never 127.0.0.1).
    unshare --uts sh -c "hostname ctl-$c && SLURM_CONF=$conf exec /usr/sbin/slurmctld -f $conf" >>"$(cluster_dir "$c")/log/slurmctld.start.log" 2>&1 ||
        cluster_failed "$c" "slurmctld of cluster $c exited at start-up"
    STARTED+=("slurmctld[$c]")
}

start_slurmd() { # start_slurmd C NODE: slurmd in the node's network namespace, with its hostname
    local c="$1" node="$2" conf pidfile
    conf="$(cluster_conf "$c")"
    pidfile="$(cluster_dir "$c")/run/slurmd-$node.pid"
    running "$pidfile" slurmd && return 0
    # nsenter --net, not `ip netns exec`: that remounts /sys and slurmd loses /sys/fs/cgroup.
    nsenter --net="/var/run/netns/gs-$node" unshare --uts sh -c \
        "hostname $node && SLURM_CONF=$conf exec /usr/sbin/slurmd -f $conf" \
        >>"$(cluster_dir "$c")/log/slurmd-$node.start.log" 2>&1 ||
        cluster_failed "$c" "slurmd of node $node exited at start-up"
    STARTED+=("slurmd[$node]")
}

# --- wait and report --------------------------------------------------------------------------

cluster_failed() { # cluster_failed C REASON
    local c="$1" d f
    d="$(cluster_dir "$c")"
    {
        printf 'slurm-up: ERROR: cluster %s did not come up: %s\n' "$c" "$2"
        printf -- '--- sinfo (cluster %s) ---\n' "$c"
        slurm_at "$c" sinfo -N 2>&1 || true
        for f in "$d"/log/slurmctld.log "$d"/log/slurmd-*.log "$d"/log/*.start.log; do
            [[ -s "$f" ]] || continue
            printf -- '--- tail of %s ---\n' "$f"
            tail -n 12 "$f"
        done
        printf 'slurm-up: fix the cause above, then run: bash launchers/slurm-down.sh && bash launchers/slurm-up.sh\n'
    } >&2
    exit 1
}

wait_for_nodes() { # wait_for_nodes DEADLINE_EPOCH: every node of every cluster idle/mixed/allocated
    local c line node state pending resumed=" "
    while :; do
        pending=""
        for c in $(clusters); do
            local seen
            seen="$(slurm_at "$c" sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true)"
            for node in $(cluster_nodes "$c"); do
                line="$(grep "^$node " <<<"$seen" | head -n 1 || true)"
                state="${line#* }"
                case "$line" in
                "$node "idle* | "$node "mixed* | "$node "allocated* | "$node "completing*)
                    [[ "$state" == *'*' ]] && pending+=" $node($state)"
                    continue
                    ;;
                "$node "drain* | "$node "down* | "$node "fail* | "$node "inval*)
                    if [[ "$resumed" != *" $node "* && "$state" != *'*' ]]; then
                        log "node $node is '$state': resuming it"
                        slurm_at "$c" scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
                        resumed+="$node "
                    fi
                    ;;
                esac
                pending+=" $node(${state:-no answer})"
            done
        done
        [[ -z "$pending" ]] && return 0
        if (($(date +%s) >= $1)); then
            cluster_failed "${pending:1:1}" "nodes not up after ${UP_TIMEOUT}s:$pending (want idle/mixed/allocated)"
        fi
        sleep 0.3
    done
}

close_inherited_fds() {
    # The daemons started below must not inherit a caller's descriptors: under
    # `flock LOCK bash slurm-up.sh`, munged/mariadbd/slurmdbd would hold LOCK for ever.
    local fd
    for fd in /proc/$$/fd/*; do
        fd="${fd##*/}"
        if [[ "$fd" =~ ^[0-9]+$ ]] && ((fd > 2 && fd < 255)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
}

ensure_test_user() {
    id -u "$TEST_USER" >/dev/null 2>&1 && return 0
    log "creating non-root test user '$TEST_USER'"
    useradd -m -s /bin/bash "$TEST_USER"
}

# --- main -------------------------------------------------------------------------------------

main() {
    [[ "$NODES" =~ ^[1-9]$ && "$NODES_B" =~ ^[1-9]$ ]] || die "GYMSLURM_NODES/GYMSLURM_NODES_B must be 1..9"
    [[ "$PREEMPT_MODE" == REQUEUE || "$PREEMPT_MODE" == CANCEL ]] ||
        die "GYMSLURM_PREEMPT_MODE must be REQUEUE or CANCEL, not '$PREEMPT_MODE'"
    [[ "$ACCOUNTING" == 0 || "$ACCOUNTING" == 1 ]] || die "GYMSLURM_ACCOUNTING must be 0 or 1"
    if [[ "${1:-}" == --print-config ]]; then # print a cluster's slurm.conf as it would be written
        [[ " $(clusters) " == *" ${2:-a} "* ]] || die "no cluster '${2:-a}' in this set-up (clusters: $(clusters))"
        render_slurm_conf "${2:-a}"
        return 0
    fi
    [[ $# -eq 0 ]] || die "unknown arguments '$*' (usage: bash $0 [--print-config [CLUSTER]])"
    [[ $EUID -eq 0 ]] || die "run as root (it installs packages, makes namespaces, starts daemons): sudo bash $0"
    local deadline c node
    close_inherited_fds
    # Host-side admin commands (sacctmgr, slurmdbd) read cluster a's config.
    export SLURM_CONF="$ETC/slurm.conf"
    install -d -m 0755 "$DIR" "$DIR/log"
    local pkgs=(slurmctld slurmd slurm-client munge iproute2)
    [[ "$ACCOUNTING" == 1 ]] && pkgs+=(slurmdbd mariadb-server)
    ensure_packages "${pkgs[@]}"
    ensure_test_user
    STARTED=()
    restart_if_config_changes
    make_dirs
    ensure_gpu_devices
    write_configs
    ensure_bridge
    for node in $(all_nodes); do ensure_netns "$node"; done
    ensure_hosts_block
    start_munged
    [[ "$ACCOUNTING" == 1 ]] && start_accounting
    deadline=$(($(date +%s) + UP_TIMEOUT))
    for c in $(clusters); do start_slurmctld "$c"; done
    for c in $(clusters); do
        for node in $(cluster_nodes "$c"); do start_slurmd "$c" "$node"; done
    done
    wait_for_nodes "$deadline"
    for c in $(clusters); do
        # slurmctld fchmods it to 0644 on open; non-root `sacct -c` opens it O_WRONLY (pitfall 8).
        local jobcomp
        jobcomp="$(conf_value "$(cluster_conf "$c")" JobCompLoc)"
        [[ -n "$jobcomp" ]] && touch "$jobcomp" && chmod 666 "$jobcomp"
    done
    local started="already running"
    [[ ${#STARTED[@]} -gt 0 ]] && started="started ${STARTED[*]}"
    log "$started"
    for c in $(clusters); do
        log "cluster $c: nodes $(cluster_nodes "$c" | paste -sd' '), partitions $(slurm_at "$c" sinfo -h -o %P | paste -sd' '), accounting=$([[ "$(cluster_accounting "$c")" == 1 ]] && echo slurmdbd || echo jobcomp-only), config $(cluster_conf "$c")"
    done
    log "state/logs under $DIR, test user $TEST_USER, preemption of 'low': $PREEMPT_MODE"
    log "up in $(elapsed)s"
}

main "$@"
