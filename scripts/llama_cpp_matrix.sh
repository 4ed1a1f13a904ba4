#!/usr/bin/env bash
# Measure the real llama.cpp server on this machine's CPU: build llama-server (cached),
# make the tiny random-weight model (cached), serve it with 4 slots of 4,096 tokens on one
# thread, run an llmload matrix against it, and stop the server.
#
#   scripts/llama_cpp_matrix.sh [llmload run options...]
#
# Default matrix: contexts 0, 1K, 3K, 4K × N 1, 2, 4, 8; 256 output tokens; 10 s windows.
# LLAMA_SERVER_ARGS adds server options, LLAMA_MODEL_ARGS options of make_gguf_model.py:
#   LLAMA_SERVER_ARGS="--embeddings --pooling mean" scripts/llama_cpp_matrix.sh --endpoint embeddings ...
#   LLAMA_MODEL_ARGS=--rerank LLAMA_SERVER_ARGS=--reranking scripts/llama_cpp_matrix.sh --endpoint rerank ...
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
BIN="$(bash scripts/build_llama_server.sh)"
MODEL="$("$PY" scripts/make_gguf_model.py ${LLAMA_MODEL_ARGS:-})"
LOG="$(mktemp)"
"$BIN" -m "$MODEL" --host 127.0.0.1 --port 0 -t 1 -tb 1 -c 16384 -np 4 --metrics --no-webui ${LLAMA_SERVER_ARGS:-} >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -f "$LOG"' EXIT
URL=""
for _ in $(seq 600); do
    URL="$(grep -o 'listening on http://[^ ]*' "$LOG" | head -1 | cut -d' ' -f3 || true)"
    [ -n "$URL" ] && curl -sf "$URL/health" >/dev/null 2>&1 && break
    kill -0 $SERVER 2>/dev/null || { cat "$LOG" >&2; exit 1; }
    sleep 0.2
done
[ -n "$URL" ] || { echo "llama-server did not start" >&2; exit 1; }
# The defaults first: options given to this script come later and win.
"$PY" -m llmload run --host "$URL" \
    --launch-command "llama-server -m $(basename "$MODEL") -c 16384 -np 4 -t 1 --metrics${LLAMA_SERVER_ARGS:+ $LLAMA_SERVER_ARGS}" \
    --contexts 0,1K,3K,4K --prefill-contexts 1K,3K --concurrency 1,2,4,8 --max-tokens 256 --duration 10s "$@"
