#!/usr/bin/env bash
# The project's one test command, for people and CI alike: bash launchers/test-all.sh [pytest args]
#
# Steps: install gymslurm with its test extra (editable), start installing the real vLLM of the
# vLLM tests in the background (launchers/vllm-up.sh: a cached venv, about 7 minutes the first
# time; the vLLM tests wait on its lock), bring up the multi-node Slurm sandbox
# (as root; otherwise say how), install Debian's chromium for the report's browser test (as root),
# run the whole pytest suite in parallel workers (extra args pass through), then
# `ruff check`, `ruff format --check` and `mypy`. Every step runs even if an earlier one failed, so one run shows all
# problems; the exit code is non-zero if any step failed. pytest's "no tests collected" (5)
# counts as a failure: a suite that ran nothing must not look green.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
PY="${PYTHON:-python3}"
FAILED=()
T0="$(date +%s)"

step() { printf '\n=== test-all: %s ===\n' "$*"; }
fail() {
    printf 'test-all: FAILED: %s\n' "$*" >&2
    FAILED+=("$1")
}

step "install ($PY -m pip install -e '.[test]')"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    printf 'test-all: ERROR: %s is %s; gymslurm needs Python >= 3.11 (set PYTHON=/path/to/python3.11)\n' \
        "$PY" "$("$PY" -V 2>&1)" >&2
    exit 1
fi
if ! "$PY" -m pip install --disable-pip-version-check -q -e '.[test]'; then
    printf 'test-all: ERROR: installing the package failed (see pip output above); nothing was tested\n' >&2
    exit 1
fi

step "vLLM (launchers/vllm-up.sh, in the background: log in \$TMPDIR)"
# Beside the sandbox's and chromium's installs, not before the suite: tests/vllm/ runs
# launchers/vllm-up.sh itself, which waits on this one's lock and then finds the venv complete.
vllm_log="$(mktemp "${TMPDIR:-/tmp}/gymslurm-vllm-up.XXXXXX")"
# At the lowest CPU priority: on 2 cores its pip install starved the suite's first stacks (CI: NeMo
# Gym's 34 shipped servers, 11 ready after 8 minutes beside it); the vLLM tests wait for it anyway.
nice -n 19 bash launchers/vllm-up.sh >"$vllm_log" 2>&1 &
vllm_pid=$!
echo "test-all: installing vLLM in the background (pid $vllm_pid, log $vllm_log)"

step "Slurm sandbox"
if [[ $EUID -eq 0 ]]; then
    # Bounded: a failing apt mirror or a node that never comes up must not hang CI.
    timeout "${GYMSLURM_UP_LIMIT:-1200}" bash launchers/slurm-up.sh ||
        fail "slurm-up (the Slurm tests will fail too; see the log tail above)"
    # Jobs an interrupted earlier run left to the test user would compete with this run's jobs
    # (and make the node-DOWN test wait for a quiet node): the test user's queues start empty, on
    # every cluster of the sandbox (a and b through slurmdbd, n through its own config).
    # A chain's running link may queue a successor as it dies, so cancel until the queues stay empty.
    test_user="${GYMSLURM_TEST_USER:-slurmtest}"
    for conf in /etc/slurm/slurm.conf /etc/slurm/cluster-*/slurm.conf; do
        [[ -r "$conf" ]] || continue
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            [[ -z "$(SLURM_CONF="$conf" timeout 20 squeue -h -u "$test_user" 2>/dev/null)" ]] && break
            SLURM_CONF="$conf" timeout 20 scancel -u "$test_user" 2>/dev/null || true
            sleep 3
        done
    done
elif ! sinfo -h >/dev/null 2>&1; then
    printf 'test-all: no Slurm cluster answers and this is not root, so the Slurm tests will fail.\n' >&2
    printf '          start it once as root: sudo bash launchers/slurm-up.sh\n' >&2
else
    echo "test-all: not root; using the cluster that already answers sinfo"
fi

step "headless browser (Debian's chromium, for the report.html test)"
if command -v chromium >/dev/null 2>&1; then
    echo "test-all: $(chromium --version 2>/dev/null || echo chromium) is installed"
elif [[ $EUID -eq 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null ||
        fail "apt-get install chromium (the report browser test will fail too)"
else
    printf 'test-all: chromium is missing and this is not root; the report test will fail.\n' >&2
    printf '          install it once as root: sudo apt-get install -y chromium\n' >&2
fi

# The suite runs on WORKERS pytest-xdist workers (default 6, on any number of cores): most of its
# minutes are process tests that wait (on Slurm, on servers, on chains), not CPU. --dist loadgroup
# keeps the tests that share something on one worker, in file order (tests/conftest.py,
# xdist_group): the real-Slurm modules in four groups that run side by side (four workers), the
# NeMo Gym compat stacks that hold NeMo Gym's default port 11000 or share its servers' names (one
# module's stack at a time) with the tests that sample every process's command line, the other NeMo
# Gym stacks beside them (group nemogym), a module's module-scoped fixture;
# the other workers take the rest. GYMSLURM_TEST_WORKERS=N changes the count; pass -n 0 (after the
# script's name) for a serial run.
workers="${GYMSLURM_TEST_WORKERS:-6}"
# --durations: the slowest tests in the log, so the suite's time can be read from any CI run.
step "pytest -n $workers --dist loadgroup --durations=30 $*"
"$PY" -m pytest -n "$workers" --dist loadgroup --durations=30 "$@"
rc=$?
case $rc in
    0) ;;
    5) fail "pytest collected no tests (exit 5): check the selection ($*) and that tests/ exists" ;;
    *) fail "pytest (exit $rc)" ;;
esac

if ! wait "$vllm_pid"; then
    tail -20 "$vllm_log" >&2
    fail "vllm-up (the vLLM tests failed too; see the log tail above)"
fi

step "ruff check"
"$PY" -m ruff check . || fail "ruff check (run: $PY -m ruff check --fix .)"

step "ruff format --check"
"$PY" -m ruff format --check . || fail "ruff format (run: $PY -m ruff format .)"

step "mypy"
"$PY" -m mypy || fail "mypy"

elapsed=$(($(date +%s) - T0))
if [[ ${#FAILED[@]} -gt 0 ]]; then
    printf '\ntest-all: %d step(s) failed in %ss:\n' "${#FAILED[@]}" "$elapsed" >&2
    printf '  - %s\n' "${FAILED[@]}" >&2
    exit 1
fi
printf '\ntest-all: all steps passed in %ss\n' "$elapsed"
