#!/usr/bin/env bash
# Stop the one-node Slurm sandbox started by launchers/slurm-up.sh.
#
# Why: tests and demos need a way back to a machine with no daemons. It cancels all jobs first
# (unless --keep-jobs: stopping slurmd alone leaves running jobs' slurmstepd alive, and a later
# slurm-up.sh picks them up again), then stops slurmd, slurmctld, slurmdbd, mariadbd and munged,
# each by its own pid file, and waits for each to exit. It removes nothing: the config, the
# scratch dir (state, logs, jobcomp file), packages and the test user stay.
#
# Usage: bash launchers/slurm-down.sh [--keep-jobs]
set -euo pipefail

DIR="${GYMSLURM_SANDBOX_DIR:-/var/lib/gymslurm-sandbox}"
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
STOP_TIMEOUT="${GYMSLURM_STOP_TIMEOUT:-30}"
KEEP_JOBS=0
T0="$(date +%s.%N)"

log() { printf 'slurm-down: %s\n' "$*"; }
die() {
    printf 'slurm-down: ERROR: %s\n' "$*" >&2
    exit 1
}
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

for arg in "$@"; do
    case "$arg" in
    --keep-jobs) KEEP_JOBS=1 ;;
    -h | --help)
        sed -n '2,10p' "$0"
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

stop_daemon() { # stop_daemon COMM PIDFILE
    local comm="$1" pidfile="$2" pid i
    pid="$(live_pid "$pidfile" "$comm")" || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        [[ -d "/proc/$pid" ]] || {
            STOPPED+=("$comm")
            return 0
        }
        sleep 0.1
    done
    log "$comm (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s: sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    STOPPED+=("$comm(killed)")
}

cancel_jobs() {
    local ids i
    ids="$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')" || return 0
    [[ -n "${ids// /}" ]] || return 0
    log "cancelling jobs: $ids"
    # shellcheck disable=SC2086 # word splitting of the id list is intended
    scancel $ids || true
    # Wait until nothing is running or completing, so no slurmstepd outlives slurmd
    # (a job that ignores SIGTERM holds on for KillWait=10 s).
    for ((i = 0; i < STOP_TIMEOUT * 5; i++)); do
        [[ -z "$(squeue -h -t running,completing,configuring -o %A 2>/dev/null)" ]] && return 0
        sleep 0.2
    done
    log "some jobs were still running or completing after ${STOP_TIMEOUT}s: $(squeue -h -o '%A %T' | tr '\n' ' ')"
}

main() {
    STOPPED=()
    local run ctld_pidfile
    ctld_pidfile="$(conf_value "$CONF" SlurmctldPidFile "$DIR/run/slurmctld.pid")"
    run="$(dirname "$ctld_pidfile")"
    # Without a live slurmctld, squeue would retry for ~9 s before failing: skip it.
    if [[ $KEEP_JOBS -eq 0 ]] && live_pid "$ctld_pidfile" slurmctld >/dev/null; then cancel_jobs; fi
    stop_daemon slurmd "$(conf_value "$CONF" SlurmdPidFile "$run/slurmd.pid")"
    stop_daemon slurmctld "$ctld_pidfile"
    stop_daemon slurmdbd "$(conf_value "$DBD_CONF" PidFile "$run/slurmdbd.pid")"
    stop_daemon mariadbd "$(dirname "$run")/db/mariadbd.pid"
    stop_daemon munged /run/munge/munged.pid
    local what="nothing was running"
    [[ ${#STOPPED[@]} -gt 0 ]] && what="stopped ${STOPPED[*]}"
    log "$what; jobs $([[ $KEEP_JOBS -eq 1 ]] && echo kept || echo cancelled); down in $(elapsed)s"
    log "kept: /etc/slurm/slurm.conf, $DIR (state, logs, jobcomp.txt), packages, user slurmtest"
}

main
