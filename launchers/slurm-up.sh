#!/usr/bin/env bash
# Start (or confirm) the one-node Slurm sandbox cluster on this machine.
#
# Why: gymslurm's Slurm tests and demos need a real slurmctld + slurmd, not a fake. This script
# turns a Debian 12 machine (root, no systemd) into a one-node cluster on 127.0.0.1, following
# /work/shared/slurm/RECIPE.md (facts checked on this machine kind). It is idempotent: run it
# again while the cluster is up and it only checks (~0.05 s).
#
# What it changes: installs slurmctld slurmd slurm-client munge if missing (apt); writes
# /etc/slurm/slurm.conf only if absent or carrying the marker line below; creates /run/munge,
# the scratch dir ($GYMSLURM_SANDBOX_DIR, default /var/lib/gymslurm-sandbox) and the user
# `slurmtest`; appends "127.0.0.1 <hostname>" to /etc/hosts only if the name does not resolve.
# Trade-off: SlurmUser=root and a world-writable jobcomp file — fine for a sandbox, not for a site.
#
# Environment: GYMSLURM_SANDBOX_DIR (scratch dir), GYMSLURM_ACCOUNTING=1 (slurmdbd + MariaDB,
# socket-only), GYMSLURM_UP_TIMEOUT (seconds to wait for the node, default 60),
# GYMSLURM_TEST_USER (default slurmtest).
set -euo pipefail

MARKER="# gymslurm-sandbox: written by launchers/slurm-up.sh (safe to overwrite; delete this line to keep edits)"
DIR="${GYMSLURM_SANDBOX_DIR:-/var/lib/gymslurm-sandbox}"
ACCOUNTING="${GYMSLURM_ACCOUNTING:-0}"
UP_TIMEOUT="${GYMSLURM_UP_TIMEOUT:-60}"
TEST_USER="${GYMSLURM_TEST_USER:-slurmtest}"
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
NODE="$(hostname -s)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
T0="$(date +%s.%N)"

log() { printf 'slurm-up: %s\n' "$*"; }
die() {
    printf 'slurm-up: ERROR: %s\n' "$*" >&2
    exit 1
}
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

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
        DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    } >"$DIR/log/apt.log" 2>&1 || rc=$?
    [[ $own_policy -eq 1 ]] && rm -f /usr/sbin/policy-rc.d
    if [[ $rc -ne 0 ]]; then
        tail -n 20 "$DIR/log/apt.log" >&2
        die "apt-get install ${missing[*]} failed (rc=$rc); full log: $DIR/log/apt.log"
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
    [[ "$(cat "/proc/$pid/comm")" == "$comm" ]]
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

start_slurm_daemon() { # start_slurm_daemon NAME PIDFILE
    local name="$1" pidfile="$2"
    if running "$pidfile" "$name"; then return 0; fi
    if ! "/usr/sbin/$name" >>"$DIR/log/$name.start.log" 2>&1; then
        cluster_failed "$name exited at start-up"
    fi
    STARTED+=("$name")
}

# --- config -----------------------------------------------------------------------------------

ensure_hostname_resolves() {
    # With NoCtldInAddrAny slurmctld dies if its host name does not resolve (RECIPE pitfall 1).
    getent hosts "$NODE" >/dev/null && return 0
    log "host name '$NODE' does not resolve: appending '127.0.0.1 $NODE' to /etc/hosts"
    printf '127.0.0.1 %s\n' "$NODE" >>/etc/hosts
}

render_slurm_conf() {
    local acct_lines
    if [[ "$ACCOUNTING" == 1 ]]; then
        acct_lines="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
JobAcctGatherType=jobacct_gather/linux"
    else
        acct_lines="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
    fi
    cat <<EOF
$MARKER
# One-node sandbox on 127.0.0.1 (see docs/slurm-sandbox.md). Scratch dir: $DIR
ClusterName=gymslurm
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
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
MinJobAge=600
MailProg=/bin/true
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
$acct_lines
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=8 RealMemory=4096 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP PreemptMode=OFF
PartitionName=low Nodes=$NODE MaxTime=INFINITE State=UP PreemptMode=REQUEUE GraceTime=5
PartitionName=high Nodes=$NODE MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
}

# write_owned_file PATH MODE: stdin -> PATH, only if PATH is absent or carries $MARKER.
# Prints "changed" when the content differs from what was there.
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

# If our slurm.conf is about to change while slurmctld runs (e.g. GYMSLURM_ACCOUNTING toggled),
# stop the daemons first with the pid files of the *old* config; running jobs survive.
restart_if_config_changes() {
    [[ -e "$CONF" ]] && grep -qxF "$MARKER" "$CONF" || return 0
    [[ "$(cat "$CONF")" != "$(render_slurm_conf)" ]] || return 0
    running "$(conf_value SlurmctldPidFile)" slurmctld || return 0
    log "slurm.conf changes while the cluster runs: restarting the daemons (jobs are kept)"
    bash "$HERE/slurm-down.sh" --keep-jobs
}

conf_value() { sed -n "s/^$1=//p" "$CONF" | tail -n 1; }

# --- accounting (optional) --------------------------------------------------------------------

start_accounting() {
    ensure_packages slurmdbd mariadb-server
    install -d -o mysql -g mysql -m 0755 /run/mysqld
    install -d -o mysql -g mysql -m 0750 "$DIR/db"
    if [[ ! -d "$DIR/db/data/mysql" ]]; then
        log "initialising MariaDB datadir $DIR/db/data"
        mariadb-install-db --user=mysql --datadir="$DIR/db/data" \
            --auth-root-authentication-method=socket >"$DIR/log/mariadb-install.log" 2>&1 ||
            die "mariadb-install-db failed; see $DIR/log/mariadb-install.log"
    fi
    if ! running "$DIR/db/mariadbd.pid" mariadbd; then
        # --skip-networking: no TCP at all, socket only. Pid and log live in the mysql-owned db dir.
        nohup /usr/sbin/mariadbd --user=mysql --datadir="$DIR/db/data" --skip-networking \
            --socket=/run/mysqld/mysqld.sock --pid-file="$DIR/db/mariadbd.pid" \
            --log-error="$DIR/db/mariadbd.log" >/dev/null 2>&1 &
        wait_for 30 "mariadbd (log $DIR/db/mariadbd.log)" \
            mariadb --socket=/run/mysqld/mysqld.sock -e 'SELECT 1'
        STARTED+=(mariadbd)
    fi
    write_owned_file "$DBD_CONF" 0600 >/dev/null <<EOF
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
    # slurmdbd connects over the default socket path when StorageHost=localhost.
    if ! running "$DIR/run/slurmdbd.pid" slurmdbd; then
        /usr/sbin/slurmdbd >>"$DIR/log/slurmdbd.start.log" 2>&1 ||
            die "slurmdbd exited at start-up; see $DIR/log/slurmdbd.log"
        STARTED+=(slurmdbd)
        wait_for 30 "slurmdbd (log $DIR/log/slurmdbd.log)" sacctmgr -n list cluster
    fi
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx gymslurm; then
        sacctmgr -i add cluster gymslurm >/dev/null
    fi
}

# --- wait and report --------------------------------------------------------------------------

cluster_failed() {
    {
        printf 'slurm-up: ERROR: the cluster did not come up: %s\n' "$1"
        printf -- '--- sinfo ---\n'
        sinfo -N 2>&1 || true
        local f
        for f in "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" "$DIR/log/slurmctld.start.log" \
            "$DIR/log/slurmd.start.log"; do
            [[ -s "$f" ]] || continue
            printf -- '--- tail of %s ---\n' "$f"
            tail -n 15 "$f"
        done
        printf 'slurm-up: fix the cause above, then run: bash launchers/slurm-down.sh && bash launchers/slurm-up.sh\n'
    } >&2
    exit 1
}

node_state() { sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n 1; }

wait_for_node() {
    local state="" i resumed=0
    for ((i = 0; i < UP_TIMEOUT * 5; i++)); do
        state="$(node_state || true)"
        case "$state" in
        idle | mixed | allocated | completing) return 0 ;;
        drain* | down* | fail*)
            if [[ $resumed -eq 0 && "$state" != *'*' ]]; then
                log "node $NODE is '$state': resuming it"
                scontrol update nodename="$NODE" state=resume || true
                resumed=1
            fi
            ;;
        esac
        sleep 0.2
    done
    cluster_failed "node $NODE is '${state:-no answer from slurmctld}' after ${UP_TIMEOUT}s (want idle/mixed/allocated)"
}

ensure_test_user() {
    id -u "$TEST_USER" >/dev/null 2>&1 && return 0
    log "creating non-root test user '$TEST_USER'"
    useradd -m -s /bin/bash "$TEST_USER"
}

# --- main -------------------------------------------------------------------------------------

main() {
    [[ $EUID -eq 0 ]] || die "run as root (it installs packages and starts daemons): sudo bash $0"
    install -d -m 0755 "$DIR" "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log"
    ensure_packages slurmctld slurmd slurm-client munge
    ensure_hostname_resolves
    ensure_test_user
    STARTED=()
    restart_if_config_changes
    render_slurm_conf | write_owned_file "$CONF" 0644
    DIR_CONF="$(dirname "$(conf_value SlurmctldPidFile)")"
    start_munged
    [[ "$ACCOUNTING" == 1 ]] && start_accounting
    if ! running "$(conf_value SlurmctldPidFile)" slurmctld; then
        # A drained/INVAL node state survives restarts even after the config is fixed (pitfall 2);
        # jobs are kept (job_state is not touched).
        rm -f "$(conf_value StateSaveLocation)"/node_state*
    fi
    start_slurm_daemon slurmctld "$(conf_value SlurmctldPidFile)"
    start_slurm_daemon slurmd "$(conf_value SlurmdPidFile)"
    wait_for_node
    local jobcomp
    jobcomp="$(conf_value JobCompLoc)"
    # slurmctld fchmods it to 0644 on open; non-root `sacct -c` opens it O_WRONLY (pitfall 8).
    [[ -n "$jobcomp" ]] && touch "$jobcomp" && chmod 666 "$jobcomp"
    local started="already running"
    [[ ${#STARTED[@]} -gt 0 ]] && started="started ${STARTED[*]}"
    log "node $NODE is $(node_state) ($started; partitions: $(sinfo -h -o %P | tr '\n' ' '))"
    log "config $CONF, state/logs under ${DIR_CONF%/run}, test user $TEST_USER, accounting=$([[ "$ACCOUNTING" == 1 ]] && echo slurmdbd || echo jobcomp-only)"
    log "up in $(elapsed)s"
}

main "$@"
