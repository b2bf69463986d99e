#!/usr/bin/env bash
# bench/adaptive.py against a GPU vLLM with a small real model: the same figures as `--vllm` (fixed
# 4, 8, 16, 32, 64 against the adaptive limit, p99, ratios in the same run), on a machine with a GPU.
# Not part of the test command. Run from the repository root:
#
#   bash bench/gpu_vllm.sh [--n 2000]
#
# MODEL (default Qwen/Qwen2.5-0.5B-Instruct: a hub download, or a local directory),
# GYMSLURM_VLLM_PACKAGE (default vllm==0.11.0) and GYMSLURM_VLLM_PYTHON (default /usr/bin/python3.11,
# else python3.11) choose what launchers/vllm-up.sh installs into its cache: docs/servers.md's GPU
# recipe, which differs from the CPU one only in the package and the flags. The server runs in a session of its own and its whole
# process group is stopped on any exit (a kill of the API server alone leaves EngineCore running).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_vllm: no GPU here (nvidia-smi lists none); the CPU form is: python bench/adaptive.py --vllm" >&2
    exit 2
fi
model="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"
export GYMSLURM_VLLM_PACKAGE="${GYMSLURM_VLLM_PACKAGE:-vllm==0.11.0}"
venv="$(bash launchers/vllm-up.sh | sed -n 's/^GYMSLURM_VLLM_VENV=//p')"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
log="$(mktemp "${TMPDIR:-/tmp}/gpu-vllm.XXXXXX")"

VLLM_NO_USAGE_STATS=1 setsid "$venv/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$model" --served-model-name tiny --host 127.0.0.1 --port "$port" \
    --max-model-len 512 --max-num-seqs 32 --gpu-memory-utilization 0.9 >"$log" 2>&1 &
pgid=$!
trap 'kill -TERM -- -"$pgid" 2>/dev/null; sleep 5; kill -KILL -- -"$pgid" 2>/dev/null || true' EXIT

echo "gpu_vllm: $model on port $port (log $log)"
for _ in $(seq 1 1800); do
    kill -0 "$pgid" 2>/dev/null || { tail -30 "$log" >&2; exit 1; }
    curl -fsS -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null && break
    sleep 0.5
done
python3 bench/adaptive.py --vllm-url "http://127.0.0.1:$port" "$@"
