#!/bin/sh
# Start NeMo Gym's weather stack for one gymslurm job (configs/benchmarks/nemo_gym_weather.yaml runs it).
#
#   start_stack.sh HEAD_PORT
#
# 1. NeMo Gym 0.7.0's venv: $NEMO_GYM_VENV, else <cache>/nemo-gym-0.7.0 in the compat suite's cache
#    (tests/compat/nemogym.py cache_dir: $GYMSLURM_NEMOGYM_CACHE, else /var/cache/gymslurm-nemogym when
#    writable, else ~/.cache/gymslurm-nemogym, so a non-root user works too); when it has no `gym`, it is installed there first from
#    PyPI (`pip download nemo-gym==0.7.0` + a Python >= 3.13 venv: about 75 s and 1.4 GB, once, under a lock).
#    On a cluster the job user must be able to run it and to write its directory (gym env start writes
#    <venv>.setup.lock beside it and a marker inside it).
# 2. NeMo Gym's per-server venvs: `gym env start +skip_venv_if_present=true` wants
#    <uv_venv_dir>/<type>/<name>/.venv for every server of the stack (else it builds one with uv, and a
#    machine without uv fails with `uv: command not found`): each is linked to the one NeMo Gym venv, in a
#    directory of this job's own.
# 3. The head server listens on HEAD_PORT (gymslurm picks a free port per job: the benchmark's `port: 0`);
#    every other server has no port in weather_stack.yaml, so NeMo Gym picks free ones. The collector finds
#    the relay by name in the head server's configuration (+environment_server_name).
set -eu
head_port="$1"
here="$(cd "$(dirname "$0")" && pwd)"
cache="${GYMSLURM_NEMOGYM_CACHE:-}"
if [ -z "$cache" ]; then
    cache=/var/cache/gymslurm-nemogym
    mkdir -p "$cache" 2>/dev/null || true
    if [ ! -w "$cache" ]; then
        cache="$HOME/.cache/gymslurm-nemogym"
    fi
fi
venv="${NEMO_GYM_VENV:-$cache/nemo-gym-0.7.0}"

if [ ! -x "$venv/bin/gym" ]; then
    python313="${GYMSLURM_PYTHON313:-}"
    if [ -z "$python313" ]; then
        for candidate in "$HOME"/.pyenv/versions/3.13*/bin/python python3.13; do
            if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 13))'; then
                python313="$candidate"
                break
            fi
        done
    fi
    if [ -z "$python313" ]; then
        echo "error: NeMo Gym 0.7.0 needs Python >= 3.13 and none was found: set GYMSLURM_PYTHON313=/path/to/python3.13 or NEMO_GYM_VENV to an existing NeMo Gym venv" >&2
        exit 2
    fi
    mkdir -p "$(dirname "$venv")"
    (
        flock 9
        if [ ! -x "$venv/bin/gym" ]; then
            download="$(dirname "$venv")/download"
            "$python313" -m pip download -q --no-deps nemo-gym==0.7.0 --python-version 3.13.14 --only-binary=:all: -d "$download"
            rm -rf "$venv"
            "$python313" -m venv "$venv"
            "$venv/bin/pip" install -q --disable-pip-version-check --ignore-requires-python "$download"/nemo_gym-0.7.0-py3-none-any.whl
        fi
    ) 9>"$(dirname "$venv")/.install.lock"
fi

venvs="${TMPDIR:-/tmp}/gymslurm-nemo-gym-venvs-$(id -u)"  # the same links for every job of this user
for server in responses_api_models/openai_model resources_servers/example_single_tool_call \
              responses_api_agents/simple_agent environment_servers/legacy_agent; do
    mkdir -p "$venvs/$server"
    ln -sfn "$venv" "$venvs/$server/.venv"
done
exec "$venv/bin/gym" env start "+config_paths=[$here/weather_stack.yaml]" "+uv_venv_dir=$venvs" \
    +skip_venv_if_present=true +head_server.host=127.0.0.1 "+head_server.port=$head_port"
