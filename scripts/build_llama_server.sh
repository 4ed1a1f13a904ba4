#!/usr/bin/env bash
# Build llama.cpp's native llama-server from the llama.cpp sources vendored in the PyPI
# source distribution of llama-cpp-python (pinned), into a cache outside the checkout.
# A cached binary is reused (seconds); a fresh build takes about 10 minutes on 2 cores.
# Portable build (GGML_NATIVE=OFF): a cached binary never meets a CPU it cannot run on.
# Prints the path of the binary on its last line.
set -euo pipefail
VERSION="${LLMLOAD_LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${LLMLOAD_CACHE:-$HOME/.cache/llmload}"
DEST="$CACHE/llama-server-$VERSION-$(uname -m)"
BIN="$DEST/bin/llama-server"
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    echo "$BIN"; exit 0
fi
command -v c++ >/dev/null || { echo "build_llama_server: no C++ compiler (c++) on PATH" >&2; exit 3; }
CMAKE=cmake
if ! command -v cmake >/dev/null; then
    python3 -m pip install -q --target "$CACHE/cmake-pip" cmake >&2
    CMAKE="$CACHE/cmake-pip/bin/cmake"; export PYTHONPATH="$CACHE/cmake-pip"
fi
WORK="$CACHE/build-llama-$VERSION"
rm -rf "$WORK"; mkdir -p "$WORK"
python3 -m pip download -q --no-deps --no-binary :all: \
    -d "$WORK" "llama-cpp-python==$VERSION" >&2
tar -xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
"$CMAKE" -S "$SRC" -B "$WORK/build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >&2
"$CMAKE" --build "$WORK/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$DEST/bin.tmp"
cp "$WORK/build/bin/llama-server" "$DEST/bin.tmp/"
rm -rf "$DEST/bin"; mv "$DEST/bin.tmp" "$DEST/bin"
rm -rf "$WORK"
echo "$BIN"
