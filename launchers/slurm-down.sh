#!/usr/bin/env bash
# Stop the Slurm sandbox started by launchers/slurm-up.sh (clusters a, b, n and their nodes).
#
# Why: tests and demos need a way back to a machine with no daemons. It cancels all jobs of every
# cluster first (unless --keep-jobs: stopping slurmd alone leaves running jobs' slurmstepd alive,
# and a later slurm-up.sh picks them up again), then stops each slurmd, each slurmctld, slurmdbd,
# mariadbd and munged by its own pid file, and waits for each to exit. Without --keep-jobs it
# then removes the network it made: the namespaces gs-<node>, the bridge gsbr0 and the node block
# in /etc/hosts (with --keep-jobs they stay: surviving jobs live in those namespaces). It keeps
# the configs, the scratch dir (state, logs, jobcomp files, MariaDB data), packages and the user.
#
# Usage: bash launchers/slurm-down.sh [--keep-jobs]
set -euo pipefail

DIR="${GYMSLURM_SANDBOX_DIR:-/var/lib/gymslurm-sandbox}"
ETC="${GYMSLURM_ETC:-/etc/slurm}"
DBD_CONF="$ETC/slurmdbd.conf"
STOP_TIMEOUT="${GYMSLURM_STOP_TIMEOUT:-30}"
BRIDGE=gsbr0
HOSTS_BEGIN="# gymslurm-sandbox nodes: begin (launchers/slurm-up.sh; slurm-down.sh removes this block)"
HOSTS_END="# gymslurm-sandbox nodes: end"
KEEP_JOBS=0
T0="$(date +%s.%N)"

log() { printf 'slurm-down: %s\n' "$*"; }
die() {
    printf 'slurm-down: ERROR: %s\n' "$*" >&2
    exit 1
}
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

for arg in "$@"; do
    case "$arg" in
    --keep-jobs) KEEP_JOBS=1 ;;
    -h | --help)
        sed -n '2,12p' "$0"
        exit 0
        ;;
    *) die "unknown argument '$arg' (usage: bash launchers/slurm-down.sh [--keep-jobs])" ;;
    esac
done
[[ $EUID -eq 0 ]] || die "run as root (it stops root-owned daemons): sudo bash $0 $*"

# conf_value FILE KEY DEFAULT: the last KEY=value in FILE, or DEFAULT.
conf_value() {
    local v=""
    [[ -r "$1" ]] && v="$(sed -n "s/^$2=//p" "$1" | tail -n 1)"
    printf '%s' "${v:-$3}"
}

# live_pid PIDFILE COMM: print the pid if it names a live process with that /proc/PID/comm.
live_pid() {
    local pid
    [[ -r "$1" ]] || return 1
    pid="$(tr -dc '0-9' <"$1")"
    [[ -n "$pid" && -r "/proc/$pid/comm" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$2" ]] || return 1
    printf '%s' "$pid"
}

# stop_daemons COMM PIDFILE...: SIGTERM all, then wait for each (SIGKILL after STOP_TIMEOUT).
stop_daemons() {
    local comm="$1" pidfile pid i pids=()
    shift
    for pidfile in "$@"; do
        pid="$(live_pid "$pidfile" "$comm")" || continue
        [[ " ${pids[*]} " == *" $pid "* ]] && continue # one pid file named twice (the one-node layout)
        kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    done
    for pid in "${pids[@]}"; do
        for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
            [[ -d "/proc/$pid" ]] || break
            sleep 0.1
        done
        if [[ -d "/proc/$pid" ]]; then
            log "$comm (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s: sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            STOPPED+=("$comm(killed)")
        else
            STOPPED+=("$comm")
        fi
    done
}

# The sandbox's cluster configs: a (/etc/slurm/slurm.conf) and any /etc/slurm/cluster-*/.
configs() {
    local f
    [[ -r "$ETC/slurm.conf" ]] && echo "$ETC/slurm.conf"
    for f in "$ETC"/cluster-*/slurm.conf; do [[ -r "$f" ]] && echo "$f"; done
    return 0
}

cancel_jobs() { # cancel_jobs CONF
    local conf="$1" ids i
    ids="$(SLURM_CONF="$conf" timeout 20 squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')" || return 0
    [[ -n "${ids// /}" ]] || return 0
    log "cancelling jobs of $(conf_value "$conf" ClusterName '?'): $ids"
    # shellcheck disable=SC2086 # word splitting of the id list is intended
    SLURM_CONF="$conf" timeout 20 scancel $ids || true
    # Wait until nothing is running or completing, so no slurmstepd outlives slurmd
    # (a job that ignores SIGTERM holds on for KillWait=10 s).
    for ((i = 0; i < STOP_TIMEOUT * 5; i++)); do
        [[ -z "$(SLURM_CONF="$conf" timeout 20 squeue -h -t running,completing,configuring -o %A 2>/dev/null)" ]] && return 0
        sleep 0.2
    done
    log "some jobs were still running or completing after ${STOP_TIMEOUT}s"
}

remove_network() {
    local ns removed=0
    for ns in /var/run/netns/gs-*; do
        [[ -e "$ns" ]] || continue
        ip netns del "$(basename "$ns")" 2>/dev/null && removed=$((removed + 1))
    done
    # A veth whose namespace is gone disappears with it; any host end left over goes now.
    local link
    for link in $(ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: \(gsv-[^@:]*\).*/\1/p'); do
        ip link del "$link" 2>/dev/null || true
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
    if grep -qxF "$HOSTS_BEGIN" /etc/hosts 2>/dev/null; then
        local rest
        rest="$(awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b { skip = 1 } !skip { print } $0 == e { skip = 0 }' /etc/hosts)"
        printf '%s\n' "$rest" >/etc/hosts
    fi
    NETWORK="removed $removed namespaces, bridge $BRIDGE and the /etc/hosts block"
}

main() {
    STOPPED=()
    NETWORK="network kept (--keep-jobs)"
    local conf ctlds=() slurmds=() run
    for conf in $(configs); do
        run="$(dirname "$(conf_value "$conf" SlurmctldPidFile "$DIR/run/slurmctld.pid")")"
        # Without a live slurmctld, squeue would retry for ~9 s before failing: skip it.
        if [[ $KEEP_JOBS -eq 0 ]] && live_pid "$run/slurmctld.pid" slurmctld >/dev/null; then
            cancel_jobs "$conf"
        fi
        ctlds+=("$run/slurmctld.pid")
        slurmds+=("$run"/slurmd*.pid)
    done
    # The one-node sandbox of before kept its pid files directly under $DIR/run.
    ctlds+=("$DIR/run/slurmctld.pid")
    slurmds+=("$DIR/run/slurmd.pid")
    stop_daemons slurmd "${slurmds[@]}"
    stop_daemons slurmctld "${ctlds[@]}"
    stop_daemons slurmdbd "$(conf_value "$DBD_CONF" PidFile "$DIR/run/slurmdbd.pid")"
    stop_daemons mariadbd "$DIR/db/mariadbd.pid"
    # GYMSLURM_KEEP_MUNGED=1: another Slurm on this machine shares munged.
    [[ "${GYMSLURM_KEEP_MUNGED:-0}" == 1 ]] || stop_daemons munged /run/munge/munged.pid
    [[ $KEEP_JOBS -eq 0 ]] && remove_network
    local what="nothing was running"
    [[ ${#STOPPED[@]} -gt 0 ]] && what="stopped ${STOPPED[*]}"
    log "$what; jobs $([[ $KEEP_JOBS -eq 1 ]] && echo kept || echo cancelled); $NETWORK; down in $(elapsed)s"
    log "kept: /etc/slurm configs, $DIR (state, logs, jobcomp files, MariaDB data), packages, user slurmtest"
}

main
