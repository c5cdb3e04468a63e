#!/usr/bin/env bash
# Library size: builds the C library and the CLI with the `dist` profile (what ships:
# LTO, one codegen unit) and prints their stripped sizes, full (every op, the default
# features) and selective (the C library with only the op families and element types
# the wake-word models use, as `ferrite features` lists them, without training and
# observability, with every x86-64 vector level chosen at run time as in the default
# build). On x86-64 also the selective build for a device with AVX2 and no AVX-512
# (feature `x86-avx2` alone: the AVX-512 kernels are left out). With --aarch64 the
# same for aarch64-linux (cross toolchain of scripts/aarch64.sh, installed there).
#
#   scripts/size.sh [--aarch64] [--json FILE]
#
# Targets (issue 16): full <= 1.5 MB, selective <= 400 KB. Prints the figures; fails
# only when a build fails. The stripped copies go to target/size/.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${FERRITE_CACHE:-$HOME/.cache/ferrite}"
WAKE="$CACHE/models/pymicro-wakeword-2.5.0/pymicro_wakeword/models"
TARGETS=(x86_64-unknown-linux-gnu)
JSON=""
while [ $# -gt 0 ]; do
  case "$1" in
    --aarch64) TARGETS+=(aarch64-unknown-linux-gnu) ;;
    --json) JSON="$2"; shift ;;
    *) echo "usage: $0 [--aarch64] [--json FILE]" >&2; exit 2 ;;
  esac
  shift
done
OUT=target/size
mkdir -p "$OUT"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc

# The wake-word feature list, from the models themselves (the release CLI; the CI has
# built it already).
[ -x target/release/ferrite ] || cargo build --release --locked -p ferrite-cli
FEATURES=$(target/release/ferrite features "$WAKE"/*.tflite 2>/dev/null)
QUALIFIED=$(echo "$FEATURES" | tr ',' '\n' | sed 's|^|ferrite/|' | paste -sd, -)
echo "wake-word models ($(ls "$WAKE" | tr '\n' ' ')) need: $FEATURES"

# Each package is built on its own: cargo unifies features across the packages of one
# invocation, and the CLI's `gpu` feature would otherwise pull wgpu into the C library.
# The CLI (a tool, with the wgpu backend) is measured from the release profile: an LTO
# build of wgpu costs CI minutes and the CLI is not what an application ships.
rows=()
size_of() { stat -c %s "$1"; }
for t in "${TARGETS[@]}"; do
  if [ "$t" = x86_64-unknown-linux-gnu ]; then dir=target/dist; rel=target/release; strip=strip; tflag=(); else dir=target/$t/dist; rel=target/$t/release; strip=aarch64-linux-gnu-strip; tflag=(--target "$t"); fi
  cargo build --profile dist --locked "${tflag[@]}" -p ferrite-capi
  # The aarch64 CLI (wgpu cross-compiled) is measured only when built already: the
  # issue's rows are the C library's.
  [ "$t" != x86_64-unknown-linux-gnu ] || [ -x "$rel/ferrite" ] || cargo build --release --locked -p ferrite-cli
  $strip -o "$OUT/libferrite_c.$t.full.so" "$dir/libferrite_c.so"
  lib=$(size_of "$OUT/libferrite_c.$t.full.so")
  if [ -x "$rel/ferrite" ]; then
    $strip -o "$OUT/ferrite.$t.release" "$rel/ferrite"
    cli=$(size_of "$OUT/ferrite.$t.release")
    echo "$t full:      libferrite_c.so $lib B (dist profile), ferrite CLI $cli B (release profile, with the gpu backend) (stripped)"
  else
    cli=null
    echo "$t full:      libferrite_c.so $lib B (dist profile, stripped); no $rel/ferrite to measure"
  fi
  rows+=("{\"target\": \"$t\", \"build\": \"full\", \"lib\": $lib, \"cli\": $cli}")
  # The x86-64 vector levels are named: they are the device's choice, not the models'.
  cargo build --profile dist --locked "${tflag[@]}" -p ferrite-capi --no-default-features --features "$QUALIFIED,x86-avx512,x86-avx2"
  $strip -o "$OUT/libferrite_c.$t.wakeword.so" "$dir/libferrite_c.so"
  lib=$(size_of "$OUT/libferrite_c.$t.wakeword.so")
  echo "$t selective: libferrite_c.so $lib B (stripped; $FEATURES; run-time choice of x86-64 vector level)"
  rows+=("{\"target\": \"$t\", \"build\": \"selective (wake word)\", \"lib\": $lib}")
  if [ "$t" = x86_64-unknown-linux-gnu ]; then
    # A device with AVX2 and no AVX-512: that level alone beside the baseline kernels.
    cargo build --profile dist --locked -p ferrite-capi --no-default-features --features "$QUALIFIED,x86-avx2"
    $strip -o "$OUT/libferrite_c.$t.wakeword-avx2.so" "$dir/libferrite_c.so"
    lib=$(size_of "$OUT/libferrite_c.$t.wakeword-avx2.so")
    echo "$t selective, AVX2 device: libferrite_c.so $lib B (stripped; $FEATURES; x86-avx2 only, no AVX-512 kernels)"
    rows+=("{\"target\": \"$t\", \"build\": \"selective (wake word), AVX2 device\", \"lib\": $lib}")
  fi
done
if [ -n "$JSON" ]; then
  (IFS=,; echo "{\"selective_features\": \"$FEATURES\", \"rows\": [${rows[*]}]}") > "$JSON"
  echo "wrote $JSON"
fi
