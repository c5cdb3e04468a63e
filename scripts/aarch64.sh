#!/usr/bin/env bash
# aarch64 check: the kernels and the runtime cross-compiled for aarch64-linux and
# their tests run under qemu-user, once on a CPU with the dot-product extension
# (NEON + sdot kernels) and once on a Cortex-A53 (NEON only: the NEON float
# kernels and the int8 GEMM on smull + sadalp instead of sdot).
# Installs what it needs: the Rust target, a cross linker and qemu-user.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=aarch64-unknown-linux-gnu

if ! rustup target list --installed | grep -qx "$TARGET"; then
  rustup target add "$TARGET"
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user gcc-aarch64-linux-gnu
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# qemu-user keeps memory of its own for every guest thread, so the resident-size
# check of the lifetime test means nothing here (its heap check still runs).
export FERRITE_EMULATED=1
for cpu in max cortex-a53; do
  echo "-- aarch64 tests on a qemu '$cpu' CPU"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L /usr/aarch64-linux-gnu" \
    cargo test --release --locked --target "$TARGET" -p ferrite-kernels -p ferrite
done
